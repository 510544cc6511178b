// The split-KV planner for the CUDA decode kernel, and the library-owned workspace.
//
// The planner sees only the batch's shape and an upper bound on its lengths (the lengths live
// on the device), so it plans for a batch of num_seqs sequences of max_seqlen_k keys:
// - a split must hold at most kMaxChunkKeys keys, so that a skewed batch (a few long
//   sequences among short ones) still spreads its long sequences over many SMs; the kernel
//   skips the splits a short sequence does not need at almost no cost;
// - among the split counts left, it picks the one with the least modelled time: the waves
//   of work items over the resident CTAs (SMs x CTAs per SM) times the keys per item plus a
//   fixed per-item cost (pipeline fill, partial write), so tails of a wave are counted.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode_params.h"
#include "kernels/cuda/device_props.h"

namespace kvattn::cuda {
namespace {

constexpr int64_t kMaxChunkKeys = 2048;
constexpr int64_t kItemOverheadKeys = 128;  // per-item fixed cost, in keys streamed
constexpr int64_t kMaxSplits = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

DecodePlan plan_decode(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                       int64_t head_dim, int64_t q_len, int64_t max_seqlen_k, int device) {
  const int64_t slots = static_cast<int64_t>(sm_count(device)) * decode_ctas_per_sm(device, head_dim);
  if (num_seqs <= 0 || max_seqlen_k <= kDecodeTileKeys) return DecodePlan{1, 0};
  const int64_t group = num_heads / num_kv_heads;
  const int64_t row_chunks = ceil_div(group * q_len, kDecodeRows);
  const int64_t pairs = num_seqs * num_kv_heads * row_chunks;

  const int64_t max_splits = std::min(kMaxSplits, ceil_div(max_seqlen_k, kDecodeTileKeys));
  const int64_t min_splits = std::min(max_splits, ceil_div(max_seqlen_k, kMaxChunkKeys));
  int64_t best_splits = min_splits;
  int64_t best_cost = INT64_MAX;
  for (int64_t s = min_splits; s <= max_splits; ++s) {
    const int64_t chunk = decode_chunk_keys(max_seqlen_k, s);
    const int64_t used = ceil_div(max_seqlen_k, chunk);
    if (used < s) continue;  // same chunks as a smaller split count
    const int64_t waves = ceil_div(pairs * used, slots);
    const int64_t cost = waves * (chunk + kItemOverheadKeys);
    if (cost < best_cost) {
      best_cost = cost;
      best_splits = s;
    }
  }
  return DecodePlan{static_cast<int>(best_splits),
                    decode_workspace_bytes(num_seqs, num_heads, head_dim, q_len, best_splits)};
}

TensorView scratch_workspace(int device, int64_t bytes) {
  constexpr int kMaxDevices = 64;
  struct Buffer {
    void* ptr = nullptr;
    int64_t bytes = 0;
  };
  static std::mutex mu;
  static std::array<Buffer, kMaxDevices> buffers{};
  KVATTN_CHECK(device >= 0 && device < kMaxDevices, "scratch_workspace: device must be in [0, ",
               kMaxDevices, ") but is ", device);
  std::lock_guard<std::mutex> lock(mu);
  Buffer& buf = buffers[device];
  if (buf.bytes < bytes) {
    DeviceGuard guard(device);
    if (buf.ptr != nullptr) {
      CUDA_CHECK(cudaDeviceSynchronize());  // kernels may still read the old buffer
      CUDA_CHECK(cudaFree(buf.ptr));
      buf = Buffer{};
    }
    const int64_t grown = std::max(bytes, int64_t{1} << 20);
    CUDA_CHECK(cudaMalloc(&buf.ptr, static_cast<size_t>(grown)));
    buf.bytes = grown;
  }
  return TensorView(buf.ptr, DType::kU8, Device::cuda(device), {buf.bytes});
}

}  // namespace kvattn::cuda
