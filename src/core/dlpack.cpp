#include "kvattn/core/dlpack.h"

#include <dlpack/dlpack.h>

#include <vector>

namespace kvattn {
namespace {

// DLPack >= 1.1 names this code kDLFloat8_e4m3fn; the installed header may predate it.
constexpr uint8_t kDLFloat8E4M3FN = 10;

DType dtype_from_dl(DLDataType t) {
  KVATTN_CHECK(t.lanes == 1, "from_dlpack: dtype lanes must be 1 but is ", int(t.lanes));
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  if (t.code == kDLInt && t.bits == 32) return DType::kI32;
  if (t.code == kDLInt && t.bits == 64) return DType::kI64;
  if (t.code == kDLUInt && t.bits == 8) return DType::kU8;
  if (t.code == kDLFloat8E4M3FN && t.bits == 8) return DType::kF8E4M3;
  KVATTN_FAIL("from_dlpack: dtype (code ", int(t.code), ", bits ", int(t.bits),
              ") must be one of float32, float16, bfloat16, int32, int64, uint8, float8_e4m3fn");
}

}  // namespace

DLDataType to_dlpack_dtype(DType t) {
  switch (t) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kU8: return {kDLUInt, 8, 1};
    case DType::kF8E4M3: return {kDLFloat8E4M3FN, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

namespace {

struct ExportContext {
  Tensor tensor;  // keeps the storage alive
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

}  // namespace

TensorView from_dltensor(const DLTensor& t) {
  TensorView v;
  if (t.device.device_type == kDLCPU) {
    v.device = Device::cpu();
  } else if (t.device.device_type == kDLCUDA) {
    v.device = Device::cuda(t.device.device_id);
  } else {
    KVATTN_FAIL("from_dlpack: device type must be CPU (1) or CUDA (2) but is ",
                int(t.device.device_type));
  }
  v.dtype = dtype_from_dl(t.dtype);
  KVATTN_CHECK(t.ndim >= 0 && t.ndim <= kMaxDims, "from_dlpack: ndim must be in [0, ", kMaxDims,
               "] but is ", t.ndim);
  KVATTN_CHECK(t.byte_offset % dtype_size(v.dtype) == 0, "from_dlpack: byte_offset ",
               t.byte_offset, " is not a multiple of the element size ", dtype_size(v.dtype));
  v.ndim = t.ndim;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {  // null strides: compact row-major
    KVATTN_CHECK(t.shape[d] >= 0, "from_dlpack: shape[", d, "] must be >= 0 but is ", t.shape[d]);
    v.shape[d] = t.shape[d];
    v.strides[d] = t.strides != nullptr ? t.strides[d] : stride;
    stride *= t.shape[d];
  }
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  return v;
}

TensorView from_dlpack(const DLManagedTensor* managed) {
  KVATTN_CHECK(managed != nullptr, "from_dlpack: tensor must not be null");
  return from_dltensor(managed->dl_tensor);
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
  t.dtype = to_dlpack_dtype(v.dtype);
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
