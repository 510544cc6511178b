#include "support/test_util.h"

#include <cstring>

namespace kvattn::test {
namespace {

// Calls fn(flat_index, element_pointer) for every element in row-major logical order.
template <typename Fn>
void for_each_element(const TensorView& t, Fn fn) {
  const int64_t n = t.numel();
  std::vector<int64_t> idx(t.ndim, 0);
  char* base = static_cast<char*>(t.data);
  const int64_t es = dtype_size(t.dtype);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d) off += idx[d] * t.strides[d];
    fn(i, base + off * es);
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
}

void store(DType dt, char* p, float v) {
  switch (dt) {
    case DType::kF32: std::memcpy(p, &v, 4); break;
    case DType::kBF16: { bf16_t b = float_to_bf16(v); std::memcpy(p, &b, 2); break; }
    case DType::kF16: { f16_t h = float_to_f16(v); std::memcpy(p, &h, 2); break; }
    case DType::kF8E4M3: { *reinterpret_cast<uint8_t*>(p) = float_to_e4m3(v); break; }
    default: std::abort();
  }
}

double load(DType dt, const char* p) {
  switch (dt) {
    case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kBF16: { bf16_t b; std::memcpy(&b, p, 2); return bf16_to_float(b); }
    case DType::kF16: { f16_t h; std::memcpy(&h, p, 2); return f16_to_float(h); }
    case DType::kF8E4M3: return e4m3_to_float(*reinterpret_cast<const uint8_t*>(p));
    case DType::kI32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kI64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    default: std::abort();
  }
}

}  // namespace

void fill_uniform(const TensorView& t, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for_each_element(t, [&](int64_t, char* p) { store(t.dtype, p, dist(rng)); });
}

void poison(const TensorView& t) {
  for_each_element(t, [&](int64_t, char* p) { std::memset(p, 0xFF, dtype_size(t.dtype)); });
}

double element(const TensorView& t, int64_t i) {
  int64_t off = 0, rem = i;
  for (int d = t.ndim - 1; d >= 0; --d) {
    off += (rem % t.shape[d]) * t.strides[d];
    rem /= t.shape[d];
  }
  return load(t.dtype, static_cast<const char*>(t.data) + off * dtype_size(t.dtype));
}

std::vector<double> to_doubles(const TensorView& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for_each_element(t, [&](int64_t i, char* p) { out[i] = load(t.dtype, p); });
  return out;
}

ErrorStats compare(const std::vector<double>& out, const std::vector<double>& ref) {
  ErrorStats s;
  double num = 0.0, den = 0.0;
  const size_t n = std::min(out.size(), ref.size());
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(out[i]) || std::isnan(ref[i])) s.has_nan = true;
    const double d = out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    s.max_abs = std::max(s.max_abs, std::abs(d));
  }
  if (out.size() != ref.size()) s.has_nan = true;  // a size mismatch never passes
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (s.has_nan) s.rel_l2 = NAN;
  return s;
}

}  // namespace kvattn::test
