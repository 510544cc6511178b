// The split-KV planner for the CUDA decode kernel, and the library-owned workspace.
//
// The kernel cuts the batch's tiles into equal ranges on the device (stream-K,
// decode_params.h), so the plan only sizes the workspace: enough slots for one range per
// resident CTA plus one piece per sequence (num_splits = the smallest count whose workspace
// holds that many). Batches the stream mode cannot serve, or of one tile per sequence, get
// {1, 0}: whole sequences per CTA, no workspace. Batches of few sequences x KV heads get the
// small-batch kernel's workspace (decode_params.h, "small mode").
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode/decode_params.h"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/tuning.h"

namespace kvattn::cuda {

DecodePlan plan_decode(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                       int64_t head_dim, int64_t q_len, int64_t max_seqlen_k, int device,
                       bool uniform_lengths) {
  const int64_t group = num_heads / num_kv_heads;
  const int64_t tile_dim = decode_tile_dim(head_dim);  // the workspace holds tile_dim floats a row
  const DecodeConfig c =
      decode_config(num_kv_heads, group * q_len, tile_dim, 2, decode_plan_unit_rows(tile_dim),
                    tile_dim != head_dim);
  int64_t parts = decode_parts(device, c, tile_dim, std::max<int64_t>(num_seqs, 1));
  // The plan does not know the cache dtype: where an fp8 cache would take the swapped tile
  // (decode_use_swap; its CTAs of fewer stages may share an SM), the workspace holds ranges for
  // the larger count too, so that its ranges are not capped (part_cap) below one per CTA; and
  // as such a batch skips the small-batch kernel, the stream ranges are sized even where a
  // 16-bit cache would take the small kernel.
  const int64_t rows = group * q_len;
  // (fp8 at head_dim 256 only where CudaTuning::fp8_extended_forms allows it, the default;
  // at 80 / 96 on the padded 128 tile only where fp8_padded_decode does too.)
  const CudaTuning& t = cuda_tuning();
  const bool padded = tile_dim != head_dim;
  const bool fp8_form = padded ? t.fp8_extended_forms != 0 && t.fp8_padded_decode != 0
                               : tile_dim != 256 || t.fp8_extended_forms != 0;
  const bool fp8_swap_possible =
      fp8_form && decode_use_swap(t.decode_swap, rows, tile_dim, /*fp8=*/true, /*ext=*/false);
  if (fp8_swap_possible) {
    const DecodeConfig c8 =
        decode_config(num_kv_heads, rows, tile_dim, 1, kDecodeSwapRows, padded);
    const int64_t parts8 =
        decode_parts(device, c8, tile_dim, std::max<int64_t>(num_seqs, 1), /*fp8_swap=*/true);
    parts = std::max(parts, parts8);
  }
  if (num_seqs <= 0 || max_seqlen_k <= kDecodeTileKeys || !decode_stream_ok(num_seqs, max_seqlen_k)) {
    return DecodePlan{1, 0};
  }
  // Stream mode: the smallest split count whose workspace holds `parts` ranges.
  const int64_t rows_total = num_heads * q_len;
  int64_t stream_splits = 2;
  for (;; ++stream_splits) {
    const int64_t bytes = decode_workspace_bytes(num_seqs, num_heads, tile_dim, q_len, stream_splits);
    const int64_t slots = decode_ws_slots(bytes, rows_total, tile_dim);
    if (slots - num_seqs + 1 >= parts) break;
  }
  // Few sequences x KV heads for the SMs: the small-batch kernel, C chunks per (sequence,
  // unit); the smallest split count whose workspace holds its LL pieces and gen words (and,
  // where an fp8 cache would run in stream mode instead, the stream ranges too).
  const int64_t chunks = decode_small_chunks(device, num_seqs, num_kv_heads, rows, head_dim,
                                             max_seqlen_k, uniform_lengths);
  if (chunks >= 1) {  // >= 4 by the occupancy rule; any count where forced (tuning.h)
    const int64_t need = decode_small_ws_bytes(num_seqs, num_kv_heads, rows, tile_dim, chunks);
    for (int64_t s = std::max<int64_t>(chunks, 2);; ++s) {  // small mode needs >= 2 splits
      const int64_t bytes = decode_workspace_bytes(num_seqs, num_heads, tile_dim, q_len, s);
      if (bytes >= need) {
        const int64_t splits = fp8_swap_possible ? std::max(s, stream_splits) : s;
        return DecodePlan{static_cast<int>(splits),
                          decode_workspace_bytes(num_seqs, num_heads, tile_dim, q_len, splits),
                          max_seqlen_k, uniform_lengths};
      }
    }
  }
  return DecodePlan{static_cast<int>(stream_splits),
                    decode_workspace_bytes(num_seqs, num_heads, tile_dim, q_len, stream_splits),
                    max_seqlen_k, uniform_lengths};
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
