// Shared by the prefill_attention GPU tests, one binary (kernels_prefill_gpu_test) built from
// prefill_gpu_test.cpp and the prefill_gpu_*.cpp beside it (tests/kernels/CMakeLists.txt): one
// case (PrefillCase) run on the GPU and checked against the CPU backend or the float64
// reference (run_case), its paged caches (make_paged), the random cases and features the
// suites draw (random_case, add_random_features), and the scope guard of cuda_tuning().
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/device.h"
#include "kvattn/core/tensor.h"
#include "kernels/cuda/tuning.h"

namespace kvattn::test::prefill_gpu {

inline const Device kGpu = Device::cuda(0);

struct PrefillCase {
  DType dt = DType::kBF16;
  int64_t d = 128, hkv = 2, group = 4;
  bool causal = true;
  bool paged = false;
  int64_t bs = 16;
  std::vector<int64_t> lq, lk;
  int64_t q_pad = 0, kv_pad = 0;  // extra elements per token row (multiples of 8)
  bool fused_kv = false;          // paged: K and V blocks interleaved in one allocation
  bool with_lse = true;
  float scale = 0.0f;
  int64_t windows = 0;  // 0: check every row; else check 64-row windows (long contexts)
  bool fp8 = false;     // paged: the caches quantised to float8_e4m3
  bool fp8_scales = false;  // fp8: random per-KV-head k_scale / v_scale (else 1.0)
  int64_t window_left = -1, window_right = -1;  // flash-attn's window_size
  float softcap = 0.0f;
  int alibi = 0;  // 0: none; 1: slopes [num_heads]; 2: [num_seqs, num_heads]
  bool f64_reference = false;  // the float64 reference (support/reference.h), not the CPU backend

  std::string describe() const;
};

// Paged caches with 16-byte aligned strides: [guard | blocks | guard], optionally K and V
// interleaved per block; every byte no sequence owns stays NaN. Random permuted block ids,
// -1 past each sequence's last block, sometimes extra table columns.
struct Paged {
  Tensor storage;  // dt elements
  TensorView k, v;
  Tensor table;  // int32 [num_seqs, width]
  int64_t num_blocks = 0;
};
Paged make_paged(std::mt19937_64& rng, const PrefillCase& c);

// Reads and clears the device fault word (synchronizes).
uint32_t clear_faults();

// Runs one case on the GPU and checks it against the CPU backend, or the float64 reference
// where the case asks for it (PrefillCase::f64_reference).
void run_case(const PrefillCase& c, std::mt19937_64& rng, const std::string& key);

// Random structured case: dtype / head_dim / causal / paged as given, the rng the rest.
PrefillCase random_case(std::mt19937_64& rng, DType dt, int64_t d, bool causal, bool paged,
                        bool quick);

// Restores every CUDA tuning switch a test sets when it ends.
class TuningRestore {
 public:
  TuningRestore() = default;
  ~TuningRestore() { cuda::cuda_tuning() = saved_; }
  TuningRestore(const TuningRestore&) = delete;
  TuningRestore& operator=(const TuningRestore&) = delete;

 private:
  cuda::CudaTuning saved_ = cuda::cuda_tuning();
};

// ---- issue 18: window, softcap, ALiBi, head_dim 80/96/256 (the extended kernels) ----

inline const std::vector<int64_t> kFeatureHeadDims = {64, 80, 96, 128, 256};

// A random window / softcap / ALiBi on top of a random_case: window kinds left only, both
// sides, right only, (0, 0), wider than every sequence, none; softcap sometimes with scale 1
// (large scores, so the cap bites); ALiBi off, [num_heads] or [num_seqs, num_heads].
void add_random_features(std::mt19937_64& rng, PrefillCase& c);

}  // namespace kvattn::test::prefill_gpu
