// Internal: y = x W^T for a few rows of x (decode: rows <= 8), bf16 operands, float32
// accumulation, bf16 output rounded once, like cuBLASLt's, but built for the shape where
// cuBLASLt is far from the memory bandwidth: every weight element is read once, with 16-byte
// non-caching loads, for all rows of x at once (x sits in shared memory). Gemm::run uses it
// for the shapes where it measured faster (Mode, preferred()); launches nothing else,
// allocates nothing, so it is CUDA-graph capturable. The same kernel, with an RMSNorm prologue
// (and a SiLU * up epilogue), is the fused decode path's qkv and gate_up projection
// (run_rmsnorm, run_rmsnorm_silu; docs/notes/decode-fused-gemv.md).
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/model/cuda_launch.h"
#include "engine/model/cuda_rope_kv.h"

namespace kvattn::cuda_model {

class Gemv {
 public:
  static constexpr int64_t kMaxRows = 8;
  // The model takes the fused entries for steps of at most this many rows: at 8 rows they
  // were slower than add_rmsnorm + cuBLASLt on the H200 (session 12, Qwen3-0.6B widths: qkv
  // 0.80x, gate_up 0.70x; 1 row 1.46x / 1.15x, 4 rows 1.13x / 1.00x).
  static constexpr int64_t kFusedPreferredRows = 4;

  // Reads the device's limits and raises the kernels' shared-memory limit (host calls only,
  // never during a capture).
  explicit Gemv(int device);

  // y[r, 0:n] = x[r, 0:k] w^T for r < rows; w is [n, k] row-major, ldx/ldy row strides in
  // elements, all bf16. Launches one kernel on `stream` and returns true; returns false and
  // launches nothing when the case is not supported: rows not in [1, 8], k % 8 != 0, x/w not
  // 16-byte aligned, ldx % 8 != 0, or x's rows do not fit in shared memory. With on.pdl
  // (cuda_launch.h) each CTA asks L2 for its first tile of w before it waits for the previous
  // kernel, so w must be written by no kernel still in flight before this one (weights).
  bool run(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t n, int64_t k,
           void* y, int64_t ldy, Launch on) const;

  // The fused decode entries (KVATTN_FUSED_GEMV; cuda_model.cpp): the input rows are an
  // RMSNorm of the residual, computed by every CTA from the rows themselves, exactly as
  // k::add_rmsnorm computes them (same per-element formulas, and the same reduction order: 256
  // threads, thread t summing elements t, t + 256, ... in order, then the same warp and block
  // sums), so the normalised rows are bit-identical to add_rmsnorm's out. x and add are
  // [rows, hidden] contiguous bf16; add may be null (no residual add). With add, every CTA
  // reads bf16(x + add); CTA 0 alone writes it to x_out (a buffer other than x and add: the
  // other CTAs are still reading x, so the residual ping-pongs between two buffers) and, when
  // h_out is not null, the normalised rows to h_out. x_out may be null (nothing written).
  struct NormInput {
    const void* x = nullptr;
    const void* add = nullptr;     // or null
    const void* weight = nullptr;  // the norm's bf16 [hidden]
    float eps = 0.0f;
    void* x_out = nullptr;  // bf16(x + add) [rows, hidden], or null
    void* h_out = nullptr;  // the normalised rows [rows, hidden], or null
  };
  // Whether the fused entries take rows x hidden (rows in [1, 8], hidden % 8 == 0, the rows
  // fit in shared memory); the model falls back to add_rmsnorm + Gemm otherwise.
  bool fused_supported(int64_t rows, int64_t hidden) const;
  // y[r, 0:n] = rmsnorm(x[r] (+ add[r])) w^T, w [n, hidden]: add_rmsnorm + run() in one
  // launch, bit-identical to them (the GEMV part is run()'s main loop on the same work split;
  // cuBLASLt sums in another order). Throws kvattn::Error naming the argument on a case
  // fused_supported() declines or on bad pointers (null, misaligned, x_out aliasing x/add).
  void run_rmsnorm(const NormInput& in, int64_t rows, int64_t hidden, const void* w, int64_t n,
                   void* y, int64_t ldy, Launch on) const;
  // act[r, j] = bf16(bf16(silu(g)) * u) for j < inter, with g, u the bf16-rounded outputs
  // j and inter + j of rmsnorm(x[r] (+ add[r])) w_gate_up^T (w_gate_up [2 inter, hidden]):
  // add_rmsnorm + run() + k::silu_mul in one launch, bit-identical to them. Each warp owns
  // gate rows and the up rows of the same features, so SiLU * up is the GEMV's epilogue (the
  // gate_up output is never written). Same checks as run_rmsnorm.
  void run_rmsnorm_silu(const NormInput& in, int64_t rows, int64_t hidden, const void* w_gate_up,
                        int64_t inter, void* act, int64_t ldact, Launch on) const;

  // The decode step's qkv projection and what follows it, in one launch: run_rmsnorm (y =
  // qkv, n = (num_heads + 2 num_kv_heads) * head_dim) + qk_norm_rope_store_kv(rope, kv), the
  // same bits in y and in the caches. The CTAs run in thread block clusters, one a head: each
  // CTA keeps its rows of qkv in shared memory, and once the cluster's rows are complete (a
  // cluster barrier) each token's head is gathered over distributed shared memory, normed,
  // rotated and stored (kernel in cuda_gemv.cu, arithmetic in cuda_rope_math.cuh). Arguments
  // are checked as run_rmsnorm and qk_norm_rope_store_kv check theirs (kvattn::Error); then
  // returns false, launching nothing, where the epilogue does not apply and the caller must
  // run the two: below sm_90, legacy_kernels(), rows > kFusedPreferredRows, head_dim or ldy not
  // multiples of 8, y or the caches not 16-byte aligned, or a head that is not 1-8 whole
  // tiles of the work split (split()).
  bool run_rmsnorm_rope_kv(const NormInput& in, int64_t rows, int64_t hidden, const void* w,
                           int64_t n, void* y, int64_t ldy, const QkNormRope& rope,
                           const KVWrite& kv, Launch on) const;
  // The same contract and bits as run_rmsnorm_rope_kv, by another work split that needs no
  // clusters and no gather: each warp owns both rows of its RoPE rotation pairs (elements ia
  // and ib of one head, pair_of in cuda_rope_math.cuh), so its epilogue rotates the pair in
  // registers and writes it to y and, for k and v heads, to the caches. It covers heads
  // without q/k norms rotated whole (Llama, Mistral, SmolLM2, Phi-3-mini; no bias: the caller
  // adds none after it); returns false, launching nothing, otherwise (q/k norms, partial
  // rotary, legacy_kernels(), rows > kFusedPreferredRows). Same argument checks.
  bool run_rmsnorm_rope_pairs(const NormInput& in, int64_t rows, int64_t hidden, const void* w,
                              int64_t n, void* y, int64_t ldy, const QkNormRope& rope,
                              const KVWrite& kv, Launch on) const;

  // The work split of an n x k case: R weight rows per warp, ks warps splitting K. A case's
  // sums depend on ks only (not on R), so run(), run_rmsnorm and run_rmsnorm_silu give the
  // same bits for the same (n, k). kLegacy: the rule before the fused entries (R = 4, ks up
  // to 8 until two CTAs per SM); kDefault takes R = 2, ks = 1 instead of a K split where that
  // alone gives a CTA per SM (n >= 16 x SMs: qkv 4096 and gate_up 6144 on the H200's 132 SMs,
  // which kLegacy split 4 and 2 ways). On the H200, kAuto's shapes (n <= 2048, n >= 65536)
  // get the same split either way.
  enum class SplitRule { kDefault, kLegacy };
  void set_split_rule(SplitRule r) { rule_ = r; }
  struct Split {
    int rows_per_warp, ks;
  };
  Split split(int64_t n, int64_t k) const;

  // Which eligible cases Gemm sends here. kAuto: only the shapes where the H200 measurement
  // (docs/perf/NOTES.md, "GEMV for small-batch decode") found the GEMV faster than cuBLASLt,
  // see preferred(); kAll: every case run() accepts; kOff: none.
  enum class Mode { kOff, kAuto, kAll };
  // KVATTN_GEMV (read once per process): "off" or "0" kOff, "all" kAll, unset or anything
  // else kAuto (the session-11 rewrite of the kernel passed its GPU tests in session 12).
  static Mode env_mode();
  // kAuto's rule: a small number of output features (the K-split regime: o_proj, down_proj of
  // Qwen3-0.6B, 1024 x 2048/3072, 1.05-3.5x at M = 1..8), or a vocabulary-sized one at
  // rows <= 4 (lm_head 151936 x 1024: 1.05-1.06x; 0.76x at M = 8). The mid-sized ones (qkv
  // 4096, gate_up 6144: 0.59-0.95x) stay on cuBLASLt.
  static bool preferred(int64_t rows, int64_t n, int64_t k);

 private:
  // Which kernel: how x reaches shared memory (as given, or normalised) and the epilogue.
  enum Variant {
    kPlain = 0,
    kNorm = 1,
    kNormSilu = 2,
    kNormRope = 3,
    kRopePairs = 4,
    kVariants = 5
  };
  void launch(Variant v, const NormInput& in, const void* x, int64_t ldx, int64_t rows,
              const void* w, int64_t n, int64_t k, void* y, int64_t ldy, Launch on) const;
  // The CTAs launch() starts for `tiles` tiles: one wave of resident CTAs at most (registers,
  // shared memory `smem`, threads), each looping over tiles.
  int64_t resident_grid(Variant v, int rows_per_warp, int64_t rows, int64_t tiles,
                        size_t smem) const;

  // kNormRope's shared memory: x, the K-split buffer, the tile's rows, a head row a token.
  static size_t rope_smem(int64_t rows, int64_t hidden, int64_t rows_per_tile, int64_t head_dim);

  int sms_ = 0;
  bool clusters_ = false;  // thread block clusters (sm_90+)
  size_t smem_optin_ = 0;   // per block, after the opt-in
  size_t smem_per_sm_ = 0;
  SplitRule rule_ = SplitRule::kDefault;
  // registers per thread of each kernel: [variant][rows per warp 2 / 4][row count - 1]
  int regs_[kVariants][2][kMaxRows] = {};
};

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
