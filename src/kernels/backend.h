// Internal: the per-backend implementations behind the public op entries. The entries
// (src/kernels/*.cpp) validate every argument once and derive the problem shape; the
// backends trust what they are given, except the values of index tensors on the GPU, which
// kernels must bound-check themselves (see device_faults.h).
#pragma once

#include <cstdint>

#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/prefill_attention.h"
#include "kvattn/kernels/store_kv.h"

namespace kvattn {

// Shape facts the entry derived and checked.
struct AttentionShape {
  int64_t num_seqs = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t total_q = 0;       // rows of q
  bool paged = false;        // keys come from the caches through block_table
  int64_t num_blocks = 0;    // paged only
  int64_t block_size = 0;    // paged only
  int64_t max_blocks_per_seq = 0;  // paged only
  float scale = 0.0f;        // resolved softmax scale (never 0)
  // Resolved mask options (mask_options.h): -1 = unbounded; causal is window_right = 0.
  int64_t window_left = -1;
  int64_t window_right = -1;
  float softcap = 0.0f;      // 0 = off
};

namespace cpu {
// Caches of key's dtype: a byte copy; float8_e4m3: quantised with k_scale/v_scale (empty =>
// 1.0); bfloat16 from float32 keys: rounded.
void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping,
              const TensorView& k_scale, const TensorView& v_scale);
void prefill_attention(const PrefillArgs& args, const AttentionShape& shape);
void decode_attention(const DecodeArgs& args, const AttentionShape& shape);
}  // namespace cpu

#ifdef KVATTN_WITH_CUDA
namespace cuda {
void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping, Stream stream);
// Into float8_e4m3 caches: quantised with k_scale / v_scale (empty => 1.0), bit-exactly as
// the CPU backend.
void store_kv_fp8(const TensorView& key, const TensorView& value, const TensorView& k_cache,
                  const TensorView& v_cache, const TensorView& slot_mapping,
                  const TensorView& k_scale, const TensorView& v_scale, Stream stream);
void prefill_attention(const PrefillArgs& args, const AttentionShape& shape);
// args.plan.num_splits >= 1 here (the entry resolved num_splits == 0 already) and the
// workspace holds at least args.plan.workspace_bytes.
void decode_attention(const DecodeArgs& args, const AttentionShape& shape);
DecodePlan plan_decode(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                       int64_t head_dim, int64_t q_len, int64_t max_seqlen_k, int device,
                       bool uniform_lengths = false);
// Library-owned workspace for callers that pass plan.num_splits == 0 (grows; not capturable).
TensorView scratch_workspace(int device, int64_t bytes);
uint32_t read_device_faults(int device, bool clear);
}  // namespace cuda
#endif

}  // namespace kvattn
