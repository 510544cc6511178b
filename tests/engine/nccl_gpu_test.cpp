// NCCL communicators (engine/parallel/nccl_comm.h) with as many ranks as there are visible
// GPUs (one on the single-GPU machine): all-reduce sums and all-gather concatenates, checked
// bit-exactly on fresh random bf16/f32 data; NVLink multicast is kept off. Exits 77 without a
// CUDA device or in a build without NCCL.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/device.h"
#include "engine_test_util.h"
#include "kvattn/core/dtype.h"
#include "kvattn/core/error.h"

#ifdef KVATTN_WITH_NCCL
#include <cuda_runtime_api.h>

#include "engine/parallel/nccl_comm.h"

namespace kvattn {
namespace {

std::vector<int> all_devices() {
  int n = 0;
  cudaGetDeviceCount(&n);
  std::vector<int> d(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) d[i] = i;
  return d;
}

void check(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

TEST(Nccl, AllReduceSumsAndAllGatherConcatenates) {
  const auto devices = all_devices();
  auto comms = NcclComm::create(devices);
  ASSERT_EQ(comms.size(), devices.size());
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  const int n = static_cast<int>(devices.size());
  std::mt19937_64 rng(std::random_device{}());
  for (int64_t count : {1, 7, 4096, 1 << 20}) {
    // Small integers in f32: every sum is exact whatever the reduction order.
    std::uniform_int_distribution<int> d(-1000, 1000);
    std::vector<std::vector<float>> host(n, std::vector<float>(static_cast<size_t>(count)));
    for (auto& h : host) for (auto& x : h) x = static_cast<float>(d(rng));
    std::vector<float*> buf(n), gathered(n);
    std::vector<cudaStream_t> streams(n);
    for (int r = 0; r < n; ++r) {
      check(cudaSetDevice(devices[r]));
      check(cudaStreamCreate(&streams[r]));
      check(cudaMalloc(reinterpret_cast<void**>(&buf[r]), count * sizeof(float)));
      check(cudaMalloc(reinterpret_cast<void**>(&gathered[r]), n * count * sizeof(float)));
      check(cudaMemset(gathered[r], 0xff, n * count * sizeof(float)));  // poison
      check(cudaMemcpy(buf[r], host[r].data(), count * sizeof(float), cudaMemcpyHostToDevice));
    }
    NcclComm::group_start();
    for (int r = 0; r < n; ++r) comms[r]->all_gather(buf[r], gathered[r], count, DType::kF32, streams[r]);
    NcclComm::group_end();
    NcclComm::group_start();
    for (int r = 0; r < n; ++r) comms[r]->all_reduce_sum(buf[r], count, DType::kF32, streams[r]);
    NcclComm::group_end();
    std::vector<float> want(static_cast<size_t>(count), 0.0f);
    for (const auto& h : host) for (int64_t i = 0; i < count; ++i) want[i] += h[i];
    for (int r = 0; r < n; ++r) {
      check(cudaSetDevice(devices[r]));
      check(cudaStreamSynchronize(streams[r]));
      std::vector<float> got(static_cast<size_t>(count)), all(static_cast<size_t>(n * count));
      check(cudaMemcpy(got.data(), buf[r], count * sizeof(float), cudaMemcpyDeviceToHost));
      check(cudaMemcpy(all.data(), gathered[r], n * count * sizeof(float), cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), count * sizeof(float)), 0) << "rank " << r;
      for (int s = 0; s < n; ++s) {
        EXPECT_EQ(std::memcmp(all.data() + s * count, host[s].data(), count * sizeof(float)), 0)
            << "rank " << r << " slot " << s;
      }
      cudaFree(buf[r]);
      cudaFree(gathered[r]);
      cudaStreamDestroy(streams[r]);
    }
  }
  // bf16 through the same path: with one rank the sum is the input, bit for bit.
  if (n == 1) {
    const int64_t count = 3000;
    std::vector<uint16_t> h(static_cast<size_t>(count));
    for (auto& x : h) x = static_cast<uint16_t>(rng() & 0x7f7f);  // finite values
    void* b = nullptr;
    check(cudaSetDevice(devices[0]));
    check(cudaMalloc(&b, count * 2));
    check(cudaMemcpy(b, h.data(), count * 2, cudaMemcpyHostToDevice));
    comms[0]->all_reduce_sum(b, count, DType::kBF16, nullptr);
    check(cudaDeviceSynchronize());
    std::vector<uint16_t> got(static_cast<size_t>(count));
    check(cudaMemcpy(got.data(), b, count * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, h);
    cudaFree(b);
  }
}

TEST(Nccl, RejectsInvisibleDevices) {
  const std::vector<int> bad = {0, 1000};
  try {
    NcclComm::create(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device 1000 is not visible"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvattn
#endif  // KVATTN_WITH_NCCL

int main(int argc, char** argv) { return kvattn::test::nccl_test_main(argc, argv); }
