// Internal to src/engine/model/qdot: the per-ISA kernel tables and the pieces every path
// shares (block layouts, scale unpacking, the fixed-order float steps). Included by each
// kernel file; everything here is inline and integer or plain float math, so it compiles to
// the same results under every target.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/model/qdot/qdot.h"

namespace kvattn::qdot::detail {

// The supported types, densely numbered for the kernel tables.
enum Kind : int { kQ4_0, kQ4_1, kQ8_0, kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, kNumKinds };

using DotFn = Kernel;
struct Table {
  DotFn fn[kNumKinds];
  RowsKernel rows_fn[kNumKinds];
};

const Table& scalar_table();
// AVX2 dequantization of Q4_0 / Q4_1 / Q8_0 rows (false for other types).
bool dequantize_avx2(GgmlType type, const uint8_t* src, float* dst, int64_t n);
const Table& avx2_table();          // only called when the CPU has AVX2+FMA+F16C
const Table& avx512_table(bool vnni);  // AVX-512 F/BW/VL (+ VNNI); null entries fall back
// quantize_row_32 with AVX-512 F/BW/VL/DQ: the same bytes and floats (the CPU must have them).
void quantize_row_32_avx512(const float* x, int64_t n, int8_t* q, int8_t* r, int8_t* t,
                            float* d, float* s);

// The multi-row kernels (single-sequence decode) prefetch the weights this many rows ahead of
// the rows they read, two calls of kMaxWeightRows ahead in one thread's slice. The four rows'
// blocks are read in four interleaved streams that the hardware prefetcher alone kept ~100 ns
// of memory latency behind: default model decode, 1 thread, +40-50% tok/s
// (docs/notes/cpu-quantized.md). Rows are contiguous, so this is the same stream further on;
// past a matrix's end the hint is dropped, never faults.
inline constexpr int64_t kPrefetchRows = 8;

// Block sizes in bytes (ggml-common.h).
inline constexpr int64_t kBytesQ4_0 = 18, kBytesQ4_1 = 20, kBytesQ8_0 = 34;
inline constexpr int64_t kBytesQ2_K = 84, kBytesQ3_K = 110, kBytesQ4_K = 144, kBytesQ5_K = 176,
                         kBytesQ6_K = 210;

inline uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The 16 sub-block scales of a K block as small ints, and the mins where the type has them.
// Q4_K / Q5_K: 8 scales and 8 mins of 6 bits in 12 bytes (get_scale_min_k4).
inline void k4_scales(const uint8_t* q, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    mn[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    mn[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
// Q3_K: 16 scales of 6 bits (low nibbles in bytes 0..7, then high nibbles; the top 2 bits in
// bytes 8..11), stored with a +32 bias: returns scale - 32 in [-32, 31].
inline void q3k_scales(const uint8_t* s, int8_t out[16]) {
  for (int g = 0; g < 16; ++g) {
    const int lo = g < 8 ? (s[g] & 0x0F) : (s[g - 8] >> 4);
    const int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    out[g] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

// The fixed reduction of the 16 accumulators of the 32-block kernels.
inline float reduce16(const float a_in[16]) {
  float a[16];
  for (int i = 0; i < 16; ++i) a[i] = a_in[i];
  for (int i = 0; i < 8; ++i) a[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) a[i] = a[i] + a[i + 4];
  for (int i = 0; i < 2; ++i) a[i] = a[i] + a[i + 2];
  return a[0] + a[1];
}

// One super-block's float step (see qdot.h).
inline float k_step(float r, float d, float dmin, float dx, int32_t sumi, int32_t summ) {
  const float a = (d * dx) * static_cast<float>(sumi);
  const float b = (dmin * dx) * static_cast<float>(summ);
  r = r + a;
  return r - b;
}

}  // namespace kvattn::qdot::detail
