// prefill_attention entry: validates once, then dispatches on the device.
#include "kvattn/kernels/prefill_attention.h"

#include "attention_checks.h"
#include "backend.h"
#include "kv_cache_checks.h"
#include "mask_options.h"
#include "validate.h"

namespace kvattn {
namespace {

constexpr std::string_view kFn = "prefill_attention";

void check_cu_seqlens(const TensorView& cu, std::string_view name, Device device) {
  using namespace detail;
  check_rank(kFn, name, cu, 1);
  check_dtype(kFn, name, cu, DType::kI32);
  check_device(kFn, name, cu, device);
  check_contiguous(kFn, name, cu);
  KVATTN_CHECK(cu.size(0) >= 1, kFn, ": ", name, " must have num_seqs + 1 >= 1 entries but has 0");
}

// CPU only: cu_seqlens starts at 0, never decreases, and ends at `total` (the tensor's rows);
// total < 0 means "no tensor to match" (paged keys).
void check_cu_values(const TensorView& cu, std::string_view name, int64_t total,
                     std::string_view tensor_name) {
  const int32_t* v = cu.ptr<const int32_t>();
  const int64_t n = cu.size(0);
  KVATTN_CHECK(v[0] == 0, kFn, ": ", name, "[0] must be 0 but is ", v[0]);
  for (int64_t i = 1; i < n; ++i) {
    KVATTN_CHECK(v[i] >= v[i - 1], kFn, ": ", name, " must be non-decreasing but ", name, "[",
                 i, "] = ", v[i], " < ", name, "[", i - 1, "] = ", v[i - 1]);
  }
  if (total >= 0) {
    KVATTN_CHECK(v[n - 1] == total, kFn, ": ", name, "[", n - 1, "] must equal ", tensor_name,
                 " tokens (", total, ") but is ", v[n - 1]);
  }
}

}  // namespace

void prefill_attention(const PrefillArgs& a) {
  using namespace detail;
  AttentionShape shape;
  check_query_and_out(kFn, a.q, a.out, shape);
  const Device device = a.q.device;
  check_cu_seqlens(a.cu_seqlens_q, "cu_seqlens_q", device);
  check_cu_seqlens(a.cu_seqlens_k, "cu_seqlens_k", device);
  KVATTN_CHECK(a.cu_seqlens_k.size(0) == a.cu_seqlens_q.size(0), kFn,
               ": cu_seqlens_k must have ", a.cu_seqlens_q.size(0),
               " entries (like cu_seqlens_q) but has ", a.cu_seqlens_k.size(0));
  shape.num_seqs = a.cu_seqlens_q.size(0) - 1;

  if (a.block_table.defined()) {
    check_caches(kFn, a.q, a.k, a.v, a.block_table, shape.num_seqs, shape);
    check_kv_scale(kFn, "k_scale", a.k_scale, "k (the paged k_cache)", a.k, shape.num_kv_heads);
    check_kv_scale(kFn, "v_scale", a.v_scale, "v (the paged v_cache)", a.v, shape.num_kv_heads);
  } else {
    KVATTN_CHECK(!a.k_scale.defined() && !a.v_scale.defined(), kFn,
                 ": k_scale and v_scale apply to paged float8_e4m3 caches (block_table given) "
                 "only but packed k and v were given");
    check_token_major(kFn, "k", a.k);
    check_token_major(kFn, "v", a.v);
    check_dtype(kFn, "k", a.k, a.q.dtype);
    check_dtype(kFn, "v", a.v, a.q.dtype);
    check_device(kFn, "k", a.k, device);
    check_device(kFn, "v", a.v, device);
    check_heads(kFn, "k", a.k.size(1), a.k.size(2), shape);
    KVATTN_CHECK(a.v.size(0) == a.k.size(0) && a.v.size(1) == a.k.size(1) &&
                     a.v.size(2) == a.k.size(2),
                 kFn, ": v shape ", a.v.shape_str(), " must equal k shape ", a.k.shape_str());
  }
  check_lse(kFn, a.lse, a.q, shape);
  shape.scale = resolve_scale(kFn, a.softmax_scale, shape.head_dim);
  check_mask_options(kFn, a.window_left, a.window_right, a.softcap, a.causal, device, shape,
                     /*cuda_ok=*/true);
  check_alibi_slopes(kFn, a.alibi_slopes, device, shape, /*cuda_ok=*/true);
  KVATTN_CHECK(a.max_seqlen_q >= 0 && a.max_seqlen_k >= 0, kFn,
               ": max_seqlen_q and max_seqlen_k must be >= 0 but are ", a.max_seqlen_q, " and ",
               a.max_seqlen_k);

  if (device.is_cpu()) {
    check_cu_values(a.cu_seqlens_q, "cu_seqlens_q", shape.total_q, "q");
    check_cu_values(a.cu_seqlens_k, "cu_seqlens_k", shape.paged ? -1 : a.k.size(0), "k");
    if (shape.paged) {
      const int32_t* cu_k = a.cu_seqlens_k.ptr<const int32_t>();
      for (int64_t b = 0; b < shape.num_seqs; ++b) {
        check_block_row(kFn, a.block_table, b, cu_k[b + 1] - cu_k[b], shape, "key length");
      }
    }
    cpu::prefill_attention(a, shape);
    return;
  }
#ifdef KVATTN_WITH_CUDA
  KVATTN_CHECK(shape.total_q == 0 || a.max_seqlen_q > 0, kFn,
               ": max_seqlen_q must be > 0 on the GPU (it sizes the grid) but is ",
               a.max_seqlen_q);
  cuda::prefill_attention(a, shape);
#else
  KVATTN_FAIL(kFn, ": q is on ", device, " but this build of kvattn has no CUDA backend");
#endif
}

}  // namespace kvattn
