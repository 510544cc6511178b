#include "engine/model/kv_copy.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace kvattn::cuda_model {
namespace {

constexpr int kThreads = 256;

// One CTA per (pair, K/V x layer): block dst := block src of that layer's cache.
template <typename V>
__global__ void __launch_bounds__(kThreads)
    kv_copy_kernel(char* __restrict__ storage, int64_t layer_bytes, int64_t block_bytes,
                   const int32_t* __restrict__ pairs, int units_per_pair, int num_blocks) {
  const int64_t unit = blockIdx.x;
  const int64_t pair = unit / units_per_pair, kl = unit % units_per_pair;
  const int src = pairs[2 * pair], dst = pairs[2 * pair + 1];
  if (src < 0 || src >= num_blocks || dst < 0 || dst >= num_blocks) return;  // checked on the host
  char* base = storage + kl * layer_bytes;
  const V* __restrict__ s = reinterpret_cast<const V*>(base + src * block_bytes);
  V* __restrict__ d = reinterpret_cast<V*>(base + dst * block_bytes);
  const int64_t n = block_bytes / static_cast<int64_t>(sizeof(V));
  const int64_t bd = blockDim.x;
  int64_t k = threadIdx.x;
  for (; k + 3 * bd < n; k += 4 * bd) {  // four loads in flight per thread
    const V a = s[k], b = s[k + bd], c = s[k + 2 * bd], e = s[k + 3 * bd];
    d[k] = a;
    d[k + bd] = b;
    d[k + 2 * bd] = c;
    d[k + 3 * bd] = e;
  }
  for (; k < n; k += bd) d[k] = s[k];
}

}  // namespace

KVBlockCopier::~KVBlockCopier() {
  if (uploaded_ != nullptr) {
    cudaEventSynchronize(uploaded_);
    cudaEventDestroy(uploaded_);
  }
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (device_ != nullptr) cudaFree(device_);
}

void KVBlockCopier::run(const KVPool& pool, std::span<const BlockCopy> copies,
                        cudaStream_t stream, const char* fn) {
  if (copies.empty()) return;
  const int64_t nb = pool.num_blocks();
  KVATTN_CHECK(pool.storage().device().is_cuda(), fn, ": the KV pool is on ",
               pool.storage().device(), ", not on a CUDA device");
  for (size_t i = 0; i < copies.size(); ++i) {
    const BlockCopy& c = copies[i];
    KVATTN_CHECK(c.src >= 0 && c.src < nb && c.dst >= 0 && c.dst < nb, fn, ": copies[", i,
                 "] = (", c.src, ", ", c.dst, ") must name blocks in [0, ", nb, ")");
    KVATTN_CHECK(c.src != c.dst, fn, ": copies[", i, "] copies block ", c.src, " onto itself");
  }
  if (static_cast<int64_t>(role_.size()) < nb) role_.assign(static_cast<size_t>(nb), 0);
  std::string err;
  for (size_t i = 0; i < copies.size() && err.empty(); ++i) {
    role_[copies[i].src] |= 1;
    if ((role_[copies[i].dst] & 2) != 0) {
      err = std::string(fn) + ": copies[" + std::to_string(i) + "]: block " +
            std::to_string(copies[i].dst) + " is a destination twice";
    }
    role_[copies[i].dst] |= 2;
  }
  for (size_t i = 0; i < copies.size() && err.empty(); ++i) {
    if (role_[copies[i].dst] == 3) {
      err = std::string(fn) + ": copies[" + std::to_string(i) + "]: block " +
            std::to_string(copies[i].dst) + " is both a source and a destination";
    }
  }
  for (const BlockCopy& c : copies) role_[c.src] = role_[c.dst] = 0;
  KVATTN_CHECK(err.empty(), err);

  const KVCacheSpec& spec = pool.spec();
  const int64_t block_bytes = spec.block_size * spec.num_kv_heads * spec.head_dim * dtype_size(spec.dtype);
  const int64_t units_per_pair = 2 * spec.num_layers;
  const auto n = static_cast<int64_t>(copies.size());
  KVATTN_CHECK(n * units_per_pair < (int64_t{1} << 31) && nb < (int64_t{1} << 31), fn, ": ", n,
               " copies over ", spec.num_layers, " layers exceed one launch");
  const int device = pool.storage().device().index;
  cuda::DeviceGuard guard(device);
  if (device_index_ != device || n > capacity_) {
    if (uploaded_ != nullptr) CUDA_CHECK(cudaEventSynchronize(uploaded_));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // a running kernel may still read device_
    if (pinned_ != nullptr) CUDA_CHECK(cudaFreeHost(pinned_));
    if (device_ != nullptr) CUDA_CHECK(cudaFree(device_));
    if (uploaded_ != nullptr) CUDA_CHECK(cudaEventDestroy(uploaded_));
    pinned_ = nullptr;
    device_ = nullptr;
    uploaded_ = nullptr;
    capacity_ = 0;
    const int64_t cap = std::max<int64_t>(n, 256);
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, static_cast<size_t>(cap) * 2 * sizeof(int32_t)));
    pinned_ = static_cast<int32_t*>(p);
    CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(cap) * 2 * sizeof(int32_t)));
    device_ = static_cast<int32_t*>(p);
    CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
    capacity_ = cap;
    device_index_ = device;
  }
  CUDA_CHECK(cudaEventSynchronize(uploaded_));  // the previous upload has read the staging
  for (int64_t i = 0; i < n; ++i) {
    pinned_[2 * i] = copies[i].src;
    pinned_[2 * i + 1] = copies[i].dst;
  }
  CUDA_CHECK(cudaMemcpyAsync(device_, pinned_, static_cast<size_t>(n) * 2 * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaEventRecord(uploaded_, stream));
  auto* storage = static_cast<char*>(pool.storage().data());
  const int64_t layer_bytes = nb * block_bytes;
  const auto grid = static_cast<unsigned>(n * units_per_pair);
  if (block_bytes % 16 == 0 && (reinterpret_cast<uintptr_t>(storage) & 15u) == 0) {
    kv_copy_kernel<uint4><<<grid, kThreads, 0, stream>>>(storage, layer_bytes, block_bytes, device_,
                                                         static_cast<int>(units_per_pair),
                                                         static_cast<int>(nb));
  } else {
    kv_copy_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(storage, layer_bytes, block_bytes,
                                                            device_, static_cast<int>(units_per_pair),
                                                            static_cast<int>(nb));
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvattn::cuda_model
