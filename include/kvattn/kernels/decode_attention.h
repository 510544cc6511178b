// decode_attention: q_len (usually 1) new query tokens per sequence against the paged cache.
#pragma once

#include <cstdint>

#include "kvattn/core/tensor.h"

namespace kvattn {

// Split-KV plan (flash-decoding): how many parts each sequence's keys are cut into, and the
// bytes of workspace the partial results need. Computed once per batch on the host; the
// per-layer decode call neither allocates nor syncs when given a plan and its workspace,
// so it can be captured in a CUDA graph. A workspace needs no initialisation and may hold
// anything before a call, but it serves one decode at a time: calls that may overlap on the
// device (different streams) need separate workspaces.
struct DecodePlan {
  int num_splits = 1;          // 1 => no split, no workspace
  // Take it from plan_decode. A plan made by hand with num_splits > 1 needs num_splits *
  // num_seqs * num_heads * q_len * (tile_dim + 1) * 4 bytes on the GPU, tile_dim = 128 for
  // head_dim 80 and 96 (they run on the 128 kernels) and head_dim otherwise; a smaller
  // workspace is refused with an error naming both sizes.
  int64_t workspace_bytes = 0;
  // The bound the plan was made for (0: unknown). A lone or uniform batch whose lengths equal
  // it starts reading keys one memory round trip earlier on the GPU (the kernel guesses each
  // sequence's key split from it before cache_seqlens arrives); any lengths stay correct.
  int64_t max_seqlen_k = 0;
  // The caller's promise that every cache_seqlens entry equals max_seqlen_k (flash-attn's
  // int cache_seqlens; plan_decode's uniform_lengths). Where that is faster the GPU then runs
  // one CTA per (sequence, KV head) without a merge; lengths that break the promise are still
  // computed right, only maybe slower.
  bool uniform_lengths = false;
};

// Plans for a batch: `max_seqlen_k` bounds every cache_seqlens entry (for CUDA-graph capture,
// pass the capacity). `uniform_lengths`: every entry will equal max_seqlen_k (DecodePlan's
// field says what that buys). On the CPU the plan is always {1, 0}.
DecodePlan plan_decode(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                       int64_t head_dim, int64_t q_len, int64_t max_seqlen_k, Device device,
                       bool uniform_lengths = false);

// Layouts:
//   q, out:         [num_seqs * q_len, num_heads, head_dim] (token-major: sequence b owns rows
//                   b*q_len .. b*q_len+q_len-1); last dim contiguous, head stride == head_dim.
//   k/v_cache:      [num_blocks, block_size, num_kv_heads, head_dim].
//   block_table:    int32 [num_seqs, max_blocks_per_seq], padded with -1.
//   cache_seqlens:  int32 [num_seqs]: keys of each sequence, including this step's tokens.
//                   0 => the sequence's rows output zeros (CUDA-graph padding).
// Causal (q_len > 1): query i sees key j iff j <= i + L - q_len (bottom-right aligned).
// window_left/right, softcap and alibi_slopes: as in PrefillArgs (prefill_attention.h), with
// Lq = q_len and Lk = L - cache_leftpad[b]. A windowed decode reads only the window's keys:
// the blocks before it are never touched. cache_leftpad (flash-attn's): sequence b's keys are
// the cache positions cache_leftpad[b] .. L-1, so key j (as the mask and ALiBi count it) lives
// at position cache_leftpad[b] + j; positions before it are never read. CUDA: window, softcap,
// alibi_slopes and cache_leftpad at every head_dim over 16-bit caches and over fp8 caches at 64,
// 128 and 256 (fp8 with them, and at 256, unless the environment sets
// KVATTN_FP8_EXTENDED_FORMS=0); fp8 at head_dim 80 / 96 too (unless KVATTN_FP8_PADDED_DECODE=0).
// Out-of-range block ids, cache_seqlens beyond the table's capacity or a cache_leftpad[b]
// outside [0, L]: the CPU throws; the GPU never reads out of bounds, clamps, and records a
// fault in the device fault word.
struct DecodeArgs {
  TensorView q;
  TensorView k_cache;
  TensorView v_cache;
  TensorView block_table;
  TensorView cache_seqlens;
  int64_t q_len = 1;
  float softmax_scale = 0.0f;  // 0 => 1/sqrt(head_dim)
  bool causal = true;
  int64_t window_left = -1;   // -1 => unbounded
  int64_t window_right = -1;  // -1 => unbounded; causal => 0
  float softcap = 0.0f;       // 0 => off
  TensorView alibi_slopes;    // optional float32 [num_heads] or [num_seqs, num_heads]
  TensorView cache_leftpad;   // optional int32 [num_seqs], 0 <= cache_leftpad[b] <= L
  TensorView out;
  TensorView lse;  // optional float32 [num_heads, num_seqs * q_len]
  // float8_e4m3 caches (CPU: every head_dim; CUDA: head_dim 64 and 128, with bf16 or fp16
  // queries): the dequantisation scales, float32 [num_kv_heads] each (store_kv.h); keys are
  // read as e4m3(stored) * scale with float32 accumulation. Empty => 1.0. Must be empty for
  // other cache dtypes. On the CPU a float32 q may also read a bfloat16 cache.
  TensorView k_scale;
  TensorView v_scale;
  // GPU: the plan and a workspace of at least plan.workspace_bytes bytes on q's device.
  // plan.num_splits == 0 asks the library to plan and to use a workspace it owns (convenient,
  // but may allocate, so not for graph capture).
  DecodePlan plan{0, 0};
  TensorView workspace;
  Stream stream{};
  // GPU (sm_90+, CUDA 12.3+; ignored elsewhere): launch with programmatic dependent launch, so
  // that the kernel's prologue (cache_seqlens, block_table and cache_leftpad reads) runs while
  // the previous kernel in the stream finishes; the kernel waits for that kernel's completion
  // before it reads q, the caches or the workspace and before it writes anything but the fault
  // word. The caller promises that no kernel still running when this one is launched writes
  // cache_seqlens, block_table or cache_leftpad (an engine's metadata, copied at the start of a
  // step, qualifies; a kernel that computes the lengths right before does not). False: a plain
  // launch, which waits for everything before it. (The kernels do not consent to their own
  // dependents' early launch unless KVATTN_DECODE_PDL_TRIGGER=1: slower in the engine.)
  bool pdl = false;
};

void decode_attention(const DecodeArgs& args);

}  // namespace kvattn
