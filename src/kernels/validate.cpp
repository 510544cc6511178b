#include "validate.h"

#include <cmath>

namespace kvattn::detail {

void check_defined(std::string_view fn, std::string_view name, const TensorView& t) {
  KVATTN_CHECK(t.defined(), fn, ": ", name, " must be given but is empty");
}

void check_rank(std::string_view fn, std::string_view name, const TensorView& t, int rank) {
  check_defined(fn, name, t);
  KVATTN_CHECK(t.ndim == rank, fn, ": ", name, " must have rank ", rank, " but has rank ",
               t.ndim, " (shape ", t.shape_str(), ")");
}

void check_dtype(std::string_view fn, std::string_view name, const TensorView& t, DType dtype) {
  KVATTN_CHECK(t.dtype == dtype, fn, ": ", name, " dtype must be ", dtype, " but is ", t.dtype);
}

void check_dtype_in(std::string_view fn, std::string_view name, const TensorView& t,
                    std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (t.dtype == d) return;
  }
  std::string list;
  for (DType d : allowed) list += (list.empty() ? "" : " or ") + std::string(dtype_name(d));
  KVATTN_FAIL(fn, ": ", name, " dtype must be ", list, " but is ", t.dtype);
}

void check_device(std::string_view fn, std::string_view name, const TensorView& t,
                  Device device) {
  KVATTN_CHECK(t.device == device, fn, ": ", name, " must be on ", device, " but is on ",
               t.device);
}

void check_dim(std::string_view fn, std::string_view name, const TensorView& t, int dim,
               std::string_view dim_name, int64_t expected) {
  KVATTN_CHECK(t.size(dim) == expected, fn, ": ", name, " ", dim_name, " must be ", expected,
               " but is ", t.size(dim), " (shape ", t.shape_str(), ")");
}

void check_stride(std::string_view fn, std::string_view name, const TensorView& t, int dim,
                  int64_t expected, std::string_view why) {
  KVATTN_CHECK(t.stride(dim) == expected || t.size(dim) == 1, fn, ": ", name, " stride(", dim,
               ") must be ", expected, " (", why, ") but is ", t.stride(dim));
}

void check_contiguous(std::string_view fn, std::string_view name, const TensorView& t) {
  KVATTN_CHECK(t.is_contiguous(), fn, ": ", name, " must be contiguous (shape ", t.shape_str(),
               ")");
}

void check_token_major(std::string_view fn, std::string_view name, const TensorView& t) {
  check_rank(fn, name, t, 3);
  check_stride(fn, name, t, 2, 1, "head_dim contiguous");
  check_stride(fn, name, t, 1, t.size(2), "head stride == head_dim");
  KVATTN_CHECK(t.stride(0) >= 0, fn, ": ", name, " token stride must be >= 0 but is ",
               t.stride(0));
}

void check_paged_cache(std::string_view fn, std::string_view name, const TensorView& t) {
  check_rank(fn, name, t, 4);
  check_stride(fn, name, t, 3, 1, "head_dim contiguous");
  check_stride(fn, name, t, 2, t.size(3), "head stride == head_dim");
  check_stride(fn, name, t, 1, t.size(2) * t.size(3), "contiguous inside a block");
  const int64_t block = t.size(1) * t.size(2) * t.size(3);
  KVATTN_CHECK(t.stride(0) >= block || t.size(0) <= 1, fn, ": ", name,
               " block stride must be >= one block (", block, " elements) but is ",
               t.stride(0));
}

int64_t index_at(const TensorView& t, int64_t i) {
  const int64_t off = i * t.stride(0);
  return t.dtype == DType::kI64 ? t.ptr<const int64_t>()[off] : t.ptr<const int32_t>()[off];
}

float resolve_scale(std::string_view fn, float scale, int64_t head_dim) {
  KVATTN_CHECK(std::isfinite(scale) && scale >= 0.0f, fn,
               ": softmax_scale must be finite and >= 0 (0 means 1/sqrt(head_dim)) but is ",
               scale);
  return scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(head_dim)) : scale;
}

}  // namespace kvattn::detail
