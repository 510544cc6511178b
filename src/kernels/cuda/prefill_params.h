// The one parameter block of the CUDA prefill kernels, passed by value (__grid_constant__).
//
// Layout (all strides in elements of the tensor's dtype; all tensors on one device):
//   q, out   [total_q, num_heads, head_dim]: row t, head h at  t * q_stride + h * head_dim
//   packed k, v [total_k, num_kv_heads, head_dim]: key t, head g at  t * k_stride + g * head_dim
//   paged k, v  [num_blocks, block_size, num_kv_heads, head_dim]: key j of sequence b lives in
//            block blk = block_table[b * bt_stride + j / block_size], offset o = j % block_size,
//            at  blk * k_block_stride + o * k_stride + g * head_dim
//   lse      float32 [num_heads, total_q]: (h, t) at  h * lse_head_stride + t  (nullptr: none)
//   cu_seqlens_q/k int32 [num_seqs + 1] (device), block_table int32 (device, paged only)
// Every base pointer and token/block stride is a multiple of 16 bytes (checked on the host), so
// each row can be moved in 16-byte pieces.
//
//   alibi_slopes float32 [num_heads] (alibi_seq_stride 0) or [num_seqs, num_heads]: the slope of
//            sequence b, query head h at  b * alibi_seq_stride + h  (nullptr: no ALiBi)
// Window, softcap, ALiBi and head_dim 80/96/256 are read only by the kExt kernels
// (prefill_kernel.cuh, prefill_mask.cuh) and, window/softcap/ALiBi, by the Hopper kernel's kMods
// form (hopper/prefill_sm90_*); the other kernels ignore those fields.
//
// Index VALUES (cu_seqlens, block ids) are untrusted: the kernel bound-checks them, skips the
// bad work and ORs a DeviceFault bit into *fault_word.
#pragma once

#include <cstdint>

namespace kvattn::cuda {

struct PrefillParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* block_table = nullptr;  // paged only
  const float* k_scale = nullptr;        // paged float8_e4m3 caches: [num_kv_heads] or null (1.0)
  const float* v_scale = nullptr;
  uint32_t* fault_word = nullptr;

  int64_t q_stride = 0;    // token stride of q
  int64_t o_stride = 0;    // token stride of out
  int64_t k_stride = 0;    // token stride of k (packed) or inside a block (paged)
  int64_t v_stride = 0;
  int64_t k_block_stride = 0;  // paged only
  int64_t v_block_stride = 0;  // paged only
  int64_t lse_head_stride = 0;
  int64_t bt_stride = 0;       // block_table row stride

  int num_seqs = 0;
  int num_heads = 0;
  int group = 1;          // num_heads / num_kv_heads (GQA)
  int total_q = 0;        // rows of q (bound for cu_seqlens_q)
  int total_k = 0;        // rows of packed k/v (bound for cu_seqlens_k); unused when paged
  int num_blocks = 0;     // paged only
  int block_size = 0;     // paged only
  int block_shift = -1;   // log2(block_size) when it is a power of two, else -1
  int max_blocks_per_seq = 0;
  int max_seqlen_q = 0;   // rows beyond it are not computed
  int max_seqlen_k = 0;   // a hint only (0: unknown): the Hopper schedule sizes its L2 sections
  int num_m_blocks = 0;   // ceil(max_seqlen_q / kBlockM) = gridDim.z (set by the launcher)

  float scale = 1.0f;       // softmax scale (natural units), for the LSE
  float scale_log2 = 1.0f;  // scale * log2(e): scores are exponentiated with exp2

  // The extended kernels only (kExt), after the fields every kernel reads.
  const float* alibi_slopes = nullptr;
  int64_t alibi_seq_stride = 0;
  int head_dim = 0;       // the tensors' head_dim (kExt: may be less than the tile's, zero-padded)
  int window_left = -1;   // flash-attn's window_size, -1 = unbounded, clamped to INT32_MAX
  int window_right = -1;  // causal: 0
  float softcap_in = 0.0f;   // softcap > 0: 2 * log2(e) * scale / softcap
  float softcap_out = 0.0f;  // softcap > 0: softcap / scale; 0 = off
};

}  // namespace kvattn::cuda
