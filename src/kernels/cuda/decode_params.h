// The parameter block and the fixed tiling of the CUDA paged-decode kernels (split-KV
// flash-decoding), shared by the kernels (decode_attention.cu) and the planner
// (decode_plan.cpp).
//
// Work decomposition. One work item is (sequence b, split s, row chunk rc, KV head kvh): one
// CTA of kDecodeThreads threads streams the keys [s*chunk_keys, min(L_b, (s+1)*chunk_keys)) of
// KV head kvh once, for all the query rows that read that KV head: the GQA group's heads times
// q_len tokens (row r = i * group + h, at most kDecodeRows per item; more rows => more row
// chunks). Items are numbered w = ((b * num_splits + s) * row_chunks + rc) * num_kv_heads + kvh
// and a persistent grid walks them (CTA x takes w = x, x + gridDim.x, ...); items past a
// sequence's length are skipped, so a short sequence in a batch planned for long ones costs
// almost nothing. A sequence of L_b keys uses n_b = max(1, ceil(L_b / chunk_keys)) splits.
//
// Layout (strides in elements; all tensors on one device):
//   q, out     [num_seqs * q_len, num_heads, head_dim]: token t, head h at t*q_stride + h*D
//              (out at t*out_stride + h*D); q and out have the caches' dtype (bf16 or fp16)
//   caches     [num_blocks, block_size, num_kv_heads, head_dim]: key j of sequence b lives in
//              block blk = block_table[b*bt_stride + j / block_size], offset o = j % block_size,
//              at blk*k_block_stride + (o*num_kv_heads + kvh)*D
//   lse        optional float32 [num_heads, num_seqs*q_len]: (h, t) at h*lse_head_stride + t
//   workspace  (num_splits > 1 only) float32, item (b, s, kvh, row r < rows) at
//              wi = ((b*num_splits + s)*num_kv_heads + kvh)*rows + r:
//              ws_o[wi*D .. wi*D+D) = that split's normalized output,
//              ws_lse[wi] = its log2-domain LSE (scaled scores), -inf when it saw no key.
//              A sequence with n_b == 1 is written to out directly and never merged.
// Index VALUES (block ids, cache_seqlens) are untrusted: out-of-range ones are never used to
// address memory; the kernel zero-fills or clamps and ORs a DeviceFault bit into *fault_word.
#pragma once

#include <cstdint>

namespace kvattn::cuda {

inline constexpr int kDecodeThreads = 128;  // 4 warps
inline constexpr int kDecodeWarps = kDecodeThreads / 32;
inline constexpr int kDecodeTileKeys = 64;  // keys per pipeline stage; 16 per warp
inline constexpr int kDecodeRows = 16;      // query rows per item: one mma M tile

struct DecodeParams {
  const void* q = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // nullptr: not requested
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* cache_seqlens = nullptr;
  float* ws_o = nullptr;
  float* ws_lse = nullptr;
  uint32_t* fault_word = nullptr;

  int64_t q_stride = 0;
  int64_t out_stride = 0;
  int64_t k_block_stride = 0;
  int64_t v_block_stride = 0;
  int64_t bt_stride = 0;
  int64_t lse_head_stride = 0;
  int64_t num_items = 0;

  int num_seqs = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int group = 1;        // num_heads / num_kv_heads
  int q_len = 1;
  int rows = 1;         // group * q_len
  int row_chunks = 1;   // ceil(rows / kDecodeRows)
  int block_size = 1;
  int num_blocks = 0;
  int capacity = 0;     // max_blocks_per_seq * block_size: the most keys a row of the table holds
  int num_splits = 1;
  int chunk_keys = kDecodeTileKeys;  // keys per split, a multiple of kDecodeTileKeys
  float scale_log2 = 0.0f;  // softmax scale * log2(e)
  int causal = 1;
  int l2_prefetch_tiles = 0;  // tiles prefetched into L2 beyond the smem pipeline (0: off)
};

// Keys per split for a plan of `num_splits` over block tables holding `capacity` keys.
inline int64_t decode_chunk_keys(int64_t capacity, int64_t num_splits) {
  const int64_t per = (capacity + num_splits - 1) / num_splits;
  const int64_t tiles = (per + kDecodeTileKeys - 1) / kDecodeTileKeys;
  return (tiles < 1 ? 1 : tiles) * kDecodeTileKeys;
}

// Bytes of float32 workspace the split results need (0 when num_splits == 1).
inline int64_t decode_workspace_bytes(int64_t num_seqs, int64_t num_heads, int64_t head_dim,
                                      int64_t q_len, int64_t num_splits) {
  if (num_splits <= 1) return 0;
  return num_seqs * num_splits * num_heads * q_len * (head_dim + 1) * 4;
}

// CTAs of the decode kernel for `head_dim` that fit on one SM of `device` (occupancy, cached).
// Throws kvattn::Error for an unsupported head_dim.
int decode_ctas_per_sm(int device, int64_t head_dim);

}  // namespace kvattn::cuda
