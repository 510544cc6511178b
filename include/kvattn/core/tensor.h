// TensorView: a non-owning strided view (pointer, dtype, device, shape, strides in elements).
// Tensor: an owning buffer plus the contiguous view over it.
//
// Views never own memory; every op takes views, so callers may pass slices of larger buffers
// (e.g. K cut out of a fused QKV projection with a token stride of 3*H*D).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kvattn/core/device.h"
#include "kvattn/core/dtype.h"
#include "kvattn/core/error.h"

namespace kvattn {

inline constexpr int kMaxDims = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device{};
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements

  TensorView() = default;
  // Contiguous (row-major) view.
  TensorView(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);
  TensorView(void* data, DType dtype, Device device, const std::vector<int64_t>& shape);
  // Explicit strides.
  TensorView(void* data, DType dtype, Device device, const std::vector<int64_t>& shape,
             const std::vector<int64_t>& strides);

  // An empty view (no data) means "argument not given" for optional arguments.
  bool defined() const { return data != nullptr || ndim > 0; }
  int64_t size(int d) const { return shape[norm_dim(d)]; }
  int64_t stride(int d) const { return strides[norm_dim(d)]; }
  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype); }
  bool is_contiguous() const;
  std::string shape_str() const;

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }

  // A view of the same memory with a new contiguous-compatible shape; requires is_contiguous().
  TensorView reshape(const std::vector<int64_t>& new_shape) const;
  // Rows [begin, end) of dimension 0.
  TensorView slice0(int64_t begin, int64_t end) const;

 private:
  int norm_dim(int d) const { return d < 0 ? d + ndim : d; }
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const std::vector<int64_t>& shape, DType dtype,
                      Device device = Device::cpu());
  static Tensor zeros(const std::vector<int64_t>& shape, DType dtype,
                      Device device = Device::cpu());
  // A contiguous view of memory that `owner` keeps alive (e.g. a tensor read in place from a
  // memory-mapped model file); nothing is copied. The memory may be read-only: callers that
  // got such a tensor must not write through it.
  static Tensor wrap(const TensorView& view, std::shared_ptr<void> owner);

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: views are the currency
  bool defined() const { return storage_ != nullptr; }
  void* data() const { return view_.data; }
  template <typename T>
  T* ptr() const {
    return view_.ptr<T>();
  }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  int64_t size(int d) const { return view_.size(d); }
  int64_t numel() const { return view_.numel(); }
  int64_t nbytes() const { return view_.nbytes(); }

  // Copies into a new contiguous tensor on `device` (host<->device through the CUDA runtime).
  Tensor to(Device device) const;

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

// Byte copy between two contiguous views of equal size, on any devices (synchronous).
void copy_bytes(const TensorView& dst, const TensorView& src);

}  // namespace kvattn
