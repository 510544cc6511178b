// GGML tensor types: sizes of every known type, and dequantization to float32 of the ones the
// engine loads. Block layouts follow ggml-common.h; all multi-byte fields are little-endian and
// blocks are packed (read with memcpy, never through casts, since blocks are unaligned).
#include <cstring>

#include "kvattn/core/dtype.h"
#include "kvattn/engine/gguf.h"

namespace kvattn {
namespace {

float half_at(const uint8_t* p) {
  f16_t h;
  std::memcpy(&h.bits, p, 2);
  return f16_to_float(h);
}

// Q4_0: {f16 d; u8 qs[16]}; x = (nibble - 8) * d. Low nibbles are elements 0..15.
void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: {f16 d; f16 m; u8 qs[16]}; x = nibble * d + m.
void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0: {f16 d; u8 qh[4]; u8 qs[16]}; bit j of qh is the 5th bit of element j.
void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int x0 = ((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
    const int x1 = ((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

// Q5_1: {f16 d; f16 m; u8 qh[4]; u8 qs[16]}; x = q * d + m.
void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
    const int x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}

// Q8_0: {f16 d; i8 qs[32]}; x = q * d.
void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// 6-bit scale and min number j of a Q4_K/Q5_K block's 12 packed scale bytes.
void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}, 256 elements in 8 sub-blocks of 32;
// x = d * sc * q - dmin * mn.
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    uint8_t sc, mn;
    scale_min_k4(is, scales, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    scale_min_k4(is + 1, scales, &sc, &mn);
    const float d2 = d * sc, m2 = dmin * mn;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}, 256 elements in 16 groups of 16; byte
// scales[g] holds group g's scale (low nibble) and min (high nibble); element
// 128h + 32j + i (i < 32) is bits 2j..2j+1 of qs[32h + i]; x = d * sc * q - dmin * mn.
void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 16, h = e / 128, j = (e / 32) % 4, i = e % 32;
    const int q = (qs[32 * h + i] >> (2 * j)) & 3;
    y[e] = d * static_cast<float>(scales[g] & 0x0F) * static_cast<float>(q) -
           dmin * static_cast<float>(scales[g] >> 4);
  }
}

// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}, 256 elements in 16 groups of 16.
// Scales: 6 bits with a bias of 32; the low 4 bits of group g are the low (g < 8) or high
// nibble of scales[g % 8], the top 2 bits are bits 2(g/4)..2(g/4)+1 of scales[8 + g % 4].
// Element 128h + 32j + i: 2 low bits as Q2_K, minus 4 unless bit 4h + j of hmask[i] is set;
// x = d * (sc - 32) * q.
void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* s = b + 96;
  const float d = half_at(b + 108);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 16, h = e / 128, j = (e / 32) % 4, i = e % 32;
    const int lo_sc = g < 8 ? (s[g] & 0x0F) : (s[g - 8] >> 4);
    const int sc = (lo_sc | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
    const int q = ((qs[32 * h + i] >> (2 * j)) & 3) - (((hmask[i] >> (4 * h + j)) & 1) ? 0 : 4);
    y[e] = d * static_cast<float>(sc) * static_cast<float>(q);
  }
}

// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}, 256 elements in 8
// sub-blocks of 32 with Q4_K's scales and mins; element 32c + i: the low (c even) or high
// nibble of qs[32(c/2) + i], plus 16 when bit c of qh[i] is set; x = d * sc * q - dmin * mn.
void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int c = 0; c < 8; ++c) {
    uint8_t sc, mn;
    scale_min_k4(c, scales, &sc, &mn);
    const float dl = d * sc, ml = dmin * mn;
    for (int i = 0; i < 32; ++i) {
      const uint8_t byte = qs[32 * (c / 2) + i];
      const int q = ((c % 2 == 0) ? (byte & 0x0F) : (byte >> 4)) + (((qh[i] >> c) & 1) << 4);
      y[32 * c + i] = dl * static_cast<float>(q) - ml;
    }
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}, 256 elements; x = d * sc * (q - 32).
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * static_cast<float>(sc[is + 0] * q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2] * q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4] * q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6] * q4);
    }
  }
}

template <void (*Fn)(const uint8_t*, float*), int64_t kElems, int64_t kBytes>
void dequant_blocks(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kElems; ++i) Fn(src + i * kBytes, dst + i * kElems);
}

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  switch (static_cast<GgmlType>(id)) {
    case GgmlType::kF32: return GgmlTypeTraits{"F32", 1, 4, true};
    case GgmlType::kF16: return GgmlTypeTraits{"F16", 1, 2, true};
    case GgmlType::kBF16: return GgmlTypeTraits{"BF16", 1, 2, true};
    case GgmlType::kQ4_0: return GgmlTypeTraits{"Q4_0", 32, 18, true};
    case GgmlType::kQ4_1: return GgmlTypeTraits{"Q4_1", 32, 20, true};
    case GgmlType::kQ5_0: return GgmlTypeTraits{"Q5_0", 32, 22, true};
    case GgmlType::kQ5_1: return GgmlTypeTraits{"Q5_1", 32, 24, true};
    case GgmlType::kQ8_0: return GgmlTypeTraits{"Q8_0", 32, 34, true};
    case GgmlType::kQ8_1: return GgmlTypeTraits{"Q8_1", 32, 36, false};
    case GgmlType::kQ2_K: return GgmlTypeTraits{"Q2_K", 256, 84, true};
    case GgmlType::kQ3_K: return GgmlTypeTraits{"Q3_K", 256, 110, true};
    case GgmlType::kQ4_K: return GgmlTypeTraits{"Q4_K", 256, 144, true};
    case GgmlType::kQ5_K: return GgmlTypeTraits{"Q5_K", 256, 176, true};
    case GgmlType::kQ6_K: return GgmlTypeTraits{"Q6_K", 256, 210, true};
    case GgmlType::kQ8_K: return GgmlTypeTraits{"Q8_K", 256, 292, false};
    case GgmlType::kI8: return GgmlTypeTraits{"I8", 1, 1, false};
    case GgmlType::kI16: return GgmlTypeTraits{"I16", 1, 2, false};
    case GgmlType::kI32: return GgmlTypeTraits{"I32", 1, 4, false};
    case GgmlType::kI64: return GgmlTypeTraits{"I64", 1, 8, false};
    case GgmlType::kF64: return GgmlTypeTraits{"F64", 1, 8, false};
  }
  return std::nullopt;
}

std::string ggml_type_name(GgmlType type) {
  auto t = ggml_type_traits(static_cast<uint32_t>(type));
  return t ? std::string(t->name) : "type#" + std::to_string(static_cast<uint32_t>(type));
}

void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  auto traits = ggml_type_traits(static_cast<uint32_t>(type));
  KVATTN_CHECK(traits && traits->dequantizable, "dequantize_row: GGML type ",
               ggml_type_name(type), " is not supported (supported: F32, F16, BF16, Q4_0, Q4_1, "
               "Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
  KVATTN_CHECK(n >= 0 && n % traits->block_elems == 0, "dequantize_row: element count ", n,
               " is not a multiple of the ", traits->name, " block size ", traits->block_elems);
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = half_at(src + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        bf16_t h;
        std::memcpy(&h.bits, src + 2 * i, 2);
        dst[i] = bf16_to_float(h);
      }
      return;
    case GgmlType::kQ4_0: return dequant_blocks<dequant_q4_0, 32, 18>(src, dst, n);
    case GgmlType::kQ4_1: return dequant_blocks<dequant_q4_1, 32, 20>(src, dst, n);
    case GgmlType::kQ5_0: return dequant_blocks<dequant_q5_0, 32, 22>(src, dst, n);
    case GgmlType::kQ5_1: return dequant_blocks<dequant_q5_1, 32, 24>(src, dst, n);
    case GgmlType::kQ8_0: return dequant_blocks<dequant_q8_0, 32, 34>(src, dst, n);
    case GgmlType::kQ2_K: return dequant_blocks<dequant_q2_k, 256, 84>(src, dst, n);
    case GgmlType::kQ3_K: return dequant_blocks<dequant_q3_k, 256, 110>(src, dst, n);
    case GgmlType::kQ4_K: return dequant_blocks<dequant_q4_k, 256, 144>(src, dst, n);
    case GgmlType::kQ5_K: return dequant_blocks<dequant_q5_k, 256, 176>(src, dst, n);
    case GgmlType::kQ6_K: return dequant_blocks<dequant_q6_k, 256, 210>(src, dst, n);
    default: break;
  }
  KVATTN_FAIL("dequantize_row: unreachable type ", ggml_type_name(type));
}

}  // namespace kvattn
