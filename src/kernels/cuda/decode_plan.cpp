// The split-KV planner for the CUDA decode kernel, and the library-owned workspace.
//
// v2 (default): the kernel cuts the batch's tiles into equal ranges on the device (stream-K,
// decode_params.h), so the plan only sizes the workspace: enough slots for one range per
// resident CTA plus one piece per sequence (num_splits = the smallest count whose workspace
// holds that many). Batches the stream mode cannot serve, or of one tile per sequence, get
// {1, 0}: whole sequences per CTA, no workspace.
// v1 (the baseline, cuda_tuning().decode_kernel == 1): splits of at most kMaxChunkKeys keys,
// the split count minimizing waves x (keys per split + a per-item cost).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode_params.h"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/tuning.h"

namespace kvattn::cuda {
namespace {

constexpr int64_t kV1TileKeys = 64;
constexpr int64_t kMaxChunkKeys = 2048;
constexpr int64_t kItemOverheadKeys = 128;  // per-item fixed cost, in keys streamed
constexpr int64_t kMaxSplits = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

DecodePlan plan_v1(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                   int64_t q_len, int64_t max_seqlen_k, int device) {
  const int64_t slots = static_cast<int64_t>(sm_count(device)) * decode_v1_ctas_per_sm(device, head_dim);
  if (num_seqs <= 0 || max_seqlen_k <= kV1TileKeys) return DecodePlan{1, 0};
  const int64_t group = num_heads / num_kv_heads;
  const int64_t row_chunks = ceil_div(group * q_len, kDecodeRows);
  const int64_t pairs = num_seqs * num_kv_heads * row_chunks;
  const int64_t max_splits = std::min(kMaxSplits, ceil_div(max_seqlen_k, kV1TileKeys));
  const int64_t min_splits = std::min(max_splits, ceil_div(max_seqlen_k, kMaxChunkKeys));
  int64_t best_splits = min_splits;
  int64_t best_cost = INT64_MAX;
  for (int64_t s = min_splits; s <= max_splits; ++s) {
    const int64_t chunk = ceil_div(ceil_div(max_seqlen_k, s), kV1TileKeys) * kV1TileKeys;
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

}  // namespace

DecodePlan plan_decode(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                       int64_t head_dim, int64_t q_len, int64_t max_seqlen_k, int device) {
  if (cuda_tuning().decode_kernel == 1) {
    return plan_v1(num_seqs, num_heads, num_kv_heads, head_dim, q_len, max_seqlen_k, device);
  }
  const int64_t group = num_heads / num_kv_heads;
  const DecodeConfig c = decode_config(num_kv_heads, group * q_len, head_dim);
  const int64_t parts = decode_parts(device, c, head_dim, std::max<int64_t>(num_seqs, 1));
  if (num_seqs <= 0 || max_seqlen_k <= kDecodeTileKeys || !decode_stream_ok(num_seqs, max_seqlen_k)) {
    return DecodePlan{1, 0};
  }
  for (int64_t s = 2;; ++s) {
    const int64_t bytes = decode_workspace_bytes(num_seqs, num_heads, head_dim, q_len, s);
    const int64_t slots = decode_ws_slots(bytes, num_seqs, num_heads * q_len, head_dim);
    if (slots - num_seqs + 1 >= parts) return DecodePlan{static_cast<int>(s), bytes};
  }
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
