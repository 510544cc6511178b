#include "kvattn/core/dlpack.h"

#include <dlpack/dlpack.h>

#include <vector>

namespace kvattn {
namespace {

DType dtype_from_dl(DLDataType t) {
  KVATTN_CHECK(t.lanes == 1, "from_dlpack: dtype lanes must be 1 but is ", int(t.lanes));
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  if (t.code == kDLInt && t.bits == 32) return DType::kI32;
  if (t.code == kDLInt && t.bits == 64) return DType::kI64;
  if (t.code == kDLUInt && t.bits == 8) return DType::kU8;
  KVATTN_FAIL("from_dlpack: dtype (code ", int(t.code), ", bits ", int(t.bits),
              ") must be one of float32, float16, bfloat16, int32, int64, uint8");
}

DLDataType dtype_to_dl(DType t) {
  switch (t) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kU8: return {kDLUInt, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

struct ExportContext {
  Tensor tensor;  // keeps the storage alive
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

}  // namespace

TensorView from_dlpack(const DLManagedTensor* managed) {
  KVATTN_CHECK(managed != nullptr, "from_dlpack: tensor must not be null");
  const DLTensor& t = managed->dl_tensor;
  Device device;
  if (t.device.device_type == kDLCPU) {
    device = Device::cpu();
  } else if (t.device.device_type == kDLCUDA) {
    device = Device::cuda(t.device.device_id);
  } else {
    KVATTN_FAIL("from_dlpack: device type must be CPU (1) or CUDA (2) but is ",
                int(t.device.device_type));
  }
  const DType dtype = dtype_from_dl(t.dtype);
  KVATTN_CHECK(t.ndim >= 0 && t.ndim <= kMaxDims, "from_dlpack: ndim must be in [0, ", kMaxDims,
               "] but is ", t.ndim);
  KVATTN_CHECK(t.byte_offset % dtype_size(dtype) == 0, "from_dlpack: byte_offset ",
               t.byte_offset, " is not a multiple of the element size ", dtype_size(dtype));
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  std::vector<int64_t> strides(t.ndim);
  if (t.strides == nullptr) {  // compact row-major
    int64_t s = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      strides[d] = s;
      s *= shape[d];
    }
  } else {
    strides.assign(t.strides, t.strides + t.ndim);
  }
  return TensorView(static_cast<char*>(t.data) + t.byte_offset, dtype, device, shape, strides);
}

DLManagedTensor* to_dlpack(const Tensor& tensor) {
  KVATTN_CHECK(tensor.defined(), "to_dlpack: tensor must be defined");
  auto* ctx = new ExportContext;
  ctx->tensor = tensor;
  const TensorView& v = tensor.view();
  ctx->shape.assign(v.shape.begin(), v.shape.begin() + v.ndim);
  ctx->strides.assign(v.strides.begin(), v.strides.begin() + v.ndim);
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = v.data;
  t.device = {v.device.is_cpu() ? kDLCPU : kDLCUDA, v.device.index};
  t.ndim = v.ndim;
  t.dtype = dtype_to_dl(v.dtype);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
  };
  return &ctx->managed;
}

}  // namespace kvattn
