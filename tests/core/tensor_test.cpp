// TensorView / Tensor: strides, views into shared buffers, reshape and slice rules, errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kvattn/core/tensor.h"

namespace kvattn {
namespace {

using ::testing::HasSubstr;

// Runs fn, expects kvattn::Error, returns its message.
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

TEST(TensorView, ContiguousStridesAndSizes) {
  std::vector<float> buf(2 * 3 * 4);
  TensorView v(buf.data(), DType::kF32, Device::cpu(), {2, 3, 4});
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.stride(1), 4);
  EXPECT_EQ(v.stride(2), 1);
  EXPECT_EQ(v.stride(-1), 1);
  EXPECT_EQ(v.size(-1), 4);
  EXPECT_EQ(v.size(-3), 2);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.nbytes(), 96);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_TRUE(v.defined());
  EXPECT_EQ(v.shape_str(), "[2, 3, 4]");
  EXPECT_EQ(v.ptr<float>(), buf.data());

  std::vector<int64_t> shape = {5, 7};
  TensorView w(buf.data(), DType::kBF16, Device::cpu(), shape);
  EXPECT_EQ(w.stride(0), 7);
  EXPECT_EQ(w.nbytes(), 70);
}

TEST(TensorView, DefaultIsUndefinedAndEmptyShapesWork) {
  TensorView none;
  EXPECT_FALSE(none.defined());
  TensorView scalar(nullptr, DType::kF32, Device::cpu(), std::vector<int64_t>{});
  EXPECT_EQ(scalar.numel(), 1);
  std::vector<float> buf(4);
  TensorView empty(buf.data(), DType::kF32, Device::cpu(), {0, 8});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.defined());
}

TEST(TensorView, ExplicitStridesViewAFusedBuffer) {
  // A fused QKV projection: [tokens, (H + 2*Hkv) * D]; K is a strided view into it.
  const int64_t T = 5, H = 4, Hkv = 2, D = 8, row = (H + 2 * Hkv) * D;
  std::vector<float> qkv(T * row);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i);
  TensorView k(qkv.data() + H * D, DType::kF32, Device::cpu(), {T, Hkv, D}, {row, D, 1});
  EXPECT_FALSE(k.is_contiguous());
  EXPECT_EQ(k.numel(), T * Hkv * D);
  // Element (t, h, d) sits at t*row + H*D + h*D + d.
  const float* p = k.ptr<float>() + 3 * k.stride(0) + 1 * k.stride(1) + 5;
  EXPECT_EQ(*p, static_cast<float>(3 * row + H * D + D + 5));
  EXPECT_THAT(error_of([&] { (void)k.reshape({T, Hkv * D}); }), HasSubstr("contiguous"));
}

TEST(TensorView, IsContiguousIgnoresStridesOfSizeOneDims) {
  std::vector<float> buf(16);
  TensorView v(buf.data(), DType::kF32, Device::cpu(), {1, 4, 4}, {999, 4, 1});
  EXPECT_TRUE(v.is_contiguous());
  TensorView t(buf.data(), DType::kF32, Device::cpu(), {4, 4}, {1, 4});  // transposed
  EXPECT_FALSE(t.is_contiguous());
  TensorView gap(buf.data(), DType::kF32, Device::cpu(), {2, 4}, {8, 1});
  EXPECT_FALSE(gap.is_contiguous());
}

TEST(TensorView, ReshapeKeepsDataAndChecksElementCount) {
  std::vector<float> buf(24);
  TensorView v(buf.data(), DType::kF32, Device::cpu(), {2, 3, 4});
  TensorView r = v.reshape({6, 4});
  EXPECT_EQ(r.data, v.data);
  EXPECT_EQ(r.ndim, 2);
  EXPECT_EQ(r.stride(0), 4);
  EXPECT_EQ(r.dtype, DType::kF32);
  const std::string msg = error_of([&] { (void)v.reshape({5, 5}); });
  EXPECT_THAT(msg, HasSubstr("reshape"));
  EXPECT_THAT(msg, HasSubstr("25"));
  EXPECT_THAT(msg, HasSubstr("24"));
}

TEST(TensorView, Slice0OffsetsByTheRowStride) {
  std::vector<uint16_t> buf(10 * 6);
  TensorView v(buf.data(), DType::kBF16, Device::cpu(), {10, 3, 2}, {6, 2, 1});
  TensorView s = v.slice0(2, 7);
  EXPECT_EQ(s.size(0), 5);
  EXPECT_EQ(s.data, static_cast<void*>(buf.data() + 12));
  EXPECT_EQ(s.stride(0), 6);
  TensorView e = v.slice0(10, 10);
  EXPECT_EQ(e.numel(), 0);
  // Strided parent: the offset uses the parent's row stride, not the row size.
  std::vector<float> fused(10 * 16);
  TensorView k(fused.data() + 4, DType::kF32, Device::cpu(), {10, 2, 4}, {16, 4, 1});
  EXPECT_EQ(k.slice0(3, 4).data, static_cast<void*>(fused.data() + 4 + 48));
  for (auto [b, e2] : {std::pair<int64_t, int64_t>{-1, 2}, {3, 2}, {0, 11}, {11, 11}}) {
    EXPECT_THAT(error_of([&] { (void)v.slice0(b, e2); }), HasSubstr("slice0"))
        << b << " " << e2;
  }
}

TEST(TensorView, ConstructorErrors) {
  std::vector<float> buf(8);
  EXPECT_THAT(error_of([&] {
                TensorView(buf.data(), DType::kF32, Device::cpu(), {1, 1, 1, 1, 1, 1, 1});
              }),
              HasSubstr("7"));
  EXPECT_THAT(error_of([&] { TensorView(buf.data(), DType::kF32, Device::cpu(), {2, -1}); }),
              HasSubstr("-1"));
  EXPECT_THAT(error_of([&] {
                TensorView(buf.data(), DType::kF32, Device::cpu(), std::vector<int64_t>{2, 4},
                           std::vector<int64_t>{4});
              }),
              HasSubstr("strides"));
}

TEST(Tensor, EmptyZerosAndCopies) {
  Tensor t = Tensor::zeros({3, 5}, DType::kF32);
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_TRUE(t.view().is_contiguous());
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.ptr<float>()[i], 0.0f);
  for (int i = 0; i < 15; ++i) t.ptr<float>()[i] = static_cast<float>(i) + 0.5f;

  Tensor c = t.to(Device::cpu());
  EXPECT_NE(c.data(), t.data());
  EXPECT_EQ(std::memcmp(c.data(), t.data(), 60), 0);

  Tensor e = Tensor::empty({0, 4}, DType::kBF16);
  EXPECT_TRUE(e.defined());
  EXPECT_EQ(e.numel(), 0);
  EXPECT_NE(e.data(), nullptr);

  const TensorView& as_view = t;  // implicit conversion, no copy of the data
  EXPECT_EQ(as_view.data, t.data());

  Tensor d = Tensor::empty({15}, DType::kF32);
  copy_bytes(d.view(), t.view());
  EXPECT_EQ(std::memcmp(d.data(), t.data(), 60), 0);
  Tensor small = Tensor::empty({14}, DType::kF32);
  EXPECT_THAT(error_of([&] { copy_bytes(small.view(), t.view()); }), HasSubstr("bytes"));
  TensorView strided(t.data(), DType::kF32, Device::cpu(), {3, 2}, {5, 1});
  Tensor six = Tensor::empty({3, 2}, DType::kF32);
  EXPECT_THAT(error_of([&] { copy_bytes(six.view(), strided); }), HasSubstr("contiguous"));
}

TEST(Tensor, SharedStorageOutlivesCopies) {
  Tensor a = Tensor::empty({1024}, DType::kF32);
  void* p = a.data();
  Tensor b = a;  // shares storage
  a = Tensor();
  EXPECT_EQ(b.data(), p);
  b.ptr<float>()[1023] = 1.0f;  // still alive (ASan would flag a use after free)
  EXPECT_FALSE(a.defined());
}

#ifndef KVATTN_WITH_CUDA
TEST(Tensor, CudaWithoutTheBackendThrows) {
  EXPECT_FALSE(cuda_available());
  EXPECT_THAT(error_of([] { (void)Tensor::empty({4}, DType::kF32, Device::cuda(0)); }),
              HasSubstr("CUDA"));
  Tensor t = Tensor::zeros({4}, DType::kF32);
  EXPECT_THAT(error_of([&] { (void)t.to(Device::cuda(0)); }), HasSubstr("CUDA"));
}
#endif

TEST(Error, CheckMessagesCarryWhatAndWhere) {
  const std::string m = error_of([] { KVATTN_CHECK_EQ("op", "x head_dim", 128, 64); });
  EXPECT_THAT(m, HasSubstr("op: x head_dim must be 128 but is 64"));
  EXPECT_THAT(m, HasSubstr("tensor_test.cpp:"));
  const std::string m2 = error_of([] { KVATTN_CHECK(1 == 2, "a", 1, "b"); });
  EXPECT_THAT(m2, HasSubstr("a1b"));
  EXPECT_THAT(error_of([] { KVATTN_FAIL("boom ", 7); }), HasSubstr("boom 7"));
}

}  // namespace
}  // namespace kvattn
