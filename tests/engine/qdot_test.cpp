// Quantized dot products (engine/model/qdot) against float64: every supported GGUF type, every
// ISA path this CPU has plus the portable one, random blocks and worst-case scales.
//
// The chain of trust: gguf_test checks dequantize_row against gguf-py's dequantizer; here a
// float64 decoder of the blocks is checked against dequantize_row on random blocks (to within
// float32's rounding of its products), and the kernels against that decoder times the
// activations as quantized (their int8 values times their scales, in float64).
//
// Tolerance of a kernel: its integer sums are exact, so its only errors are the float32
// steps: per block one product of scales, one conversion and one product (K types: two more
// for the min term; a 32-block lane of up to 2^30 is rounded once when converted), then one
// add per block into an accumulator (the 16 lanes of a 32-block row, or one running sum for
// 256-blocks) and a 4-level tree. A float32 sum of k rounded terms is off by at most about
// k * 2^-24 times the sum of the terms' magnitudes, so the bound is (2 * blocks + 8) * 2^-24
// * S, S = sum over elements of (|scale part| + |min part|) * |activation as quantized|; the
// test takes twice that.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/model/qdot/qdot.h"
#include "kvattn/core/dtype.h"
#include "kvattn/engine/gguf.h"

namespace kvattn::qdot {
namespace {

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ2_K,
                           GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(best_isa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

double f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_float(f16_t{h});
}
void put_f16(uint8_t* p, float v) {
  const uint16_t h = float_to_f16(v).bits;
  std::memcpy(p, &h, 2);
}

// One element in float64: value = a + c, a the scaled quant, c the (negative) min term.
struct Elem {
  double a, c;
};

// Independent float64 decoder of one block, written from ggml's layouts (ggml-common.h).
void decode64(GgmlType t, const uint8_t* b, Elem* y) {
  switch (t) {
    case GgmlType::kQ4_0: {
      const double d = f16_at(b);
      for (int j = 0; j < 16; ++j) {
        y[j] = {d * ((b[2 + j] & 15) - 8), 0};
        y[j + 16] = {d * ((b[2 + j] >> 4) - 8), 0};
      }
      return;
    }
    case GgmlType::kQ4_1: {
      const double d = f16_at(b), m = f16_at(b + 2);
      for (int j = 0; j < 16; ++j) {
        y[j] = {d * (b[4 + j] & 15), m};
        y[j + 16] = {d * (b[4 + j] >> 4), m};
      }
      return;
    }
    case GgmlType::kQ8_0: {
      const double d = f16_at(b);
      for (int j = 0; j < 32; ++j) y[j] = {d * static_cast<int8_t>(b[2 + j]), 0};
      return;
    }
    case GgmlType::kQ2_K: {
      const double d = f16_at(b + 80), dmin = f16_at(b + 82);
      for (int n = 0, is = 0, k = 0; n < 256; n += 128) {
        const uint8_t* q = b + 16 + n / 4;
        for (int shift = 0; shift < 8; shift += 2) {
          for (int half = 0; half < 2; ++half, ++is) {
            const uint8_t sc = b[is];
            for (int l = 0; l < 16; ++l) {
              y[k++] = {d * (sc & 15) * ((q[l + 16 * half] >> shift) & 3), -dmin * (sc >> 4)};
            }
          }
        }
      }
      return;
    }
    case GgmlType::kQ3_K: {
      const double d = f16_at(b + 108);
      const uint8_t* s = b + 96;
      int sc[16];
      for (int g = 0; g < 8; ++g) {
        sc[g] = (s[g] & 15) | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4);
        sc[g + 8] = (s[g] >> 4) | (((s[8 + g % 4] >> (2 * (g / 4 + 2))) & 3) << 4);
      }
      int k = 0, is = 0;
      uint8_t m = 1;
      for (int n = 0; n < 256; n += 128) {
        const uint8_t* q = b + 32 + n / 4;
        for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
          for (int half = 0; half < 2; ++half, ++is) {
            for (int l = 0; l < 16; ++l) {
              const int i = l + 16 * half;
              const int v = ((q[i] >> shift) & 3) - ((b[i] & m) ? 0 : 4);
              y[k++] = {d * (sc[is] - 32) * v, 0};
            }
          }
        }
      }
      return;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = t == GgmlType::kQ5_K;
      const double d = f16_at(b), dmin = f16_at(b + 2);
      const uint8_t* s = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        int sc, mn;
        if (j < 4) {
          sc = s[j] & 63;
          mn = s[j + 4] & 63;
        } else {
          sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
          mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = qs[32 * (j / 2) + l];
          int v = (j % 2) ? (byte >> 4) : (byte & 15);
          if (five) v += ((qh[l] >> j) & 1) * 16;
          y[32 * j + l] = {d * sc * v, -dmin * mn};
        }
      }
      return;
    }
    case GgmlType::kQ6_K: {
      const double d = f16_at(b + 208);
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      for (int n = 0; n < 2; ++n) {
        const uint8_t* ql = b + 64 * n;
        const uint8_t* qh = b + 128 + 32 * n;
        for (int l = 0; l < 32; ++l) {
          const int q1 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          const int base = 128 * n, is = 8 * n + l / 16;
          y[base + l] = {d * sc[is] * q1, 0};
          y[base + l + 32] = {d * sc[is + 2] * q2, 0};
          y[base + l + 64] = {d * sc[is + 4] * q3, 0};
          y[base + l + 96] = {d * sc[is + 6] * q4, 0};
        }
      }
      return;
    }
    default: FAIL() << "no decoder";
  }
}

// Offsets of the fp16 scale fields of a block.
std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: case GgmlType::kQ8_0: return {0};
    case GgmlType::kQ4_1: return {0, 2};
    case GgmlType::kQ2_K: return {80, 82};
    case GgmlType::kQ3_K: return {108};
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: return {0, 2};
    case GgmlType::kQ6_K: return {208};
    default: return {};
  }
}

enum class Scales { kRandom, kMaxAll, kMinSubnormal, kNegMax, kMixedExtremes };

// A weight row of `blocks` blocks: random bytes, then finite fp16 scales of the given kind.
std::vector<uint8_t> make_row(GgmlType t, int64_t blocks, Scales kind, std::mt19937& rng) {
  const int64_t bb = block_bytes(t);
  std::vector<uint8_t> w(static_cast<size_t>(bb * blocks));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : w) v = static_cast<uint8_t>(byte(rng));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-14, 0);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = w.data() + b * bb;
    if (kind == Scales::kMaxAll || kind == Scales::kMixedExtremes) {
      // Every quant and sub-scale byte at its maximum too (saturation paths).
      if (kind == Scales::kMaxAll) std::memset(blk, 0xFF, static_cast<size_t>(bb));
    }
    for (int off : f16_fields(t)) {
      float v = 0.0f;
      switch (kind) {
        case Scales::kRandom: v = normal(rng) * std::ldexp(1.0f, expo(rng)); break;
        case Scales::kMaxAll: v = 65504.0f; break;
        case Scales::kMinSubnormal: v = std::ldexp(1.0f, -24); break;
        case Scales::kNegMax: v = -65504.0f; break;
        case Scales::kMixedExtremes: v = (b + off) % 2 ? 65504.0f : std::ldexp(1.0f, -24); break;
      }
      put_f16(blk + off, v);
    }
  }
  return w;
}

std::vector<float> make_acts(int64_t n, std::mt19937& rng, int variant) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  if (variant == 1 && n >= 64) {
    for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;  // an all-zero block (scale 0)
    x[5] = 1e4f;                                    // an outlier
  }
  if (variant == 2) {
    for (auto& v : x) v = v > 0 ? 127.0f : -127.0f;  // every q at +-127
  }
  return x;
}

// Float64 reference of one weight row against one quantized activation row, and S (see top).
void reference(GgmlType t, const uint8_t* w, const ActRow& x, int64_t n, double* ref, double* mag) {
  const int64_t be = block_elems(t), bb = block_bytes(t);
  std::vector<Elem> e(static_cast<size_t>(be));
  double s = 0, m = 0;
  for (int64_t b = 0; b < n / be; ++b) {
    decode64(t, w + b * bb, e.data());
    for (int64_t i = 0; i < be; ++i) {
      const int64_t k = b * be + i;
      const double xv =
          be == 32 ? (16384.0 * x.q32[k] + 128.0 * x.r32[k] + x.t32[k]) * (x.d32[k / 32] / 16384.0)
                   : x.qk[k] * static_cast<double>(x.dk[k / 256]);
      s += (e[i].a + e[i].c) * xv;
      m += (std::fabs(e[i].a) + std::fabs(e[i].c)) * std::fabs(xv);
    }
  }
  *ref = s;
  *mag = m;
}

TEST(Qdot, ReportsIsa) {
  std::printf("qdot: best ISA on this CPU: %s, active: %s\n",
              std::string(isa_name(best_isa())).c_str(),
              std::string(isa_name(active_isa())).c_str());
  EXPECT_THROW(set_active_isa(static_cast<Isa>(static_cast<int>(best_isa()) + 1)), Error);
}

TEST(Qdot, Float64DecoderMatchesDequantizeRow) {
  std::mt19937 rng(1);
  for (GgmlType t : kTypes) {
    SCOPED_TRACE(ggml_type_name(t));
    for (Scales kind : {Scales::kRandom, Scales::kMaxAll, Scales::kMinSubnormal, Scales::kNegMax,
                        Scales::kMixedExtremes}) {
      const int64_t blocks = 3, be = block_elems(t);
      const std::vector<uint8_t> w = make_row(t, blocks, kind, rng);
      std::vector<float> y(static_cast<size_t>(blocks * be));
      dequantize_row(t, w.data(), y.data(), blocks * be);
      std::vector<Elem> e(static_cast<size_t>(be));
      for (int64_t b = 0; b < blocks; ++b) {
        decode64(t, w.data() + b * block_bytes(t), e.data());
        for (int64_t i = 0; i < be; ++i) {
          const double want = e[i].a + e[i].c;
          // float32 products and one subtraction: a few roundings of the parts' size.
          const double tol = 4 * std::ldexp(std::fabs(e[i].a) + std::fabs(e[i].c), -24) + 1e-45;
          ASSERT_NEAR(y[b * be + i], want, tol) << "block " << b << " element " << i;
        }
      }
    }
  }
}

TEST(Qdot, ActivationQuantization) {
  std::mt19937 rng(2);
  for (int variant = 0; variant < 3; ++variant) {
    const int64_t n = 512;
    const std::vector<float> x = make_acts(n, rng, variant);
    ActRows a;
    a.quantize(x.data(), n, 1, n, true, true);
    const ActRow r = a.row(0);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_LE(std::fabs(r.q32[i] * static_cast<double>(r.d32[i / 32]) - x[i]),
                0.5001 * r.d32[i / 32] + 1e-30);
      // With the two remainders: within half of d / 16384, and each remainder within +-65.
      const double full = (16384.0 * r.q32[i] + 128.0 * r.r32[i] + r.t32[i]) *
                          (static_cast<double>(r.d32[i / 32]) / 16384);
      EXPECT_LE(std::fabs(full - x[i]), 0.5001 * r.d32[i / 32] / 16384 + 1e-30);
      EXPECT_LE(std::abs(int{r.r32[i]}), 65);
      EXPECT_LE(std::abs(int{r.t32[i]}), 65);
      EXPECT_LE(std::fabs(r.qk[i] * static_cast<double>(r.dk[i / 256]) - x[i]),
                0.5001 * r.dk[i / 256] + 1e-30);
      EXPECT_LE(std::abs(int{r.q32[i]}), 127);
    }
    for (int64_t g = 0; g < n / 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += r.qk[16 * g + i];
      EXPECT_EQ(r.bsum16[g], s);
    }
    for (int64_t b = 0; b < n / 32; ++b) {
      int s = 0;
      for (int i = 32 * b; i < 32 * b + 32; ++i) s += 16384 * r.q32[i] + 128 * r.r32[i] + r.t32[i];
      EXPECT_EQ(r.s32[b], (r.d32[b] * 0x1p-14f) * static_cast<float>(s));
    }
  }
  // A NaN or Inf in a block makes its scale NaN, so the dot products come out NaN.
  std::vector<float> x(256, 1.0f);
  x[7] = std::numeric_limits<float>::infinity();
  ActRows a;
  a.quantize(x.data(), 256, 1, 256, true, true);
  EXPECT_TRUE(std::isnan(a.row(0).d32[0]));
  EXPECT_TRUE(std::isnan(a.row(0).dk[0]));
  EXPECT_EQ(a.row(0).d32[1], 1.0f / 127.0f);
}

// The activation quantizer of the best ISA this CPU has (AVX-512's own, where present) writes
// the portable quantizer's bytes and floats: random rows, exact ties (x.5 steps), zero,
// subnormal, huge, NaN and Inf blocks.
TEST(Qdot, ActivationQuantizationIsTheSameOnEveryIsa) {
  std::mt19937 rng(5);
  const int64_t n = 32 * 24;
  std::vector<float> x;
  for (int variant = 0; variant < 3; ++variant) {
    const std::vector<float> v = make_acts(n, rng, variant);
    x.insert(x.end(), v.begin(), v.end());
  }
  std::vector<float> special(n, 0.0f);  // block 0: all zeros
  for (int i = 0; i < 32; ++i) {
    special[32 + i] = (i - 15.5f) / 8;  // with amax 15.875 (below): d = 1/8, ties x.5 steps
    special[64 + i] = std::numeric_limits<float>::denorm_min() * (i + 1);  // subnormal step
    special[96 + i] = std::numeric_limits<float>::max() * (i % 3 - 1);     // huge, exact
    special[128 + i] = -0.0f;
    special[160 + i] = 1e-30f * static_cast<float>(i);
  }
  special[32] = 127.0f / 8;
  special[192 + 5] = std::numeric_limits<float>::quiet_NaN();
  special[224 + 9] = -std::numeric_limits<float>::infinity();
  for (int i = 256; i < n; ++i) special[i] = static_cast<float>(i % 64) / 16.0f - 2.0f;
  x.insert(x.end(), special.begin(), special.end());
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  const Isa best = best_isa();
  ActRows want, got;
  set_active_isa(Isa::kScalar);
  want.quantize(x.data(), n, rows, n, true, false);
  set_active_isa(best);
  got.quantize(x.data(), n, rows, n, true, false);
  for (int64_t r = 0; r < rows; ++r) {
    const ActRow a = want.row(r), b = got.row(r);
    EXPECT_EQ(std::memcmp(a.q32, b.q32, n), 0) << "row " << r;
    EXPECT_EQ(std::memcmp(a.r32, b.r32, n), 0) << "row " << r;
    EXPECT_EQ(std::memcmp(a.t32, b.t32, n), 0) << "row " << r;
    EXPECT_EQ(std::memcmp(a.d32, b.d32, n / 32 * sizeof(float)), 0) << "row " << r;
    EXPECT_EQ(std::memcmp(a.s32, b.s32, n / 32 * sizeof(float)), 0) << "row " << r;
  }
}

// Every type x every ISA x rows 1..4 x scale kinds x lengths, against float64, and every
// ISA bit-identical to the portable kernel.
TEST(Qdot, EveryTypeAndIsaMatchesFloat64) {
  std::mt19937 rng(3);
  const std::vector<Isa> isas = available_isas();
  for (GgmlType t : kTypes) {
    const int64_t be = block_elems(t);
    double worst = 0;
    for (int64_t blocks : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{48}}) {
      const int64_t n = blocks * be;
      for (Scales kind : {Scales::kRandom, Scales::kMaxAll, Scales::kMinSubnormal,
                          Scales::kNegMax, Scales::kMixedExtremes}) {
        for (int rows = 1; rows <= kMaxRows; ++rows) {
          SCOPED_TRACE(::testing::Message() << ggml_type_name(t) << " n=" << n << " rows="
                                            << rows << " scales=" << static_cast<int>(kind));
          const std::vector<uint8_t> w = make_row(t, blocks, kind, rng);
          std::vector<float> x;
          for (int r = 0; r < rows; ++r) {
            const std::vector<float> xr = make_acts(n, rng, (r + static_cast<int>(kind)) % 3);
            x.insert(x.end(), xr.begin(), xr.end());
          }
          ActRows a;
          a.quantize(x.data(), n, rows, n, be == 32, be == 256);
          std::vector<ActRow> ar;
          for (int r = 0; r < rows; ++r) ar.push_back(a.row(r));
          std::vector<float> portable(rows * 3, std::nanf("")), got(rows * 3);
          dot_with(Isa::kScalar, t, w.data(), ar.data(), rows, n, portable.data(), 3);
          for (int r = 0; r < rows; ++r) {
            double ref, mag;
            reference(t, w.data(), ar[r], n, &ref, &mag);
            const double tol = 2 * (2 * blocks + 8) * std::ldexp(mag, -24) + 1e-40;
            ASSERT_TRUE(std::isfinite(portable[r * 3])) << "row " << r;
            ASSERT_NEAR(portable[r * 3], ref, tol) << "row " << r;
            if (mag > 0) worst = std::max(worst, std::fabs(portable[r * 3] - ref) / (std::ldexp(mag, -24) * (2 * blocks + 8)));
          }
          for (Isa isa : isas) {
            std::fill(got.begin(), got.end(), std::nanf(""));
            dot_with(isa, t, w.data(), ar.data(), rows, n, got.data(), 3);
            for (int r = 0; r < rows; ++r) {
              uint32_t a_bits, b_bits;
              std::memcpy(&a_bits, &got[r * 3], 4);
              std::memcpy(&b_bits, &portable[r * 3], 4);
              ASSERT_EQ(a_bits, b_bits) << isa_name(isa) << " row " << r << ": " << got[r * 3]
                                        << " vs portable " << portable[r * 3];
            }
          }
        }
      }
    }
    std::printf("qdot %-5s: worst |err| = %.3f of the bound's unit (2 blocks + 8) * 2^-24 * S\n",
                std::string(ggml_type_name(t)).c_str(), worst);
  }
}

// Q4_K, Q5_K and Q6_K: every ISA kernel this CPU runs is bit-equal to the portable one also
// at the integer extremes: every quant at its top, every sub-scale at its largest magnitude
// (Q6_K's int8 -128 and +127 as well as 0xFF), activations all +-127; on AVX-512 CPUs their
// AVX-512 kernels are their own (not the AVX2 fallback).
TEST(Qdot, KTypesAvx512KernelsAtTheExtremes) {
  std::mt19937 rng(5);
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    for (Isa isa : available_isas()) {
      if (isa < Isa::kAvx512) continue;
      EXPECT_NE(kernel(t, isa), kernel(t, Isa::kAvx2)) << ggml_type_name(t) << " " << isa_name(isa);
    }
    const int64_t blocks = 5, n = blocks * 256;
    for (int sub : {0xFF, 0x80, 0x7F, 0x00}) {
      for (Scales kind : {Scales::kMaxAll, Scales::kNegMax, Scales::kRandom}) {
        std::vector<uint8_t> w = make_row(t, blocks, kind, rng);
        for (int64_t b = 0; b < blocks; ++b) {
          uint8_t* blk = w.data() + b * block_bytes(t);
          if (t == GgmlType::kQ6_K) {
            std::memset(blk, 0xFF, 192);      // every quant 63 (31 after the offset)
            std::memset(blk + 192, sub, 16);  // int8 sub-scales
          } else {
            std::memset(blk + 4, sub, 12);  // 6-bit scales and mins
            std::memset(blk + 16, 0xFF, block_bytes(t) - 16);
          }
        }
        for (int variant = 0; variant < 3; ++variant) {
          SCOPED_TRACE(::testing::Message() << ggml_type_name(t) << " sub=" << sub << " scales="
                                            << static_cast<int>(kind) << " acts=" << variant);
          std::vector<float> x;
          for (int r = 0; r < kMaxRows; ++r) {
            const std::vector<float> xr = make_acts(n, rng, (variant + r) % 3);
            x.insert(x.end(), xr.begin(), xr.end());
          }
          ActRows a;
          a.quantize(x.data(), n, kMaxRows, n, false, true);
          std::vector<ActRow> ar;
          for (int r = 0; r < kMaxRows; ++r) ar.push_back(a.row(r));
          float want[kMaxRows], got[kMaxRows];
          dot_with(Isa::kScalar, t, w.data(), ar.data(), kMaxRows, n, want, 1);
          for (Isa isa : available_isas()) {
            dot_with(isa, t, w.data(), ar.data(), kMaxRows, n, got, 1);
            for (int r = 0; r < kMaxRows; ++r) {
              uint32_t ga, wa;
              std::memcpy(&ga, &got[r], 4);
              std::memcpy(&wa, &want[r], 4);
              ASSERT_EQ(ga, wa) << isa_name(isa) << " row " << r << ": " << got[r] << " vs "
                                << want[r];
            }
          }
        }
      }
    }
  }
}

// The multi-row kernels (several weight rows, one activation row) give the per-row bits.
TEST(Qdot, RowsKernelsMatchThePerRowKernel) {
  std::mt19937 rng(4);
  for (GgmlType t : kTypes) {
    for (Isa isa : available_isas()) {
      const RowsKernel rk = rows_kernel(t, isa);
      if (rk == nullptr) continue;
      for (int64_t blocks : {int64_t{1}, int64_t{3}, int64_t{18}}) {
        const int64_t n = blocks * block_elems(t), rb = blocks * block_bytes(t);
        for (int w = 1; w <= kMaxWeightRows; ++w) {
          SCOPED_TRACE(::testing::Message() << ggml_type_name(t) << " " << isa_name(isa)
                                            << " n=" << n << " w=" << w);
          const std::vector<uint8_t> m = make_row(t, blocks * w, Scales::kRandom, rng);
          const std::vector<float> x = make_acts(n, rng, w % 3);
          ActRows a;
          a.quantize(x.data(), n, 1, n, true, false);
          const ActRow ar = a.row(0);
          float got[kMaxWeightRows], want;
          rk(m.data(), rb, w, ar, n, got);
          for (int i = 0; i < w; ++i) {
            dot_with(Isa::kScalar, t, m.data() + i * rb, &ar, 1, n, &want, 1);
            uint32_t ga, wa;
            std::memcpy(&ga, &got[i], 4);
            std::memcpy(&wa, &want, 4);
            ASSERT_EQ(ga, wa) << "weight row " << i << ": " << got[i] << " vs " << want;
          }
        }
      }
    }
  }
}

// Prefill's panels: qdot::dequantize gives dequantize_row's floats (AVX2 for 32-blocks).
TEST(Qdot, DequantizeMatchesDequantizeRow) {
  std::mt19937 rng(5);
  for (GgmlType t : kTypes) {
    for (Scales kind : {Scales::kRandom, Scales::kMaxAll, Scales::kNegMax}) {
      const int64_t blocks = 5, n = blocks * block_elems(t);
      const std::vector<uint8_t> w = make_row(t, blocks, kind, rng);
      std::vector<float> a(n), b(n);
      dequantize(t, w.data(), a.data(), n);
      dequantize_row(t, w.data(), b.data(), n);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float))) << ggml_type_name(t);
    }
  }
}

TEST(Qdot, SupportedTypes) {
  for (GgmlType t : kTypes) EXPECT_TRUE(supports(t)) << ggml_type_name(t);
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ5_0, GgmlType::kQ5_1,
                     GgmlType::kQ8_K, GgmlType::kBF16}) {
    EXPECT_FALSE(supports(t)) << ggml_type_name(t);
  }
}

}  // namespace
}  // namespace kvattn::qdot
