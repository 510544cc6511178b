// DLPack exchange: export then import sees the same memory, shape, strides, dtype and device;
// the exported tensor keeps the storage alive; bad dtypes, devices and offsets throw.
#include "kvattn/core/dlpack.h"

#include <dlpack/dlpack.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvattn {
namespace {

using ::testing::HasSubstr;

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-kvattn exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

// A hand-made DLManagedTensor over caller-owned memory (as PyTorch would hand us).
struct Foreign {
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
  Foreign(void* data, DLDataType dtype, DLDevice device, std::vector<int64_t> shape_,
          std::vector<int64_t> strides_ = {}, uint64_t byte_offset = 0)
      : shape(std::move(shape_)), strides(std::move(strides_)) {
    DLTensor& t = managed.dl_tensor;
    t.data = data;
    t.device = device;
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = byte_offset;
  }
};

const DLDevice kCpu{kDLCPU, 0};

TEST(DLPack, ExportThenImportSeesTheSameTensor) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64,
                   DType::kU8}) {
    Tensor t = Tensor::empty({3, 4, 5}, dt);
    auto* bytes = static_cast<unsigned char*>(t.data());
    for (int64_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 1);
    DLManagedTensor* m = to_dlpack(t);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->dl_tensor.data, t.data());
    EXPECT_EQ(m->dl_tensor.ndim, 3);
    EXPECT_EQ(m->dl_tensor.device.device_type, kDLCPU);
    EXPECT_EQ(m->dl_tensor.dtype.lanes, 1);
    EXPECT_EQ(m->dl_tensor.dtype.bits, dtype_size(dt) * 8);
    TensorView v = from_dlpack(m);
    EXPECT_EQ(v.data, t.data());
    EXPECT_EQ(v.dtype, dt) << dtype_name(dt);
    EXPECT_TRUE(v.device.is_cpu());
    ASSERT_EQ(v.ndim, 3);
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ(v.shape[d], t.view().shape[d]);
      EXPECT_EQ(v.strides[d], t.view().strides[d]);
    }
    m->deleter(m);
  }
  // dtype codes as other frameworks spell them.
  Tensor bf = Tensor::empty({2}, DType::kBF16);
  DLManagedTensor* m = to_dlpack(bf);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLBfloat);
  m->deleter(m);
  Tensor f = Tensor::empty({2}, DType::kF32);
  m = to_dlpack(f);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLFloat);
  m->deleter(m);
}

TEST(DLPack, ExportKeepsStorageAliveUntilTheDeleter) {
  DLManagedTensor* m = nullptr;
  {
    Tensor t = Tensor::empty({256}, DType::kF32);
    for (int i = 0; i < 256; ++i) t.ptr<float>()[i] = static_cast<float>(i);
    m = to_dlpack(t);
  }  // the Tensor is gone; the export still owns the storage
  TensorView v = from_dlpack(m);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(v.ptr<float>()[i], static_cast<float>(i));
  m->deleter(m);  // frees (ASan / LSan see a leak or a double free otherwise)
}

TEST(DLPack, ImportsStridesOffsetsAndCompactLayouts) {
  std::vector<float> buf(64);
  for (int i = 0; i < 64; ++i) buf[i] = static_cast<float>(i);
  // Compact (strides == nullptr): row-major strides are filled in.
  Foreign compact(buf.data(), {kDLFloat, 32, 1}, kCpu, {4, 2, 8});
  TensorView c = from_dlpack(&compact.managed);
  EXPECT_EQ(c.strides[0], 16);
  EXPECT_EQ(c.strides[1], 8);
  EXPECT_EQ(c.strides[2], 1);
  EXPECT_TRUE(c.is_contiguous());
  // Strided (a K view inside a fused buffer) with a byte offset.
  Foreign strided(buf.data(), {kDLFloat, 32, 1}, kCpu, {4, 2, 4}, {16, 4, 1}, 8 * 4);
  TensorView s = from_dlpack(&strided.managed);
  EXPECT_EQ(s.data, static_cast<void*>(buf.data() + 8));
  EXPECT_EQ(s.strides[0], 16);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.ptr<float>()[2 * s.strides[0] + 1 * s.strides[1] + 3], 8 + 32 + 4 + 3);
  // A CUDA tensor imports as a view (no access, no copy), even without the CUDA backend.
  Foreign gpu(reinterpret_cast<void*>(0x1000), {kDLBfloat, 16, 1}, {kDLCUDA, 1}, {3});
  TensorView g = from_dlpack(&gpu.managed);
  EXPECT_TRUE(g.device.is_cuda());
  EXPECT_EQ(g.device.index, 1);
  EXPECT_EQ(g.dtype, DType::kBF16);
  // Rank 0.
  Foreign scalar(buf.data(), {kDLInt, 32, 1}, kCpu, {});
  EXPECT_EQ(from_dlpack(&scalar.managed).numel(), 1);
}

TEST(DLPack, RejectsWhatKvattnCannotRepresent) {
  std::vector<double> buf(16);
  const std::vector<std::pair<DLDataType, std::string>> bad_dtypes = {
      {{kDLFloat, 64, 1}, "64"},  {{kDLComplex, 64, 1}, "dtype"}, {{kDLInt, 8, 1}, "dtype"},
      {{kDLUInt, 32, 1}, "dtype"}, {{kDLFloat, 32, 4}, "lanes"},  {{kDLBfloat, 32, 1}, "dtype"},
  };
  for (const auto& [dt, word] : bad_dtypes) {
    Foreign f(buf.data(), dt, kCpu, {4});
    const std::string msg = error_of([&] { (void)from_dlpack(&f.managed); });
    EXPECT_THAT(msg, HasSubstr("from_dlpack"));
    EXPECT_THAT(msg, HasSubstr(word)) << "code " << int(dt.code) << " bits " << int(dt.bits);
  }
  for (DLDeviceType dev : {kDLMetal, kDLVulkan, kDLOpenCL, kDLROCM}) {
    Foreign f(buf.data(), {kDLFloat, 32, 1}, {dev, 0}, {4});
    const std::string msg = error_of([&] { (void)from_dlpack(&f.managed); });
    EXPECT_THAT(msg, HasSubstr("device"));
    EXPECT_THAT(msg, HasSubstr(std::to_string(static_cast<int>(dev))));
  }
  Foreign misaligned(buf.data(), {kDLFloat, 32, 1}, kCpu, {4}, {}, 2);
  EXPECT_THAT(error_of([&] { (void)from_dlpack(&misaligned.managed); }),
              HasSubstr("byte_offset"));
  Foreign too_many(buf.data(), {kDLFloat, 32, 1}, kCpu, {1, 1, 1, 1, 1, 1, 1});
  EXPECT_THAT(error_of([&] { (void)from_dlpack(&too_many.managed); }), HasSubstr("ndim"));
  EXPECT_THAT(error_of([] { (void)from_dlpack(nullptr); }), HasSubstr("null"));
  EXPECT_THAT(error_of([] { (void)to_dlpack(Tensor()); }), HasSubstr("to_dlpack"));
}

}  // namespace
}  // namespace kvattn
