#include "attention_checks.h"

#include "kv_cache_checks.h"
#include "validate.h"

namespace kvattn::detail {

void check_query_and_out(std::string_view fn, const TensorView& q, const TensorView& out,
                         AttentionShape& shape) {
  check_token_major(fn, "q", q);
  check_token_major(fn, "out", out);
  check_dtype_in(fn, "q", q, {DType::kF32, DType::kF16, DType::kBF16});
  check_dtype(fn, "out", out, q.dtype);
  check_device(fn, "out", out, q.device);
  for (int d = 0; d < 3; ++d) {
    KVATTN_CHECK(out.size(d) == q.size(d), fn, ": out shape must be ", q.shape_str(),
                 " (q's shape) but is ", out.shape_str());
  }
  if (q.device.is_cuda()) {
    KVATTN_CHECK(q.dtype != DType::kF32, fn, ": q dtype must be bfloat16 or float16 on ",
                 q.device, " but is float32");
  }
  shape.total_q = q.size(0);
  shape.num_heads = q.size(1);
  shape.head_dim = q.size(2);
  KVATTN_CHECK(shape.head_dim > 0 && shape.num_heads > 0, fn,
               ": q num_heads and head_dim must be > 0 but q shape is ", q.shape_str());
}

void check_heads(std::string_view fn, std::string_view kv_name, int64_t num_kv_heads,
                 int64_t kv_head_dim, AttentionShape& shape) {
  KVATTN_CHECK(kv_head_dim == shape.head_dim, fn, ": ", kv_name, " head_dim is ", kv_head_dim,
               " but q head_dim is ", shape.head_dim);
  KVATTN_CHECK(num_kv_heads > 0 && shape.num_heads % num_kv_heads == 0, fn,
               ": num_heads (", shape.num_heads, ") must be a multiple of ", kv_name,
               " num_kv_heads (", num_kv_heads, ")");
  shape.num_kv_heads = num_kv_heads;
}

void check_caches(std::string_view fn, const TensorView& q, const TensorView& k_cache,
                  const TensorView& v_cache, const TensorView& block_table, int64_t num_seqs,
                  AttentionShape& shape) {
  check_paged_cache(fn, "k_cache", k_cache);
  check_paged_cache(fn, "v_cache", v_cache);
  check_device(fn, "k_cache", k_cache, q.device);
  check_device(fn, "v_cache", v_cache, q.device);
  check_cache_dtype(fn, "k_cache", k_cache, q.dtype, "q");
  KVATTN_CHECK(v_cache.dtype == k_cache.dtype, fn, ": v_cache dtype must equal k_cache dtype (",
               k_cache.dtype, ") but is ", v_cache.dtype);
  for (int d = 0; d < 4; ++d) {
    KVATTN_CHECK(v_cache.size(d) == k_cache.size(d), fn, ": v_cache shape ",
                 v_cache.shape_str(), " must equal k_cache shape ", k_cache.shape_str());
  }
  check_heads(fn, "k_cache", k_cache.size(2), k_cache.size(3), shape);
  check_rank(fn, "block_table", block_table, 2);
  check_dtype(fn, "block_table", block_table, DType::kI32);
  check_device(fn, "block_table", block_table, q.device);
  check_dim(fn, "block_table", block_table, 0, "num_seqs", num_seqs);
  check_stride(fn, "block_table", block_table, 1, 1, "rows contiguous");
  KVATTN_CHECK(k_cache.size(1) > 0, fn, ": k_cache block_size must be > 0 but is 0");
  shape.paged = true;
  shape.num_blocks = k_cache.size(0);
  shape.block_size = k_cache.size(1);
  shape.max_blocks_per_seq = block_table.size(1);
}

void check_block_row(std::string_view fn, const TensorView& block_table, int64_t seq,
                     int64_t len, const AttentionShape& shape, std::string_view len_name) {
  const int64_t capacity = shape.max_blocks_per_seq * shape.block_size;
  KVATTN_CHECK(len <= capacity, fn, ": ", len_name, " of sequence ", seq, " is ", len,
               " but its block_table row holds at most ", capacity, " keys (",
               shape.max_blocks_per_seq, " blocks of ", shape.block_size, ")");
  const int32_t* row = block_table.ptr<const int32_t>() + seq * block_table.stride(0);
  const int64_t used = (len + shape.block_size - 1) / shape.block_size;
  for (int64_t i = 0; i < used; ++i) {
    KVATTN_CHECK(row[i] >= 0 && row[i] < shape.num_blocks, fn, ": block_table[", seq, "][", i,
                 "] is ", row[i], " but block ids must be in [0, ", shape.num_blocks, ")");
  }
}

void check_lse(std::string_view fn, const TensorView& lse, const TensorView& q,
               const AttentionShape& shape) {
  if (!lse.defined()) return;
  check_rank(fn, "lse", lse, 2);
  check_dtype(fn, "lse", lse, DType::kF32);
  check_device(fn, "lse", lse, q.device);
  check_dim(fn, "lse", lse, 0, "num_heads", shape.num_heads);
  check_dim(fn, "lse", lse, 1, "total_q", shape.total_q);
  check_contiguous(fn, "lse", lse);
}

}  // namespace kvattn::detail
