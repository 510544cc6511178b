// The portable kernels, activation quantization, and the run-time choice of ISA.
#include "engine/model/qdot/qdot.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "engine/model/qdot/qdot_impl.h"
#include "kvattn/core/dtype.h"
#include "kvattn/core/error.h"

namespace kvattn::qdot {
namespace {

using namespace detail;

float half(const uint8_t* p) { return f16_to_float(f16_t{u16_at(p)}); }

Kind kind_of(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: return kQ4_0;
    case GgmlType::kQ4_1: return kQ4_1;
    case GgmlType::kQ8_0: return kQ8_0;
    case GgmlType::kQ2_K: return kQ2_K;
    case GgmlType::kQ3_K: return kQ3_K;
    case GgmlType::kQ4_K: return kQ4_K;
    case GgmlType::kQ5_K: return kQ5_K;
    case GgmlType::kQ6_K: return kQ6_K;
    default: break;
  }
  KVATTN_FAIL("qdot: GGML type ", ggml_type_name(t), " has no direct dot product");
}

// ---- 32-element blocks: w[32] as ints, then the fixed-order float steps ----

template <int kBytes, typename Decode>
void dot32(const uint8_t* w, const ActRow* x, int rows, int64_t n, float* out, int64_t ldo,
           Decode decode) {
  const int64_t nb = n / 32;
  for (int r = 0; r < rows; ++r) {
    float acc[16] = {};
    float mins = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + b * kBytes;
      int wq[32];
      float d, m;
      decode(blk, wq, &d, &m);
      const int8_t* xq = x[r].q32 + b * 32;
      const int8_t* xr = x[r].r32 + b * 32;
      const int8_t* xt = x[r].t32 + b * 32;
      const float sc = d * (x[r].d32[b] * 0x1p-14f);
      for (int l = 0; l < 8; ++l) {
        int32_t lq = 0, lr = 0, lt = 0;
        for (int k = 0; k < 4; ++k) {
          lq += wq[4 * l + k] * xq[4 * l + k];
          lr += wq[4 * l + k] * xr[4 * l + k];
          lt += wq[4 * l + k] * xt[4 * l + k];
        }
        float& a = acc[8 * (b & 1) + l];
        a = a + static_cast<float>(lq * 16384 + lr * 128 + lt) * sc;
      }
      mins = mins + m * x[r].s32[b];
    }
    out[r * ldo] = reduce16(acc) + mins;
  }
}

void dec_q4_0(const uint8_t* b, int* q, float* d, float* m) {
  *d = half(b);
  *m = 0.0f;
  for (int j = 0; j < 16; ++j) {
    q[j] = (b[2 + j] & 0x0F) - 8;
    q[j + 16] = (b[2 + j] >> 4) - 8;
  }
}
void dec_q4_1(const uint8_t* b, int* q, float* d, float* m) {
  *d = half(b);
  *m = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    q[j] = b[4 + j] & 0x0F;
    q[j + 16] = b[4 + j] >> 4;
  }
}
void dec_q8_0(const uint8_t* b, int* q, float* d, float* m) {
  *d = half(b);
  *m = 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(b[2 + j]);
}

void scalar_q4_0(const uint8_t* w, const ActRow* x, int rows, int64_t n, float* out, int64_t ldo) {
  dot32<kBytesQ4_0>(w, x, rows, n, out, ldo, dec_q4_0);
}
void scalar_q4_1(const uint8_t* w, const ActRow* x, int rows, int64_t n, float* out, int64_t ldo) {
  dot32<kBytesQ4_1>(w, x, rows, n, out, ldo, dec_q4_1);
}
void scalar_q8_0(const uint8_t* w, const ActRow* x, int rows, int64_t n, float* out, int64_t ldo) {
  dot32<kBytesQ8_0>(w, x, rows, n, out, ldo, dec_q8_0);
}

// ---- 256-element super-blocks: the integer weights q[256] (offsets included), one scale per
// 16 elements (scale16) and one min per 16 (min16; zero for types without mins) ----

struct KBlock {
  int q[256];
  int scale16[16];
  int min16[16];
  float d, dmin;
};

void dec_q2_k(const uint8_t* b, KBlock* k) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  k->d = half(b + 80);
  k->dmin = half(b + 82);
  for (int g = 0; g < 16; ++g) {
    k->scale16[g] = scales[g] & 0x0F;
    k->min16[g] = scales[g] >> 4;
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e / 32) % 4, i = e % 32;
    k->q[e] = (qs[32 * h + i] >> (2 * j)) & 3;
  }
}

void dec_q3_k(const uint8_t* b, KBlock* k) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  int8_t sc[16];
  q3k_scales(b + 96, sc);
  k->d = half(b + 108);
  k->dmin = 0.0f;
  for (int g = 0; g < 16; ++g) {
    k->scale16[g] = sc[g];
    k->min16[g] = 0;
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e / 32) % 4, i = e % 32;
    const int lo = (qs[32 * h + i] >> (2 * j)) & 3;
    const int hi = (hmask[i] >> (4 * h + j)) & 1;
    k->q[e] = lo + 4 * hi - 4;
  }
}

// Q4_K and Q5_K share their first 16 bytes: d, dmin, then eight 6-bit (scale, min) pairs,
// one pair per 32 elements (two of KBlock's 16-element groups each).
void dec_k4_header(const uint8_t* b, KBlock* k) {
  uint8_t sc[8], mn[8];
  k4_scales(b + 4, sc, mn);
  k->d = half(b);
  k->dmin = half(b + 2);
  for (int g = 0; g < 16; ++g) {
    k->scale16[g] = sc[g / 2];
    k->min16[g] = mn[g / 2];
  }
}

void dec_q4_k(const uint8_t* b, KBlock* k) {
  dec_k4_header(b, k);
  const uint8_t* qs = b + 16;
  for (int e = 0; e < 256; ++e) {
    const int c = e / 32, i = e % 32;
    const uint8_t byte = qs[32 * (c / 2) + i];
    k->q[e] = (c % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
  }
}

void dec_q5_k(const uint8_t* b, KBlock* k) {
  dec_k4_header(b, k);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int e = 0; e < 256; ++e) {
    const int c = e / 32, i = e % 32;
    const uint8_t byte = qs[32 * (c / 2) + i];
    const int lo = (c % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
    k->q[e] = lo + 16 * ((qh[i] >> c) & 1);
  }
}

void dec_q6_k(const uint8_t* b, KBlock* k) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  k->d = half(b + 208);
  k->dmin = 0.0f;
  for (int g = 0; g < 16; ++g) {
    k->scale16[g] = sc[g];
    k->min16[g] = 0;
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, c = (e / 32) % 4, i = e % 32;
    const uint8_t lbyte = ql[64 * h + 32 * (c % 2) + i];
    const int lo = c < 2 ? (lbyte & 0x0F) : (lbyte >> 4);
    const int hi = (qh[32 * h + i] >> (2 * c)) & 3;
    k->q[e] = (lo | (hi << 4)) - 32;
  }
}

template <int kBytes, void (*Decode)(const uint8_t*, KBlock*)>
void scalar_k(const uint8_t* w, const ActRow* x, int rows, int64_t n, float* out, int64_t ldo) {
  const int64_t nb = n / 256;
  float res[kMaxRows] = {};
  KBlock k;
  for (int64_t b = 0; b < nb; ++b) {
    Decode(w + b * kBytes, &k);
    for (int r = 0; r < rows; ++r) {
      const int8_t* xq = x[r].qk + b * 256;
      const int16_t* bs = x[r].bsum16 + b * 16;
      int32_t sumi = 0, summ = 0;
      for (int g = 0; g < 16; ++g) {
        int32_t s = 0;
        for (int i = 0; i < 16; ++i) s += k.q[16 * g + i] * xq[16 * g + i];
        sumi += k.scale16[g] * s;
        summ += k.min16[g] * bs[g];
      }
      res[r] = k_step(res[r], k.d, k.dmin, x[r].dk[b], sumi, summ);
    }
  }
  for (int r = 0; r < rows; ++r) out[r * ldo] = res[r];
}

std::atomic<int> g_active{-1};

Isa isa_from_env(Isa best) {
  const char* env = std::getenv("KVATTN_QDOT_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string v(env);
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    if (v == isa_name(i)) {
      KVATTN_CHECK(i <= best, "KVATTN_QDOT_ISA=", v, ": this CPU supports at most ",
                   isa_name(best));
      return i;
    }
  }
  KVATTN_FAIL("KVATTN_QDOT_ISA must be scalar, avx2, avx512 or avx512-vnni but is '", v, "'");
}

const Table& table_for(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return scalar_table();
    case Isa::kAvx2: return avx2_table();
    case Isa::kAvx512: return avx512_table(false);
    case Isa::kAvx512Vnni: return avx512_table(true);
  }
  return scalar_table();
}

// A kernel for `kind` at `isa` or the next lower ISA that has one.
DotFn kernel_of(Isa isa, Kind kind) {
  for (int i = static_cast<int>(isa); i >= 0; --i) {
    if (DotFn f = table_for(static_cast<Isa>(i)).fn[kind]) return f;
  }
  return nullptr;
}

}  // namespace

namespace detail {
const Table& scalar_table() {
  static const Table t{{scalar_q4_0, scalar_q4_1, scalar_q8_0,
                        scalar_k<kBytesQ2_K, dec_q2_k>, scalar_k<kBytesQ3_K, dec_q3_k>,
                        scalar_k<kBytesQ4_K, dec_q4_k>, scalar_k<kBytesQ5_K, dec_q5_k>,
                        scalar_k<kBytesQ6_K, dec_q6_k>},
                       {}};
  return t;
}
}  // namespace detail

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Vnni: return "avx512-vnni";
  }
  return "?";
}

Isa best_isa() {
  static const Isa best = [] {
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
          __builtin_cpu_supports("f16c"))) {
      return Isa::kScalar;
    }
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl"))) {
      return Isa::kAvx2;
    }
    return __builtin_cpu_supports("avx512vnni") ? Isa::kAvx512Vnni : Isa::kAvx512;
  }();
  return best;
}

Isa active_isa() {
  int a = g_active.load(std::memory_order_relaxed);
  if (a < 0) {
    a = static_cast<int>(isa_from_env(best_isa()));
    g_active.store(a, std::memory_order_relaxed);
  }
  return static_cast<Isa>(a);
}

void set_active_isa(Isa isa) {
  KVATTN_CHECK(isa <= best_isa(), "qdot::set_active_isa: ", isa_name(isa),
               " is not supported by this CPU (best: ", isa_name(best_isa()), ")");
  g_active.store(static_cast<int>(isa), std::memory_order_relaxed);
}

bool supports(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ8_0: case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return true;
    default: return false;
  }
}

int64_t block_elems(GgmlType t) {
  return kind_of(t) <= kQ8_0 ? 32 : 256;
}

int64_t block_bytes(GgmlType t) {
  static constexpr int64_t kBytes[kNumKinds] = {kBytesQ4_0, kBytesQ4_1, kBytesQ8_0, kBytesQ2_K,
                                                kBytesQ3_K, kBytesQ4_K, kBytesQ5_K, kBytesQ6_K};
  return kBytes[kind_of(t)];
}

void quantize_row_32(const float* x, int64_t n, int8_t* q, int8_t* r, int8_t* t, float* d,
                     float* s) {
  auto level = [](double v) {  // |v| <= 64.5 by construction, except for NaN/Inf blocks
    return static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.0, 127.0));
  };
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    bool bad = false;
    for (int i = 0; i < 32; ++i) {
      amax = std::max(amax, std::fabs(xb[i]));
      bad |= !std::isfinite(xb[i]);
    }
    // A NaN or Inf block gets d = NaN and zero ints: its products come out NaN, as float
    // math would give.
    d[b] = bad ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
    const double step = d[b];
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      int8_t qi = 0, ri = 0, ti = 0;
      if (!bad && amax > 0.0f) {
        const double v = xb[i];
        qi = level(v / step);
        const double rem = v - qi * step;
        ri = level(rem * 128.0 / step);
        ti = level((rem - ri * step / 128.0) * 16384.0 / step);
      }
      q[b * 32 + i] = qi;
      r[b * 32 + i] = ri;
      t[b * 32 + i] = ti;
      sum += 16384 * qi + 128 * ri + ti;
    }
    s[b] = (d[b] * 0x1p-14f) * static_cast<float>(sum);
  }
}

void quantize_row_256(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsum16) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + b * 256;
    float amax = 0.0f;
    bool bad = false;
    for (int i = 0; i < 256; ++i) {
      amax = std::max(amax, std::fabs(xb[i]));
      bad |= !std::isfinite(xb[i]);
    }
    if (bad) amax = std::numeric_limits<float>::quiet_NaN();
    const float id = amax > 0.0f && !bad ? 127.0f / amax : 0.0f;
    for (int g = 0; g < 16; ++g) {
      int32_t sum = 0;
      for (int i = 16 * g; i < 16 * g + 16; ++i) {
        const float v = bad ? 0.0f : std::nearbyint(xb[i] * id);
        const int qi = static_cast<int>(std::clamp(v, -127.0f, 127.0f));
        q[b * 256 + i] = static_cast<int8_t>(qi);
        sum += qi;
      }
      bsum16[b * 16 + g] = static_cast<int16_t>(sum);
    }
    d[b] = amax / 127.0f;
  }
}

void ActRows::quantize(const float* x, int64_t ldx, int64_t rows, int64_t n, bool want32,
                       bool want256) {
  rows_ = rows;
  n_ = n;
  if (!want32) q32_.clear();  // row() hands out only the forms built by this call
  if (!want256) qk_.clear();
  if (want32) {
    KVATTN_CHECK(n % 32 == 0, "qdot::ActRows: n = ", n, " is not a multiple of 32");
    q32_.resize(rows * n);
    r32_.resize(rows * n);
    t32_.resize(rows * n);
    d32_.resize(rows * n / 32);
    s32_.resize(rows * n / 32);
    // The AVX-512 quantizer gives the same bytes: decode quantizes one row per GEMV on one
    // thread, 5-7% of a single-sequence step with the scalar divisions and nearbyint calls.
    static const bool has_dq = __builtin_cpu_supports("avx512dq");  // asked once
    const auto quant = active_isa() >= Isa::kAvx512 && has_dq ? detail::quantize_row_32_avx512
                                                              : quantize_row_32;
    for (int64_t r = 0; r < rows; ++r) {
      quant(x + r * ldx, n, &q32_[r * n], &r32_[r * n], &t32_[r * n], &d32_[r * n / 32],
            &s32_[r * n / 32]);
    }
  }
  if (want256) {
    KVATTN_CHECK(n % 256 == 0, "qdot::ActRows: n = ", n, " is not a multiple of 256");
    qk_.resize(rows * n);
    dk_.resize(rows * n / 256);
    bsum16_.resize(rows * n / 16);
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row_256(x + r * ldx, n, &qk_[r * n], &dk_[r * n / 256], &bsum16_[r * n / 16]);
    }
  }
}

ActRow ActRows::row(int64_t r) const {
  ActRow a{};
  if (!q32_.empty()) {
    a.q32 = &q32_[r * n_];
    a.d32 = &d32_[r * n_ / 32];
    a.r32 = &r32_[r * n_];
    a.t32 = &t32_[r * n_];
    a.s32 = &s32_[r * n_ / 32];
  }
  if (!qk_.empty()) {
    a.qk = &qk_[r * n_];
    a.dk = &dk_[r * n_ / 256];
    a.bsum16 = &bsum16_[r * n_ / 16];
  }
  return a;
}

Kernel kernel(GgmlType type, Isa isa) { return kernel_of(isa, kind_of(type)); }

RowsKernel rows_kernel(GgmlType type, Isa isa) {
  const Kind kind = kind_of(type);
  for (int i = static_cast<int>(isa); i >= 0; --i) {
    if (RowsKernel f = table_for(static_cast<Isa>(i)).rows_fn[kind]) return f;
  }
  return nullptr;
}

void dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  if (active_isa() >= Isa::kAvx2 && dequantize_avx2(type, src, dst, n)) return;
  dequantize_row(type, src, dst, n);
}

void dot_with(Isa isa, GgmlType type, const uint8_t* w, const ActRow* x, int rows, int64_t n,
              float* out, int64_t ldo) {
  kernel_of(isa, kind_of(type))(w, x, rows, n, out, ldo);
}

void dot(GgmlType type, const uint8_t* w, const ActRow* x, int rows, int64_t n, float* out,
         int64_t ldo) {
  dot_with(active_isa(), type, w, x, rows, n, out, ldo);
}

}  // namespace kvattn::qdot
