// decode_attention entry and planner: validates once, then dispatches on the device.
#include "kvattn/kernels/decode_attention.h"

#include "attention_checks.h"
#include "backend.h"
#include "kv_cache_checks.h"
#include "mask_options.h"
#include "kvattn/kernels/device_faults.h"
#include "validate.h"

namespace kvattn {
namespace {
constexpr std::string_view kFn = "decode_attention";
}

DecodePlan plan_decode(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                       int64_t head_dim, int64_t q_len, int64_t max_seqlen_k, Device device,
                       bool uniform_lengths) {
  KVATTN_CHECK(num_seqs >= 0 && num_heads > 0 && num_kv_heads > 0 && head_dim > 0 &&
                   q_len >= 1 && max_seqlen_k >= 0,
               "plan_decode: sizes must be positive but got num_seqs=", num_seqs,
               " num_heads=", num_heads, " num_kv_heads=", num_kv_heads,
               " head_dim=", head_dim, " q_len=", q_len, " max_seqlen_k=", max_seqlen_k);
  KVATTN_CHECK(num_heads % num_kv_heads == 0, "plan_decode: num_heads (", num_heads,
               ") must be a multiple of num_kv_heads (", num_kv_heads, ")");
  if (device.is_cpu()) return DecodePlan{1, 0};
#ifdef KVATTN_WITH_CUDA
  return cuda::plan_decode(num_seqs, num_heads, num_kv_heads, head_dim, q_len, max_seqlen_k,
                           device.index, uniform_lengths);
#else
  (void)uniform_lengths;
  KVATTN_FAIL("plan_decode: device is ", device, " but this build has no CUDA backend");
#endif
}

void decode_attention(const DecodeArgs& a) {
  using namespace detail;
  AttentionShape shape;
  check_query_and_out(kFn, a.q, a.out, shape);
  const Device device = a.q.device;
  check_rank(kFn, "cache_seqlens", a.cache_seqlens, 1);
  check_dtype(kFn, "cache_seqlens", a.cache_seqlens, DType::kI32);
  check_device(kFn, "cache_seqlens", a.cache_seqlens, device);
  check_contiguous(kFn, "cache_seqlens", a.cache_seqlens);
  shape.num_seqs = a.cache_seqlens.size(0);
  KVATTN_CHECK(a.q_len >= 1, kFn, ": q_len must be >= 1 but is ", a.q_len);
  KVATTN_CHECK(shape.total_q == shape.num_seqs * a.q_len, kFn, ": q tokens must be num_seqs (",
               shape.num_seqs, ") * q_len (", a.q_len, ") = ", shape.num_seqs * a.q_len,
               " but is ", shape.total_q);
  check_caches(kFn, a.q, a.k_cache, a.v_cache, a.block_table, shape.num_seqs, shape);
  check_kv_scale(kFn, "k_scale", a.k_scale, "k_cache", a.k_cache, shape.num_kv_heads);
  check_kv_scale(kFn, "v_scale", a.v_scale, "v_cache", a.v_cache, shape.num_kv_heads);
  check_lse(kFn, a.lse, a.q, shape);
  shape.scale = resolve_scale(kFn, a.softmax_scale, shape.head_dim);
  check_mask_options(kFn, a.window_left, a.window_right, a.softcap, a.causal, device, shape,
                     /*cuda_ok=*/true);
  check_alibi_slopes(kFn, a.alibi_slopes, device, shape, /*cuda_ok=*/true);

  if (device.is_cpu()) {
    const int32_t* lens = a.cache_seqlens.ptr<const int32_t>();
    for (int64_t b = 0; b < shape.num_seqs; ++b) {
      KVATTN_CHECK(lens[b] >= 0, kFn, ": cache_seqlens[", b, "] must be >= 0 but is ", lens[b]);
      check_block_row(kFn, a.block_table, b, lens[b], shape, "cache_seqlens");
    }
    check_cache_leftpad(kFn, a.cache_leftpad, a.cache_seqlens, device, shape.num_seqs);
    cpu::decode_attention(a, shape);
    return;
  }
  check_cache_leftpad(kFn, a.cache_leftpad, a.cache_seqlens, device, shape.num_seqs);
#ifdef KVATTN_WITH_CUDA
  DecodeArgs args = a;
  if (args.plan.num_splits == 0) {
    const int64_t capacity = shape.max_blocks_per_seq * shape.block_size;
    args.plan = cuda::plan_decode(shape.num_seqs, shape.num_heads, shape.num_kv_heads,
                                  shape.head_dim, a.q_len, capacity, device.index);
    if (args.plan.workspace_bytes > 0) {
      args.workspace = cuda::scratch_workspace(device.index, args.plan.workspace_bytes);
    }
  } else {
    KVATTN_CHECK(args.plan.num_splits >= 1, kFn, ": plan.num_splits must be >= 0 but is ",
                 args.plan.num_splits);
    if (args.plan.workspace_bytes > 0) {
      check_defined(kFn, "workspace", args.workspace);
      check_device(kFn, "workspace", args.workspace, device);
      KVATTN_CHECK(args.workspace.nbytes() >= args.plan.workspace_bytes, kFn,
                   ": workspace must hold at least ", args.plan.workspace_bytes,
                   " bytes (plan.workspace_bytes) but holds ", args.workspace.nbytes());
    }
  }
  cuda::decode_attention(args, shape);
#else
  KVATTN_FAIL(kFn, ": q is on ", device, " but this build of kvattn has no CUDA backend");
#endif
}

uint32_t read_device_faults(Device device, bool clear) {
  if (device.is_cpu()) return kFaultNone;
#ifdef KVATTN_WITH_CUDA
  return cuda::read_device_faults(device.index, clear);
#else
  (void)clear;
  KVATTN_FAIL("read_device_faults: device is ", device, " but this build has no CUDA backend");
#endif
}

}  // namespace kvattn
