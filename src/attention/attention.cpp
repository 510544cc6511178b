// The Attention layer: store the step's K/V (unless the caller has: ctx.kv_stored), then
// prefill (packed or paged) or decode.
#include "kvattn/attention/attention.h"

#include <cmath>

#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/merge_attention.h"
#include "kvattn/kernels/prefill_attention.h"
#include "kvattn/kernels/store_kv.h"

#ifdef KVATTN_WITH_CUDA
#include "kernels/cuda/fp8_dequant_pages.h"
#endif

namespace kvattn {
namespace {

constexpr std::string_view kFn = "Attention::forward";

// [tokens, heads * dim] or [tokens, heads, dim] (last dim contiguous, any token stride)
// viewed as [tokens, heads, dim].
TensorView as_heads(const TensorView& t, int64_t heads, int64_t dim, std::string_view name) {
  KVATTN_CHECK(t.defined(), kFn, ": ", name, " must be given but is empty");
  if (t.ndim == 3) {
    KVATTN_CHECK(t.size(1) == heads && t.size(2) == dim, kFn, ": ", name, " shape must be [",
                 "tokens, ", heads, ", ", dim, "] but is ", t.shape_str());
    return t;
  }
  KVATTN_CHECK(t.ndim == 2, kFn, ": ", name, " must have rank 2 or 3 but has rank ", t.ndim);
  KVATTN_CHECK(t.size(1) == heads * dim, kFn, ": ", name, " must have ", heads * dim,
               " columns (", heads, " heads x ", dim, ") but has ", t.size(1));
  KVATTN_CHECK(t.stride(1) == 1 || t.size(1) == 1, kFn, ": ", name,
               " columns must be contiguous but stride(1) is ", t.stride(1));
  return TensorView(t.data, t.dtype, t.device, {t.size(0), heads, dim},
                    {t.stride(0), dim, 1});
}

int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

int64_t cascade_workspace_bytes(int64_t tokens, int64_t num_heads, int64_t head_dim,
                                DType dtype, int64_t fp8_prefix_keys, int64_t num_kv_heads) {
  KVATTN_CHECK(tokens >= 0 && num_heads > 0 && head_dim > 0 && fp8_prefix_keys >= 0 &&
                   num_kv_heads >= 0,
               "cascade_workspace_bytes: tokens, fp8_prefix_keys and num_kv_heads must be >= 0 "
               "and num_heads, head_dim > 0 but are ", tokens, ", ", fp8_prefix_keys, ", ",
               num_kv_heads, ", ", num_heads, ", ", head_dim);
  return align16(tokens * num_heads * head_dim * dtype_size(dtype)) +
         2 * align16(tokens * num_heads * static_cast<int64_t>(sizeof(float))) +
         2 * align16(fp8_prefix_keys * num_kv_heads * head_dim * dtype_size(dtype));
}

Attention::Attention(int64_t num_heads, int64_t head_dim, float scale, int64_t num_kv_heads)
    : Attention(num_heads, head_dim, scale, num_kv_heads, AttentionMask{}) {}

Attention::Attention(int64_t num_heads, int64_t head_dim, float scale, int64_t num_kv_heads,
                     AttentionMask mask)
    : num_heads_(num_heads),
      head_dim_(head_dim),
      scale_(scale),
      num_kv_heads_(num_kv_heads),
      mask_(mask) {
  KVATTN_CHECK(mask.window_left >= -1, "Attention: mask.window_left must be >= -1 (-1 = global) "
               "but is ", mask.window_left);
  KVATTN_CHECK(std::isfinite(mask.softcap) && mask.softcap >= 0.0f,
               "Attention: mask.softcap must be finite and >= 0 (0 = off) but is ",
               mask.softcap);
  KVATTN_CHECK(num_heads > 0 && head_dim > 0 && num_kv_heads > 0,
               "Attention: num_heads, head_dim and num_kv_heads must be > 0 but are ", num_heads,
               ", ", head_dim, ", ", num_kv_heads);
  KVATTN_CHECK(num_heads % num_kv_heads == 0, "Attention: num_heads (", num_heads,
               ") must be a multiple of num_kv_heads (", num_kv_heads, ")");
  KVATTN_CHECK(std::isfinite(scale), "Attention: scale must be finite but is ", scale);
  if (!mask.alibi_slopes.empty()) {
    KVATTN_CHECK(static_cast<int64_t>(mask.alibi_slopes.size()) == num_heads,
                 "Attention: mask.alibi_slopes must have num_heads (", num_heads,
                 ") entries but has ", mask.alibi_slopes.size());
    alibi_ = Tensor::empty({num_heads}, DType::kF32);
    for (int64_t h = 0; h < num_heads; ++h) {
      KVATTN_CHECK(std::isfinite(mask.alibi_slopes[h]), "Attention: mask.alibi_slopes[", h,
                   "] must be finite but is ", mask.alibi_slopes[h]);
      alibi_.ptr<float>()[h] = mask.alibi_slopes[h];
    }
  }
  if (scale_ <= 0.0f) scale_ = 1.0f / std::sqrt(static_cast<float>(head_dim));
}

void Attention::bind_cache(const TensorView& k_cache, const TensorView& v_cache) {
  bind_cache(k_cache, v_cache, TensorView(), TensorView());
}

void Attention::bind_cache(const TensorView& k_cache, const TensorView& v_cache,
                           const TensorView& k_scale, const TensorView& v_scale) {
  KVATTN_CHECK((!k_scale.defined() && !v_scale.defined()) ||
                   (k_cache.defined() && k_cache.dtype == DType::kF8E4M3),
               "Attention::bind_cache: k_scale/v_scale apply to float8_e4m3 caches only but "
               "k_cache dtype is ", k_cache.dtype);
  if (k_cache.defined() && k_cache.numel() > 0) {
    KVATTN_CHECK(k_cache.ndim == 4 && k_cache.size(2) == num_kv_heads_ &&
                     k_cache.size(3) == head_dim_,
                 "Attention::bind_cache: k_cache must be [num_blocks, block_size, ",
                 num_kv_heads_, ", ", head_dim_, "] but is ", k_cache.shape_str());
    KVATTN_CHECK(v_cache.ndim == 4 && v_cache.shape == k_cache.shape,
                 "Attention::bind_cache: v_cache shape ", v_cache.shape_str(),
                 " must equal k_cache shape ", k_cache.shape_str());
  }
  k_cache_ = k_cache;
  v_cache_ = v_cache;
  k_scale_ = k_scale;
  v_scale_ = v_scale;
}

void Attention::forward(const TensorView& q_in, const TensorView& k_in, const TensorView& v_in,
                        const BatchContext& ctx, const TensorView& out_in) const {
  const TensorView q = as_heads(q_in, num_heads_, head_dim_, "q");
  const TensorView k = as_heads(k_in, num_kv_heads_, head_dim_, "k");
  const TensorView v = as_heads(v_in, num_kv_heads_, head_dim_, "v");
  const TensorView out = as_heads(out_in, num_heads_, head_dim_, "out");

  if (has_cache() && !ctx.kv_stored) {
    store_kv(k, v, k_cache_, v_cache_, ctx.slot_mapping, k_scale_, v_scale_, ctx.stream);
  }

  if (ctx.phase == Phase::kPrefill) {
    PrefillArgs a;
    a.q = q;
    a.cu_seqlens_q = ctx.cu_seqlens_q;
    a.cu_seqlens_k = ctx.cu_seqlens_k;
    a.max_seqlen_q = ctx.max_seqlen_q;
    a.max_seqlen_k = ctx.max_seqlen_k;
    a.softmax_scale = scale_;
    a.causal = true;
    a.window_left = mask_.window_left;
    a.softcap = mask_.softcap;
    a.alibi_slopes = alibi_.view();
    a.out = out;
    a.stream = ctx.stream;
    if (ctx.block_tables.defined()) {  // prefix hit / chunked prefill: keys from the cache
      KVATTN_CHECK(has_cache(), kFn,
                   ": ctx.block_tables is set but no KV cache is bound to this layer");
      a.k = k_cache_;
      a.v = v_cache_;
      a.block_table = ctx.block_tables;
      a.k_scale = k_scale_;
      a.v_scale = v_scale_;
    } else {
      a.k = k;
      a.v = v;
    }
    prefill_attention(a);
    return;
  }

  KVATTN_CHECK(has_cache(), kFn, ": decode needs a KV cache bound to this layer");
  KVATTN_CHECK(ctx.context_lens.defined() && ctx.context_lens.ndim == 1 &&
                   ctx.context_lens.size(0) > 0,
               kFn, ": decode needs ctx.context_lens [num_seqs] with num_seqs > 0");
  const int64_t num_seqs = ctx.context_lens.size(0);
  KVATTN_CHECK(q.size(0) % num_seqs == 0, kFn, ": q tokens (", q.size(0),
               ") must be a multiple of num_seqs (", num_seqs, ") in decode");
  DecodeArgs a;
  a.q = q;
  a.k_cache = k_cache_;
  a.v_cache = v_cache_;
  a.block_table = ctx.block_tables;
  a.cache_seqlens = ctx.context_lens;
  a.k_scale = k_scale_;
  a.v_scale = v_scale_;
  a.q_len = q.size(0) / num_seqs;
  a.softmax_scale = scale_;
  a.causal = true;
  a.window_left = mask_.window_left;
  a.softcap = mask_.softcap;
  a.alibi_slopes = alibi_.view();
  a.out = out;
  a.plan = ctx.decode_plan;
  a.workspace = ctx.decode_workspace;
  a.stream = ctx.stream;
  a.pdl = ctx.decode_pdl;
  // The shared-prefix form where it computes the same attention: a window or ALiBi would see
  // the prefix's keys at other distances in the prefill than in the decode.
  if (ctx.cascade_prefix_len > 0 && mask_.window_left < 0 && !alibi_.defined()) {
    forward_cascade(q, ctx, a, out);
    return;
  }
  decode_attention(a);
}

// out = merge(attention over the shared prefix's keys, attention over each row's own keys):
// the prefix as one non-causal paged prefill of all query rows (a multi-query batch against
// one block table: its pages are read once), the rest by the decode kernel from
// cache_leftpad = the prefix length on (so the prefix's pages are not read again), each with
// its log-sum-exp, merged in place into out.
void Attention::forward_cascade(const TensorView& q, const BatchContext& ctx,
                                const DecodeArgs& decode, const TensorView& out) const {
  const int64_t tokens = q.size(0);
  const int64_t num_seqs = ctx.context_lens.size(0);
  const int64_t q_len = tokens / num_seqs;
  const int64_t block_size = k_cache_.size(1);
  KVATTN_CHECK(ctx.cascade_first_row >= 0 && ctx.cascade_num_rows >= 1 &&
                   ctx.cascade_first_row + ctx.cascade_num_rows <= num_seqs,
               kFn, ": ctx.cascade_first_row (", ctx.cascade_first_row,
               ") and ctx.cascade_num_rows (", ctx.cascade_num_rows,
               ") must name a run of rows inside the batch's ", num_seqs);
  const int64_t run_begin = ctx.cascade_first_row * q_len;
  const int64_t run_tokens = ctx.cascade_num_rows * q_len;
  KVATTN_CHECK(ctx.cascade_prefix_len % block_size == 0, kFn, ": ctx.cascade_prefix_len (",
               ctx.cascade_prefix_len, ") must be a multiple of the block size (", block_size,
               ")");
  const int64_t prefix_blocks = ctx.cascade_prefix_len / block_size;
  const TensorView& table = ctx.cascade_block_table;
  KVATTN_CHECK(table.defined() && table.ndim == 2 && table.size(0) == 1 &&
                   table.size(1) >= prefix_blocks,
               kFn, ": ctx.cascade_block_table must be int32 [1, >= ", prefix_blocks,
               "] but is ", table.defined() ? table.shape_str() : std::string("empty"));
  const TensorView& cu = ctx.cascade_cu_seqlens;
  KVATTN_CHECK(cu.defined() && cu.ndim == 1 && cu.size(0) == 4 && cu.dtype == DType::kI32,
               kFn, ": ctx.cascade_cu_seqlens must be int32 [4] = {0, tokens, 0, prefix} but "
               "is ", cu.defined() ? cu.shape_str() : std::string("empty"));
  KVATTN_CHECK(ctx.cascade_leftpad.defined() && ctx.cascade_leftpad.ndim == 1 &&
                   ctx.cascade_leftpad.size(0) == num_seqs,
               kFn, ": ctx.cascade_leftpad must be int32 [", num_seqs, "] but is ",
               ctx.cascade_leftpad.defined() ? ctx.cascade_leftpad.shape_str()
                                             : std::string("empty"));

  // A float8_e4m3 cache on the GPU: the shared pass reads the prefix dequantized into the
  // workspace (cascade_workspace_bytes), through the 16-bit prefill kernels.
  const bool dequant = k_cache_.dtype == DType::kF8E4M3 && q.device.is_cuda();
  const int64_t dq_keys = dequant ? ctx.cascade_prefix_len : 0;
  const int64_t need = cascade_workspace_bytes(tokens, num_heads_, head_dim_, q.dtype, dq_keys,
                                               dequant ? num_kv_heads_ : 0);
  TensorView ws = ctx.cascade_workspace;
  Tensor owned;
  if (!ws.defined() && q.device.is_cpu()) {
    owned = Tensor::empty({need}, DType::kU8, q.device);
    ws = owned.view();
  }
  KVATTN_CHECK(ws.defined() && ws.nbytes() >= need && ws.device.kind == q.device.kind &&
                   ws.device.index == q.device.index,
               kFn, ": ctx.cascade_workspace must hold ", need, " bytes on q's device but ",
               ws.defined() ? "holds " + std::to_string(ws.nbytes()) : std::string("is empty"));
  KVATTN_CHECK(reinterpret_cast<uintptr_t>(ws.data) % 16 == 0, kFn,
               ": ctx.cascade_workspace must be 16-byte aligned");
  char* base = static_cast<char*>(ws.data);
  const int64_t out_bytes = align16(tokens * num_heads_ * head_dim_ * dtype_size(q.dtype));
  const int64_t lse_bytes = align16(tokens * num_heads_ * static_cast<int64_t>(sizeof(float)));
  // The run's rows: the prefix part's output and LSE ([heads, run tokens]); every row's own
  // LSE ([heads, tokens]; the run's columns are read with a row stride of tokens).
  const TensorView prefix_out(base, q.dtype, q.device, {run_tokens, num_heads_, head_dim_});
  const TensorView prefix_lse(base + out_bytes, DType::kF32, q.device, {num_heads_, run_tokens});
  const TensorView own_lse(base + out_bytes + lse_bytes, DType::kF32, q.device,
                           {num_heads_, tokens});

  PrefillArgs p;  // the run's query rows against the shared blocks, once
  p.q = q.slice0(run_begin, run_begin + run_tokens);
  p.k = k_cache_;
  p.v = v_cache_;
  p.block_table = table;
  p.k_scale = k_scale_;
  p.v_scale = v_scale_;
  if (dequant) {
#ifdef KVATTN_WITH_CUDA
    char* kv_base = base + out_bytes + 2 * lse_bytes;
    const int64_t kv_bytes = align16(dq_keys * num_kv_heads_ * head_dim_ * dtype_size(q.dtype));
    const TensorView k16(kv_base, q.dtype, q.device, {dq_keys, num_kv_heads_, head_dim_});
    const TensorView v16(kv_base + kv_bytes, q.dtype, q.device, {dq_keys, num_kv_heads_, head_dim_});
    const TensorView ids(table.data, DType::kI32, table.device, {table.numel()});
    cuda::dequant_fp8_pages(k_cache_, ids, dq_keys, k_scale_, k16, ctx.stream);
    cuda::dequant_fp8_pages(v_cache_, ids, dq_keys, v_scale_, v16, ctx.stream);
    p.k = k16;
    p.v = v16;
    p.block_table = TensorView();
    p.k_scale = TensorView();
    p.v_scale = TensorView();
#endif
  }
  p.cu_seqlens_q = TensorView(cu.data, DType::kI32, cu.device, {2});
  p.cu_seqlens_k = TensorView(cu.ptr<int32_t>() + 2, DType::kI32, cu.device, {2});
  p.max_seqlen_q = run_tokens;
  p.max_seqlen_k = ctx.cascade_prefix_len;
  p.softmax_scale = scale_;
  p.causal = false;  // every prefix key precedes every query row
  p.softcap = mask_.softcap;
  p.out = prefix_out;
  p.lse = prefix_lse;
  p.stream = ctx.stream;
  prefill_attention(p);

  DecodeArgs d = decode;  // each row's own keys, after the prefix
  d.cache_leftpad = ctx.cascade_leftpad;
  d.lse = own_lse;
  decode_attention(d);

  MergeStatesArgs m;
  const TensorView run_out = out.slice0(run_begin, run_begin + run_tokens);
  m.out_a = prefix_out;
  m.lse_a = prefix_lse;
  m.out_b = run_out;
  m.lse_b = TensorView(own_lse.ptr<float>() + run_begin, DType::kF32, q.device,
                       {num_heads_, run_tokens}, {tokens, 1});
  m.out = run_out;
  m.stream = ctx.stream;
  merge_attention_states(m);
}

Tensor Attention::forward(const TensorView& q, const TensorView& k, const TensorView& v,
                          const BatchContext& ctx) const {
  KVATTN_CHECK(q.defined(), kFn, ": q must be given but is empty");
  Tensor out = Tensor::empty({q.size(0), num_heads_ * head_dim_}, q.dtype, q.device);
  forward(q, k, v, ctx, out.view());
  return out;
}

}  // namespace kvattn
