// The host side of the CUDA paged-decode kernels, shared by the entry (decode_attention.cu: the
// configuration, the dispatch, the planner's queries) and the instantiation files
// (decode_inst_*.cu: each compiles the kernels of one query dtype, cache dtype and head_dim and
// their launch, decode_launch.cuh). One translation unit per kernel family lets a build spread
// them over its cores (all in one file took 269-357 s of one core for sm_90a alone).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kvattn/core/dtype.h"
#include "kernels/cuda/decode/decode_params.h"

namespace kvattn::cuda {

namespace decode_host {

inline constexpr int kMaxDevices = 64;

inline int kv_bytes_of(DType cache_dtype) { return cache_dtype == DType::kF8E4M3 ? 1 : 2; }
void check_device_index(int device);
// The device's opt-in shared-memory limit per CTA (cached).
int max_optin_smem(int device);
// Bytes of the stream kernel's shared prefix sum for num_seqs sequences (and its warp sums),
// then `claim_ints` ints of the dynamic split's claims (kDecodeClaimRingInts).
int prefix_bytes_for(int64_t num_seqs, int claim_ints = 0);
int split_smem(const DecodeConfig& c, int prefix_bytes);

// The small-batch kernel's CTA of `warps` warps: stages as the stream kernel's, shared memory
// for the tiles or the warps' combine, whichever is larger.
struct SmallConfig {
  int warps = 8;
  int stages = 3;
  int smem = 0;
};
SmallConfig small_config(int64_t num_kv_heads, int64_t rows, int64_t head_dim, int kv_bytes,
                         int warps);

// Small mode's chunks per (sequence, unit) and warps per CTA; chunks 0: use the stream kernel.
struct SmallChoice {
  int chunks = 0;
  int warps = 8;
};
// max_keys: the longest sequence the batch may hold (the plan's bound, else the table's width);
// uniform: every sequence holds exactly max_keys (DecodePlan::uniform_lengths).
SmallChoice small_choice(int device, int64_t num_seqs, int64_t num_kv_heads, int64_t rows,
                         int64_t head_dim, DType cache_dtype, int64_t max_keys,
                         bool uniform = false);

// A fresh tag per launch for the small kernel's LL words (never 0 nor all ones).
uint32_t next_epoch();
// Stream mode is possible: few enough sequences for the shared prefix sum, 32-bit tile indices.
bool stream_ok(int64_t num_seqs, int64_t capacity);
// Stream mode's ranges per resident CTA (cuda_tuning().decode_stream_waves). The planner's
// workspace and the launcher's grid agree.
int stream_waves();
// Whether stream mode asks for the dynamic split (cuda_tuning().decode_dynamic_split; never
// unless compiled in: kDecodeDynamicSplitBuilt), and its ranges per resident CTA (1 +
// kDynamicTiers) else stream_waves(): what the planner sizes the workspace for.
bool dynamic_split();
int stream_ranges_per_cta();
// Launches of the TMA form (CopyIssue::kTma, decode_tma.cuh) in this process, counted by the
// launcher: tests check that the cases meant for it took it.
int64_t tma_launches();
void count_tma_launch();
// Launches of the split kernel's CTA page sweep (CopyIssue::kCtaSweep, decode_cta_sweep.cuh),
// likewise.
int64_t cta_sweep_launches();
void count_cta_sweep_launch();
// Launches that asked for the dynamic split (p.dynamic_split; the device still takes the static
// one for batches of fewer tiles than its ranges), likewise.
int64_t dynamic_launches();
void count_dynamic_launch();
// The driver's refusals of the TMA form's tensor maps (the launch then took a cp.async form),
// and the last refusal's CUresult (0: none yet): what a test prints when TMA was not taken.
int64_t tma_refusals();
int last_tma_refusal();
void note_tma_refusal(int cu_result);
// Whether this build has the TMA form's sm_90a code (KVATTN_SM90A).
bool tma_built();

}  // namespace decode_host

// The kernels of one query dtype T, cache element KV (T, or uint8_t for float8_e4m3) and tile
// head_dim D, as the host sees them. Defined in decode_launch.cuh; instantiated once each, in
// decode_inst_*.cu (the extern declarations below keep every other file from compiling them).
template <typename T, typename KV, int D>
struct DecodeKernels {
  // Plans and launches the split, small or merge kernels for p (decode_attention.cu filled it);
  // ext: the window / softcap / ALiBi form; aligned: 16-byte rows.
  static void launch(const DecodeParams& p, bool ext, bool aligned, int64_t ws_bytes, int device,
                     cudaStream_t stream, bool pdl);
  // CTAs per SM of the small kernel (16-byte rows, plain form) at (threads, smem).
  static int small_ctas(int device, int threads, int smem);
  // CTAs per SM of the stream kernel (16-byte rows, plain form; swap: the swapped tile, which
  // the plain form has at every head_dim over 16-bit caches and at 64 and 128 over fp8).
  static int stream_ctas(int device, int threads, int smem, bool swap);
};

extern template struct DecodeKernels<__nv_bfloat16, __nv_bfloat16, 64>;
extern template struct DecodeKernels<__nv_bfloat16, __nv_bfloat16, 128>;
extern template struct DecodeKernels<__nv_bfloat16, __nv_bfloat16, 256>;
extern template struct DecodeKernels<__half, __half, 64>;
extern template struct DecodeKernels<__half, __half, 128>;
extern template struct DecodeKernels<__half, __half, 256>;
extern template struct DecodeKernels<__nv_bfloat16, uint8_t, 64>;
extern template struct DecodeKernels<__nv_bfloat16, uint8_t, 128>;
extern template struct DecodeKernels<__half, uint8_t, 64>;
extern template struct DecodeKernels<__half, uint8_t, 128>;
extern template struct DecodeKernels<__nv_bfloat16, uint8_t, 256>;
extern template struct DecodeKernels<__half, uint8_t, 256>;

}  // namespace kvattn::cuda
