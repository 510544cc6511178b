// Internal: dot products computed straight on GGUF's quantized weight blocks (Q4_0, Q4_1,
// Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against activations quantized to int8, as llama.cpp
// does: one weight row never leaves its file's blocks (the mapping), the activations are
// quantized once per GEMV.
//
// Activations (ActRows): each row of n floats is quantized twice, as the weight types need:
//   q32: blocks of 32, d = amax/127, q = rne(x * 127/amax) (llama.cpp's Q8_0 with a float32
//        d), then the remainder twice more at 1/128 of the step: r = rne((x - q d) * 128/d),
//        t = rne((x - q d - r d/128) * 16384/d), all int8. X = 16384 q + 128 r + t is a
//        22-bit integer activation with step d/16384 (2^-21 of the block's amax): decode then
//        sees float32-grade activations, and a token's result moves with the step it is in
//        only by float32 rounding, as with the float formats (one int8 level alone flipped the
//        default model's chat answer at a 0.08-logit near-tie, and it turned every tiny
//        upstream difference into a whole quantization step); s32 = (d/16384) * sum(X)
//        per block (Q4_1's min term);
//   qk:  blocks of 256, the same rule per 256 (llama.cpp's Q8_K), plus bsum16 = sum(q) per 16.
// Every integer partial sum is exact; the float steps run in one fixed order, the same in
// every ISA path, so the scalar, AVX2 and AVX-512 kernels return bit-identical floats
// (the files are built with -ffp-contract=off so no compiler fuses a mul+add in one path only):
//   32-blocks: lane l (0..7) of block b is the exact int32 sum over its elements 4l..4l+3 of
//     w * X (16384 Lq + 128 Lr + Lt, at most 2^30); float accumulator [8*(b%2) + l] +=
//     float(lane) * (d_w * (d_x / 16384)); Q4_1 adds m_w * s32 in block
//   256-blocks: per super-block, the exact int32 sums sumi (weights x activations with the
//     sub-block scales) and summ (mins x bsums); r += (d * d_x) * float(sumi), then
//     r -= (dmin * d_x) * float(summ), super-block after super-block.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kvattn/engine/gguf.h"

namespace kvattn::qdot {

// The kernels one process may pick, slowest first. kAvx512 needs AVX-512 F/BW/VL; kAvx512Vnni
// adds VNNI (vpdpbusd / vpdpwssd).
enum class Isa : uint8_t { kScalar, kAvx2, kAvx512, kAvx512Vnni };
std::string_view isa_name(Isa isa);  // "scalar" | "avx2" | "avx512" | "avx512-vnni"

// The best ISA this CPU and OS support (cpuid via __builtin_cpu_supports).
Isa best_isa();
// The ISA in use: best_isa(), lowered by the environment variable KVATTN_QDOT_ISA
// (scalar | avx2 | avx512 | avx512-vnni; a higher one than the CPU has is refused).
Isa active_isa();
// Tests: force an ISA (throws when the CPU lacks it). Not thread-safe against running GEMVs.
void set_active_isa(Isa isa);

// Whether dot products run directly on `type`'s blocks.
bool supports(GgmlType type);
// Elements per block of a supported type (32 or 256) and bytes per block.
int64_t block_elems(GgmlType type);
int64_t block_bytes(GgmlType type);

// One quantized activation row; pointers into an ActRows.
struct ActRow {
  const int8_t* q32;     // n: the int8 value
  const int8_t* r32;     // n: the remainder at 1/128 of the step
  const int8_t* t32;     // n: the remainder at 1/16384 of the step
  const float* d32;      // n / 32: the step d
  const float* s32;      // n / 32: (d / 16384) * sum of 16384 q + 128 r + t over the block
  const int8_t* qk;      // n (only when n % 256 == 0 and K types were asked for)
  const float* dk;       // n / 256
  const int16_t* bsum16; // n / 16
};

// Up to any number of rows of n activations, quantized for the weight types to be used.
class ActRows {
 public:
  // x: rows x n floats with row stride ldx. want32 / want256: which forms to build (n must be a
  // multiple of 32 / 256 for them).
  void quantize(const float* x, int64_t ldx, int64_t rows, int64_t n, bool want32, bool want256);
  ActRow row(int64_t r) const;
  int64_t rows() const { return rows_; }
  int64_t n() const { return n_; }

 private:
  int64_t rows_ = 0, n_ = 0;
  std::vector<int8_t> q32_, r32_, t32_, qk_;
  std::vector<float> d32_, s32_, dk_;
  std::vector<int16_t> bsum16_;
};

// Quantizes one row the same way (tests use it to build the reference's inputs).
void quantize_row_32(const float* x, int64_t n, int8_t* q, int8_t* r, int8_t* t, float* d,
                     float* s);
void quantize_row_256(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsum16);

// Most activation rows one call takes (decode: one per sequence in the step).
inline constexpr int kMaxRows = 4;

// A kernel: out[r * ldo] = dot(weight row w, x[r]) for r < rows (1..kMaxRows); n is the
// row length, a multiple of the type's block.
using Kernel = void (*)(const uint8_t* w, const ActRow* x, int rows, int64_t n, float* out,
                        int64_t ldo);
// The kernel `isa` uses for `type` (a lower ISA's where it has none of its own).
Kernel kernel(GgmlType type, Isa isa);

// A kernel over several weight rows (up to kMaxWeightRows, `stride` bytes apart) against one
// activation row: out[i] = dot(weight row i, x). The same floats as Kernel per row; it
// interleaves the rows' independent chains (single-sequence decode is latency-bound).
inline constexpr int kMaxWeightRows = 4;
using RowsKernel = void (*)(const uint8_t* w, int64_t stride, int rows, const ActRow& x,
                            int64_t n, float* out);
// Null where `isa` (and the ISAs below it) has no multi-row kernel for `type`.
RowsKernel rows_kernel(GgmlType type, Isa isa);

// Dequantizes n elements of `type` to float32 (prefill's panels): the same floats as
// kvattn::dequantize_row, with AVX2 for the 32-element block types.
void dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n);

// out[r * ldo] = dot(weight row `w` (n elements of `type`, n a multiple of its block),
// activation row r) for r < rows (1..kMaxRows), with the active ISA's kernel.
void dot(GgmlType type, const uint8_t* w, const ActRow* x, int rows, int64_t n, float* out,
         int64_t ldo);
// The same with a given ISA's kernel (tests compare the paths).
void dot_with(Isa isa, GgmlType type, const uint8_t* w, const ActRow* x, int rows, int64_t n,
              float* out, int64_t ldo);

}  // namespace kvattn::qdot
