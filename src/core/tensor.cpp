#include "kvattn/core/tensor.h"

#include <sstream>

#include "memory.h"

namespace kvattn {
namespace {

void fill_contiguous_strides(TensorView& v) {
  int64_t s = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = s;
    s *= v.shape[d];
  }
}

void set_shape(TensorView& v, const int64_t* shape, size_t n) {
  KVATTN_CHECK(n <= static_cast<size_t>(kMaxDims), "TensorView: rank is ", n,
               " but at most ", kMaxDims, " dims are supported");
  v.ndim = static_cast<int>(n);
  for (size_t i = 0; i < n; ++i) {
    KVATTN_CHECK(shape[i] >= 0, "TensorView: shape[", i, "] must be >= 0 but is ", shape[i]);
    v.shape[i] = shape[i];
  }
}

}  // namespace

TensorView::TensorView(void* data_, DType dtype_, Device device_,
                       std::initializer_list<int64_t> shape_)
    : data(data_), dtype(dtype_), device(device_) {
  set_shape(*this, shape_.begin(), shape_.size());
  fill_contiguous_strides(*this);
}

TensorView::TensorView(void* data_, DType dtype_, Device device_,
                       const std::vector<int64_t>& shape_)
    : data(data_), dtype(dtype_), device(device_) {
  set_shape(*this, shape_.data(), shape_.size());
  fill_contiguous_strides(*this);
}

TensorView::TensorView(void* data_, DType dtype_, Device device_,
                       const std::vector<int64_t>& shape_, const std::vector<int64_t>& strides_)
    : data(data_), dtype(dtype_), device(device_) {
  KVATTN_CHECK(shape_.size() == strides_.size(), "TensorView: shape has ", shape_.size(),
               " dims but strides has ", strides_.size());
  set_shape(*this, shape_.data(), shape_.size());
  for (size_t i = 0; i < strides_.size(); ++i) strides[i] = strides_[i];
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != s) return false;
    s *= shape[d];
  }
  return true;
}

std::string TensorView::shape_str() const {
  std::ostringstream os;
  os << '[';
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << ']';
  return os.str();
}

TensorView TensorView::reshape(const std::vector<int64_t>& new_shape) const {
  KVATTN_CHECK(is_contiguous(), "reshape: tensor of shape ", shape_str(),
               " must be contiguous");
  TensorView v(data, dtype, device, new_shape);
  KVATTN_CHECK(v.numel() == numel(), "reshape: new shape ", v.shape_str(), " has ", v.numel(),
               " elements but the tensor has ", numel());
  return v;
}

TensorView TensorView::slice0(int64_t begin, int64_t end) const {
  KVATTN_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], "slice0: range [",
               begin, ", ", end, ") is outside dimension 0 of size ", (ndim ? shape[0] : 0));
  TensorView v = *this;
  v.data = static_cast<char*>(data) + begin * strides[0] * dtype_size(dtype);
  v.shape[0] = end - begin;
  return v;
}

Tensor Tensor::empty(const std::vector<int64_t>& shape, DType dtype, Device device) {
  Tensor t;
  t.view_ = TensorView(nullptr, dtype, device, shape);
  const auto bytes = static_cast<size_t>(t.view_.nbytes());
  void* p = detail::device_malloc(bytes, device);
  t.storage_ = std::shared_ptr<void>(p, [device](void* q) { detail::device_free(q, device); });
  t.view_.data = p;
  return t;
}

Tensor Tensor::zeros(const std::vector<int64_t>& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  detail::device_memset(t.data(), device, 0, static_cast<size_t>(t.nbytes()));
  return t;
}

Tensor Tensor::wrap(const TensorView& view, std::shared_ptr<void> owner) {
  KVATTN_CHECK(view.is_contiguous(), "Tensor::wrap: view of shape ", view.shape_str(),
               " must be contiguous");
  KVATTN_CHECK(owner != nullptr, "Tensor::wrap: owner must not be null");
  Tensor t;
  t.view_ = view;
  t.storage_ = std::move(owner);
  return t;
}

Tensor Tensor::to(Device device) const {
  KVATTN_CHECK(view_.is_contiguous(), "Tensor::to: tensor of shape ", view_.shape_str(),
               " must be contiguous");
  std::vector<int64_t> shape(view_.shape.begin(), view_.shape.begin() + view_.ndim);
  Tensor t = empty(shape, view_.dtype, device);
  copy_bytes(t.view(), view_);
  return t;
}

void copy_bytes(const TensorView& dst, const TensorView& src) {
  KVATTN_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy_bytes: both views must be ",
               "contiguous");
  KVATTN_CHECK(dst.nbytes() == src.nbytes(), "copy_bytes: destination has ", dst.nbytes(),
               " bytes but source has ", src.nbytes());
  detail::device_memcpy(dst.data, dst.device, src.data, src.device,
                        static_cast<size_t>(src.nbytes()));
}

}  // namespace kvattn
