// Naive float64 references for the ops, used only by tests. They are written to be obviously
// right, not fast: two-pass softmax in double over dense gathered rows, and byte copies for
// store_kv. Inputs are read through their views (any strides, f32/bf16/f16), so a bf16 case
// is referenced against exactly the bf16 values the op saw.
#pragma once

#include <cstdint>
#include <vector>

#include "kvattn/core/tensor.h"

namespace kvattn::test {

// Reference outputs of an attention op.
struct RefAttention {
  std::vector<double> out;  // [total_q, num_heads, head_dim], row-major
  std::vector<double> lse;  // [num_heads, total_q]; natural log; -inf for a row that sees no key
};

// Sliding window and softcap (flash-attn's window_size and softcap). With offset = lk - lq,
// query i sees key j iff j >= i + offset - window_left (when window_left >= 0) and
// j <= i + offset + window_right (when window_right >= 0); causal adds j <= i + offset. A
// positive softcap replaces each scaled score s by softcap * tanh(s / softcap).
// ALiBi (flash-attn's alibi_slopes): the (capped) score of query i and key j of head h gets
// -slope * |i + lk - lq - j| added; slope = alibi[h], or alibi[seq * H + h] when alibi_per_seq
// (the multi-sequence references set `seq`).
struct RefMask {
  int64_t window_left = -1;
  int64_t window_right = -1;
  double softcap = 0.0;
  std::vector<double> alibi;  // empty: no ALiBi
  bool alibi_per_seq = false;
  int64_t seq = 0;
};

// Attention of one sequence. q: [lq, H, D]; k, v: [lk, Hkv, D] (dense row-major doubles).
// Causal is bottom-right aligned: query i sees key j iff j <= i + lk - lq. GQA: query head h
// reads KV head h / (H / Hkv). A row that sees no key gets zeros and lse -inf.
// Writes out[i*H*D + h*D + d] and lse[h*lse_stride + i].
void attention_reference(const double* q, const double* k, const double* v, int64_t lq,
                         int64_t lk, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                         double scale, bool causal, double* out, double* lse, int64_t lse_stride,
                         const RefMask& mask = {});

// Integer tensor (int32/int64, any strides) to a vector, row-major.
std::vector<int64_t> to_int64s(const TensorView& t);

// Rows [begin, end) of a [tokens, heads, dim] float view (any token stride) as dense doubles.
std::vector<double> gather_rows(const TensorView& t, int64_t begin, int64_t end);

// The first lk keys of one sequence from a paged cache [num_blocks, block_size, Hkv, D]
// through one block-table row, as dense [lk, Hkv, D] doubles. Throws std::out_of_range when
// the table points outside the cache (a test bug, never expected).
std::vector<double> gather_paged(const TensorView& cache, const int64_t* table_row,
                                 int64_t table_len, int64_t lk);

// Packed varlen prefill: q [total_q, H, D], k/v [total_k, Hkv, D]; cu_q/cu_k have num_seqs+1.
RefAttention prefill_reference(const TensorView& q, const TensorView& k, const TensorView& v,
                               const std::vector<int64_t>& cu_q, const std::vector<int64_t>& cu_k,
                               double scale, bool causal, const RefMask& mask = {});

// Paged prefill: keys of sequence b are the first cu_k[b+1]-cu_k[b] slots of its block table
// (after leftpad[b] slots, when given).
RefAttention paged_prefill_reference(const TensorView& q, const TensorView& k_cache,
                                     const TensorView& v_cache, const TensorView& block_table,
                                     const std::vector<int64_t>& cu_q,
                                     const std::vector<int64_t>& cu_k, double scale, bool causal,
                                     const RefMask& mask = {},
                                     const std::vector<int64_t>& leftpad = {});

// Paged decode: q [num_seqs * q_len, H, D]; sequence b has cache_seqlens[b] keys, or, with
// `leftpad`, the keys at cache positions leftpad[b] .. cache_seqlens[b]-1.
RefAttention decode_reference(const TensorView& q, const TensorView& k_cache,
                              const TensorView& v_cache, const TensorView& block_table,
                              const TensorView& cache_seqlens, int64_t q_len, double scale,
                              bool causal, const RefMask& mask = {},
                              const std::vector<int64_t>& leftpad = {});

// store_kv by byte copies: token i < len(slot_mapping) with slot s >= 0 goes to block
// s / block_size, offset s % block_size. Throws std::out_of_range on a slot past the cache.
void store_kv_reference(const TensorView& key, const TensorView& value, const TensorView& k_cache,
                        const TensorView& v_cache, const TensorView& slot_mapping);

}  // namespace kvattn::test
