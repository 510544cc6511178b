#include "engine/model/weight_matrix.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "engine/model/qdot/qdot.h"

namespace kvattn::cpu_model {
namespace {

#define KVATTN_AVX2 __attribute__((target("avx2,fma,f16c")))

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

// ---- element loads: 8 weights as float32 ----

KVATTN_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
KVATTN_AVX2 inline __m256 load8(const f16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
KVATTN_AVX2 inline __m256 load8(const bf16_t* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

KVATTN_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Output features [n0, n1) for R rows of x: each weight row is read once for all R rows.
template <typename W, int R>
KVATTN_AVX2 void stream_avx2(const W* w, int64_t in, int64_t n0, int64_t n1, const float* x,
                             int64_t ldx, float* y, int64_t ldy, float beta) {
  for (int64_t n = n0; n < n1; ++n) {
    const W* wr = w + n * in;
    __m256 a0[R], a1[R];
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= in; k += 16) {
      const __m256 w0 = load8(wr + k), w1 = load8(wr + k + 8);
      for (int r = 0; r < R; ++r) {
        a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + r * ldx + k), a0[r]);
        a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + r * ldx + k + 8), a1[r]);
      }
    }
    for (; k + 8 <= in; k += 8) {
      const __m256 w0 = load8(wr + k);
      for (int r = 0; r < R; ++r) {
        a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + r * ldx + k), a0[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      float s = hsum(_mm256_add_ps(a0[r], a1[r]));
      for (int64_t j = k; j < in; ++j) s += to_float(wr[j]) * x[r * ldx + j];
      float& out = y[r * ldy + n];
      out = beta == 0.0f ? s : s + beta * out;
    }
  }
}

template <typename W>
void stream_scalar(const W* w, int64_t in, int64_t n0, int64_t n1, const float* x, int64_t ldx,
                   int64_t rows, float* y, int64_t ldy, float beta) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = n0; n < n1; ++n) {
      float s = 0.0f;
      for (int64_t k = 0; k < in; ++k) s += to_float(w[n * in + k]) * x[r * ldx + k];
      float& out = y[r * ldy + n];
      out = beta == 0.0f ? s : s + beta * out;
    }
  }
}

template <typename W>
void stream(const W* w, int64_t in, int64_t n0, int64_t n1, const float* x, int64_t ldx,
            int64_t rows, float* y, int64_t ldy, float beta) {
  if (!have_avx2()) return stream_scalar(w, in, n0, n1, x, ldx, rows, y, ldy, beta);
  switch (rows) {
    case 1: return stream_avx2<W, 1>(w, in, n0, n1, x, ldx, y, ldy, beta);
    case 2: return stream_avx2<W, 2>(w, in, n0, n1, x, ldx, y, ldy, beta);
    case 3: return stream_avx2<W, 3>(w, in, n0, n1, x, ldx, y, ldy, beta);
    default: return stream_avx2<W, 4>(w, in, n0, n1, x, ldx, y, ldy, beta);
  }
}

// ---- conversions ----

KVATTN_AVX2 void to_f16_avx2(const float* src, f16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) dst[i] = float_to_f16(src[i]);
}

template <typename W>
void convert_from_f32(const float* src, W* dst, int64_t n) {
  if constexpr (std::is_same_v<W, f16_t>) {
    if (have_avx2()) return to_f16_avx2(src, dst, n);
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = from_float<W>(src[i]);
}

template <typename W>
KVATTN_AVX2 void to_f32_avx2(const W* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(src + i));
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

template <typename W>
void convert_to_f32(const W* src, float* dst, int64_t n) {
  if (have_avx2()) return to_f32_avx2(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}

// ---- int8 blocks ----

// A kQ8 matrix: q [out, in] int8, scale [out, in / 32] float32.
struct Q8 {
  const int8_t* q;
  const float* scale;
};

template <int R>
KVATTN_AVX2 void stream_q8_avx2(Q8 w, int64_t in, int64_t n0, int64_t n1, const float* x,
                                int64_t ldx, float* y, int64_t ldy, float beta) {
  const int64_t nb = in / WeightMatrix::kQ8Block;
  for (int64_t n = n0; n < n1; ++n) {
    const int8_t* qr = w.q + n * in;
    const float* sr = w.scale + n * nb;
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qr + b * 32));
      const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
      const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
      const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
      const __m256 w2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
      const __m256 w3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
      const __m256 s = _mm256_set1_ps(sr[b]);
      for (int r = 0; r < R; ++r) {
        const float* xb = x + r * ldx + b * 32;
        __m256 d = _mm256_mul_ps(w0, _mm256_loadu_ps(xb));
        d = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xb + 8), d);
        d = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xb + 16), d);
        d = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xb + 24), d);
        acc[r] = _mm256_fmadd_ps(d, s, acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float v = hsum(acc[r]);
      float& out = y[r * ldy + n];
      out = beta == 0.0f ? v : v + beta * out;
    }
  }
}

KVATTN_AVX2 void dequant_q8_row_avx2(const int8_t* q, const float* s, int64_t in, float* out) {
  for (int64_t k = 0; k < in; k += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + k));
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    _mm256_storeu_ps(out + k, _mm256_mul_ps(v, _mm256_set1_ps(s[k / WeightMatrix::kQ8Block])));
  }
}

void dequant_q8_row(Q8 w, int64_t in, int64_t row, float* out) {
  const int8_t* q = w.q + row * in;
  const float* s = w.scale + row * (in / WeightMatrix::kQ8Block);
  if (have_avx2()) return dequant_q8_row_avx2(q, s, in, out);  // in % 32 == 0 for kQ8
  for (int64_t k = 0; k < in; ++k) out[k] = static_cast<float>(q[k]) * s[k / WeightMatrix::kQ8Block];
}

void stream(Q8 w, int64_t in, int64_t n0, int64_t n1, const float* x, int64_t ldx,
            int64_t rows, float* y, int64_t ldy, float beta) {
  if (!have_avx2()) {
    std::vector<float> wr(in);
    for (int64_t n = n0; n < n1; ++n) {
      dequant_q8_row(w, in, n, wr.data());
      stream_scalar(wr.data(), in, 0, 1, x, ldx, rows, y + n, ldy, beta);
    }
    return;
  }
  switch (rows) {
    case 1: return stream_q8_avx2<1>(w, in, n0, n1, x, ldx, y, ldy, beta);
    case 2: return stream_q8_avx2<2>(w, in, n0, n1, x, ldx, y, ldy, beta);
    case 3: return stream_q8_avx2<3>(w, in, n0, n1, x, ldx, y, ldy, beta);
    default: return stream_q8_avx2<4>(w, in, n0, n1, x, ldx, y, ldy, beta);
  }
}

// One block of 32: scale = max|w| / 127, q = round(w / scale).
KVATTN_AVX2 void quantize_block_avx2(const float* w, int8_t* q, float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 32; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(w + k)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float s = _mm_cvtss_f32(h) / 127.0f;
  *scale = s;
  const __m256 inv = _mm256_set1_ps(s > 0.0f ? 1.0f / s : 0.0f);
  alignas(32) int32_t v[32];
  for (int k = 0; k < 32; k += 8) {  // cvtps rounds to nearest even
    _mm256_store_si256(reinterpret_cast<__m256i*>(v + k),
                       _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(w + k), inv)));
  }
  for (int k = 0; k < 32; ++k) q[k] = static_cast<int8_t>(std::clamp(v[k], -127, 127));
}

void quantize_block_scalar(const float* w, int8_t* q, float* scale) {
  float amax = 0.0f;
  for (int k = 0; k < 32; ++k) amax = std::max(amax, std::abs(w[k]));
  const float s = amax / 127.0f;
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  *scale = s;
  for (int k = 0; k < 32; ++k) {
    q[k] = static_cast<int8_t>(std::clamp(std::nearbyint(w[k] * inv), -127.0f, 127.0f));
  }
}

void quantize_q8(const float* src, int64_t out, int64_t in, int8_t* q, float* scale) {
  static_assert(WeightMatrix::kQ8Block == 32);
  const int64_t nb = in / WeightMatrix::kQ8Block;
  const bool avx2 = have_avx2();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t off = n * in + b * 32;
      if (avx2) {
        quantize_block_avx2(src + off, q + off, scale + n * nb + b);
      } else {
        quantize_block_scalar(src + off, q + off, scale + n * nb + b);
      }
    }
  }
}

// Rows [n0, n0 + rows) of W as float32, `in` per row.
template <typename W>
void rows_to_f32(const W* w, int64_t in, int64_t n0, int64_t rows, float* out) {
  convert_to_f32(w + n0 * in, out, rows * in);
}
void rows_to_f32(Q8 w, int64_t in, int64_t n0, int64_t rows, float* out) {
  for (int64_t r = 0; r < rows; ++r) dequant_q8_row(w, in, n0 + r, out + r * in);
}

// The panel path's work items for a step of `rows` rows over `out` output features.
// sgemm packs its x block afresh for every call, one float copied per 2 x panel multiply-adds,
// so a narrow panel spends as much on packing as on arithmetic (32-wide: packing was half of
// sgemm's kernel time in an engine prefill, session 42); likewise the weight panel once per
// row block. Steps of fewer than kWideRows rows keep narrow panels (~32 of them: the
// parallelism over output features they need); longer steps take panels of up to 512 features
// and blocks of kRowBlock rows (256 against 128: -5% on a 2,300-token SmolLM2 prefill step;
// 512 no better).
struct PanelPlan {
  int64_t panel, num_panels, block, num_blocks;
};
constexpr int64_t kWideRows = 128;
constexpr int64_t kRowBlock = 256;
PanelPlan panel_plan(int64_t out, int64_t rows) {
  PanelPlan p{};
  if (rows < kWideRows) {
    p.panel = std::clamp<int64_t>(((out + 31) / 32 + 15) / 16 * 16, 32, 512);
    p.block = rows;
  } else {
    const int64_t parts = (out + 511) / 512;
    p.panel = ((out + parts - 1) / parts + 15) / 16 * 16;
    p.block = kRowBlock;
  }
  p.num_panels = (out + p.panel - 1) / p.panel;
  p.num_blocks = (rows + p.block - 1) / p.block;
  return p;
}

// ---- the two paths ----

template <typename W>
void apply_typed(W w, int64_t out, int64_t in, const float* x, int64_t ldx, int64_t rows,
                 float* y, int64_t ldy, float beta) {
  const int nt = omp_get_max_threads();
  if (rows <= kStreamingMaxRows) {
    // Contiguous slices of output features, one per thread of the team (which may be smaller
    // than asked for when OpenMP's dynamic adjustment is on).
#pragma omp parallel num_threads(nt)
    {
      const int team = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t per = (out + team - 1) / team;
      const int64_t n0 = std::min(out, t * per), n1 = std::min(out, n0 + per);
      if (n0 < n1) stream(w, in, n0, n1, x, ldx, rows, y, ldy, beta);
    }
    return;
  }
  // Items of (a panel of output features) x (a block of rows), each one single-threaded sgemm
  // over a float32 panel. Sized by the step's shape alone, never by the team: OpenBLAS's sgemm
  // rounds some elements differently for another panel width (20 x 576 x 576 in 80-wide panels
  // against 144-wide: 292 of 11,520 elements differ, Debian's 0.3.21 on a Zen 4 core), so a
  // team-sized item made a token's floats depend on how many threads the tuner (team_tuner.h)
  // gave the step, i.e. on the machine's load, and seeded requests diverged between server
  // runs (session 26: the openai client test under ctest -j2, the tuner at 1 thread for the
  // first requests and 2 later).
  const PanelPlan plan = panel_plan(out, rows);
  const int64_t num_items = plan.num_panels * plan.num_blocks;
#pragma omp parallel num_threads(nt)
  {
    thread_local std::vector<float> buf;
    if constexpr (!std::is_same_v<W, const float*>) buf.resize(plan.panel * in);
    int64_t held = -1;  // the panel this thread's buf holds (this call's)
    // Panel-major order: a thread's consecutive items mostly share a dequantized panel.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < num_items; ++item) {
      const int64_t p = item / plan.num_blocks, b = item - p * plan.num_blocks;
      const int64_t n0 = p * plan.panel, nb = std::min(plan.panel, out - n0);
      const int64_t r0 = b * plan.block, rb = std::min(plan.block, rows - r0);
      const float* wp;
      if constexpr (std::is_same_v<W, const float*>) {
        wp = w + n0 * in;
      } else {
        if (held != p) rows_to_f32(w, in, n0, nb, buf.data());
        held = p;
        wp = buf.data();
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rb),
                  static_cast<blasint>(nb), static_cast<blasint>(in), 1.0f, x + r0 * ldx,
                  static_cast<blasint>(ldx), wp, static_cast<blasint>(in), beta,
                  y + r0 * ldy + n0, static_cast<blasint>(ldy));
    }
  }
}

// ---- kGguf: rows as GGUF blocks ----

struct Gguf {
  const std::vector<WeightMatrix::Segment>* segs;
};

void rows_to_f32(Gguf w, int64_t in, int64_t n0, int64_t rows, float* out) {
  for (const auto& s : *w.segs) {
    const int64_t a = std::max(n0, s.row0), b = std::min(n0 + rows, s.row0 + s.rows);
    for (int64_t n = a; n < b; ++n) {
      qdot::dequantize(s.type, s.data + (n - s.row0) * s.row_bytes, out + (n - n0) * in, in);
    }
  }
}

// apply_gguf streams small steps itself (quantized activations); apply_typed only panels.
void stream(Gguf, int64_t, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t,
            float) {
  KVATTN_FAIL("WeightMatrix: kGguf steps of few rows go through apply_gguf");
}

// Several [rows_i, cols] float32 tensors stacked by rows into one.
Tensor stack_f32(std::vector<Tensor> parts) {
  if (parts.size() == 1) return std::move(parts.front());
  int64_t rows = 0;
  const int64_t cols = parts.front().size(1);
  for (const auto& p : parts) rows += p.size(0);
  Tensor out = Tensor::empty({rows, cols}, DType::kF32);
  auto* dst = out.ptr<char>();
  for (auto& p : parts) {
    std::memcpy(dst, p.data(), p.nbytes());
    dst += p.nbytes();
    p = Tensor();  // free as we go: peak memory stays near one copy of the weights
  }
  return out;
}

// kGguf's format for matrices without dot products on their blocks: the file's own precision
// (a quantized part's type, else ModelWeights::file_types, else float32), f16 for quantized
// types, float32 where the stacked parts differ. Called before the parts are taken out of w.
WeightFormat gguf_fallback(const ModelWeights& w, const std::vector<std::string>& names) {
  std::optional<WeightFormat> common;
  for (const auto& name : names) {
    GgmlType t = GgmlType::kF32;
    if (const auto q = w.quantized.find(name); q != w.quantized.end()) {
      t = q->second.type;
    } else if (const auto f = w.file_types.find(name); f != w.file_types.end()) {
      t = f->second;
    }
    const WeightFormat f = t == GgmlType::kF32   ? WeightFormat::kF32
                           : t == GgmlType::kBF16 ? WeightFormat::kBF16
                                                  : WeightFormat::kF16;
    if (common && *common != f) return WeightFormat::kF32;
    common = f;
  }
  return common.value_or(WeightFormat::kF32);
}

}  // namespace

WeightMatrix::WeightMatrix(ModelWeights& w, const std::vector<std::string>& names,
                           WeightFormat format) {
  KVATTN_CHECK(!names.empty(), "WeightMatrix: no tensor named");
  bool direct = format == WeightFormat::kGguf;
  for (const auto& name : names) {
    auto q = w.quantized.find(name);
    direct = direct && q != w.quantized.end() && qdot::supports(q->second.type) &&
             q->second.shape.size() == 2 && q->second.shape[1] % qdot::block_elems(q->second.type) == 0;
  }
  if (direct) {
    format_ = WeightFormat::kGguf;
    for (const auto& name : names) {
      auto it = w.quantized.find(name);
      const QuantizedWeight& q = it->second;
      KVATTN_CHECK(out_ == 0 || q.shape[1] == in_, "WeightMatrix: '", name, "' has ",
                   q.shape[1], " columns but the matrices stacked with it have ", in_);
      in_ = q.shape[1];
      const int64_t rb = q.row_bytes();
      KVATTN_CHECK(static_cast<int64_t>(q.bytes.size()) == rb * q.shape[0], "WeightMatrix: '",
                   name, "' holds ", q.bytes.size(), " bytes but ", q.shape[0], " rows of ",
                   ggml_type_name(q.type), " need ", rb * q.shape[0]);
      segments_.push_back(Segment{q.type, out_, q.shape[0], rb, q.bytes.data()});
      owners_.push_back(q.owner);
      (qdot::block_elems(q.type) == 32 ? want32_ : want256_) = true;
      out_ += q.shape[0];
      w.quantized.erase(it);
    }
    return;
  }
  const WeightFormat stored = format == WeightFormat::kGguf ? gguf_fallback(w, names) : format;
  std::vector<Tensor> parts;
  for (const auto& name : names) {
    if (auto q = w.quantized.find(name); q != w.quantized.end()) {
      parts.push_back(q->second.dequantize());
      w.quantized.erase(q);
      continue;
    }
    auto it = w.tensors.find(name);
    KVATTN_CHECK(it != w.tensors.end(), "Model: tensor '", name, "' is missing");
    parts.push_back(std::move(it->second));
    w.tensors.erase(it);
  }
  *this = WeightMatrix(stack_f32(std::move(parts)), stored);
}

int64_t WeightMatrix::mapped_bytes() const {
  int64_t n = 0;
  for (const auto& s : segments_) n += s.rows * s.row_bytes;
  return n;
}

void WeightMatrix::apply_gguf(const float* x, int64_t ldx, int64_t rows, float* y, int64_t ldy,
                              float beta) const {
  thread_local qdot::ActRows acts;
  if (rows > kStreamingMaxRows) {
    // Panels + sgemm. The 32-block types take x as it is: decode's 22-bit activations
    // (qdot.h) are within 2^-21 of a block's amax of it, so a token's result differs between
    // a prefill-sized and a decode-sized step by about float32 rounding, as with the float
    // formats. The K types take x as their decode kernels quantize it (int8 per 256, llama.cpp's
    // Q8_K), so the two steps agree up to rounding unless a rounding flips an int8 level.
    thread_local std::vector<float> x256;
    if (want256_) {
      acts.quantize(x, ldx, rows, in_, false, true);
      x256.resize(rows * in_);
      for (int64_t r = 0; r < rows; ++r) {
        const qdot::ActRow a = acts.row(r);
        for (int64_t k = 0; k < in_; ++k) {
          x256[r * in_ + k] = static_cast<float>(a.qk[k]) * a.dk[k / 256];
        }
      }
    }
    for (const Segment& seg : segments_) {
      const std::vector<Segment> one{Segment{seg.type, 0, seg.rows, seg.row_bytes, seg.data}};
      if (qdot::block_elems(seg.type) == 32) {
        apply_typed(Gguf{&one}, seg.rows, in_, x, ldx, rows, y + seg.row0, ldy, beta);
      } else {
        apply_typed(Gguf{&one}, seg.rows, in_, x256.data(), in_, rows, y + seg.row0, ldy, beta);
      }
    }
    return;
  }
  acts.quantize(x, ldx, rows, in_, want32_, want256_);
  qdot::ActRow ar[qdot::kMaxRows];
  for (int64_t r = 0; r < rows; ++r) ar[r] = acts.row(r);
  const qdot::Isa isa = qdot::active_isa();
  qdot::Kernel kern[4];
  qdot::RowsKernel rows_kern[4];  // one activation row: several weight rows per call
  const auto nseg = static_cast<int64_t>(segments_.size());
  KVATTN_CHECK(nseg <= 4, "WeightMatrix: at most 4 stacked parts");
  for (int64_t i = 0; i < nseg; ++i) {
    kern[i] = qdot::kernel(segments_[i].type, isa);
    rows_kern[i] = rows == 1 ? qdot::rows_kernel(segments_[i].type, isa) : nullptr;
  }
  const int nt = omp_get_max_threads();
  const int r = static_cast<int>(rows);
#pragma omp parallel num_threads(nt)
  {
    const int team = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (out_ + team - 1) / team;
    const int64_t n0 = std::min(out_, t * per), n1 = std::min(out_, n0 + per);
    for (int64_t i = 0; i < nseg; ++i) {
      const Segment& s = segments_[i];
      const int64_t a = std::max(n0, s.row0), b = std::min(n1, s.row0 + s.rows);
      if (rows_kern[i] != nullptr) {
        for (int64_t n = a; n < b; n += qdot::kMaxWeightRows) {
          const int w = static_cast<int>(std::min<int64_t>(qdot::kMaxWeightRows, b - n));
          float v[qdot::kMaxWeightRows];
          rows_kern[i](s.data + (n - s.row0) * s.row_bytes, s.row_bytes, w, ar[0], in_, v);
          for (int k = 0; k < w; ++k) y[n + k] = beta == 0.0f ? v[k] : v[k] + beta * y[n + k];
        }
        continue;
      }
      for (int64_t n = a; n < b; ++n) {
        float v[qdot::kMaxRows];
        kern[i](s.data + (n - s.row0) * s.row_bytes, ar, r, in_, v, 1);
        for (int k = 0; k < r; ++k) {
          float& out = y[k * ldy + n];
          out = beta == 0.0f ? v[k] : v[k] + beta * out;
        }
      }
    }
  }
}

WeightMatrix::WeightMatrix(const Tensor& f32, WeightFormat format) : format_(format) {
  KVATTN_CHECK(f32.dtype() == DType::kF32 && f32.view().ndim == 2,
               "WeightMatrix: source must be a float32 matrix but is ", f32.dtype(), " ",
               f32.view().shape_str());
  out_ = f32.size(0);
  in_ = f32.size(1);
  if (format_ == WeightFormat::kGguf) format_ = WeightFormat::kQ8;  // no blocks to keep
  if (format_ == WeightFormat::kQ8 && in_ % kQ8Block != 0) format_ = WeightFormat::kF16;
  switch (format_) {
    case WeightFormat::kF32:
      data_ = f32;
      break;
    case WeightFormat::kF16:
      data_ = Tensor::empty({out_, in_}, DType::kF16);
      convert_from_f32(f32.ptr<float>(), data_.ptr<f16_t>(), out_ * in_);
      break;
    case WeightFormat::kBF16:
      data_ = Tensor::empty({out_, in_}, DType::kBF16);
      convert_from_f32(f32.ptr<float>(), data_.ptr<bf16_t>(), out_ * in_);
      break;
    case WeightFormat::kQ8:
      data_ = Tensor::empty({out_, in_}, DType::kU8);
      scales_ = Tensor::empty({out_, in_ / kQ8Block}, DType::kF32);
      quantize_q8(f32.ptr<float>(), out_, in_, data_.ptr<int8_t>(), scales_.ptr<float>());
      break;
    case WeightFormat::kGguf:
      break;
  }
}

void WeightMatrix::apply(const float* x, int64_t ldx, int64_t rows, float* y, int64_t ldy,
                         float beta) const {
  if (rows <= 0) return;
  switch (format_) {
    case WeightFormat::kF32:
      return apply_typed(data_.ptr<const float>(), out_, in_, x, ldx, rows, y, ldy, beta);
    case WeightFormat::kF16:
      return apply_typed(data_.ptr<const f16_t>(), out_, in_, x, ldx, rows, y, ldy, beta);
    case WeightFormat::kBF16:
      return apply_typed(data_.ptr<const bf16_t>(), out_, in_, x, ldx, rows, y, ldy, beta);
    case WeightFormat::kQ8:
      return apply_typed(Q8{data_.ptr<const int8_t>(), scales_.ptr<const float>()}, out_, in_, x,
                         ldx, rows, y, ldy, beta);
    case WeightFormat::kGguf:
      return apply_gguf(x, ldx, rows, y, ldy, beta);
  }
}

void WeightMatrix::row(int64_t i, float* out) const {
  switch (format_) {
    case WeightFormat::kF32:
      std::memcpy(out, data_.ptr<float>() + i * in_, in_ * sizeof(float));
      return;
    case WeightFormat::kF16:
      return convert_to_f32(data_.ptr<f16_t>() + i * in_, out, in_);
    case WeightFormat::kBF16:
      return convert_to_f32(data_.ptr<bf16_t>() + i * in_, out, in_);
    case WeightFormat::kQ8:
      return dequant_q8_row(Q8{data_.ptr<const int8_t>(), scales_.ptr<const float>()}, in_, i, out);
    case WeightFormat::kGguf:
      return rows_to_f32(Gguf{&segments_}, in_, i, 1, out);
  }
}

}  // namespace kvattn::cpu_model
