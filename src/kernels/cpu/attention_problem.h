// Internal: the CPU attention backend's problem description and per-tile helpers (see
// attention_cpu.cpp): what a work item is, where a key row lives (packed or paged, leftpad),
// loading a key tile as float rows (bf16/f16 converted, float8_e4m3 dequantised), prefetch,
// the keys each query row sees, softcap and ALiBi.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/attention_work_plan.h"

namespace kvattn::cpu::attn {

constexpr int64_t kKeyTile = 64;
// Query rows per work item (times the GQA group): kQueryTile, or kLongQueryTile in sequences of
// at least kLongQueryRows queries (a long prefill), whose items run their rows in blocks of
// kQueryTile query rows over each transposed key tile (attend_rows): one transpose and one
// tile load for four blocks. Chosen by the shape alone, so results never depend on the team.
constexpr int64_t kQueryTile = 16;
constexpr int64_t kLongQueryTile = 64;
constexpr int64_t kLongQueryRows = 256;
inline int64_t query_tile(int64_t q_len) {
  return q_len >= kLongQueryRows ? kLongQueryTile : kQueryTile;
}

// T: q/out element type; KV: the keys' and values' (T, or a cache's bf16 / float8_e4m3).
template <typename T, typename KV>
struct Problem {
  const T* q = nullptr;
  int64_t q_stride = 0;  // token stride, elements
  T* out = nullptr;
  int64_t out_stride = 0;
  float* lse = nullptr;  // [num_heads, total_q] or null
  int64_t total_q = 0;
  const KV* k = nullptr;
  const KV* v = nullptr;
  const float* k_scale = nullptr;  // float8_e4m3 only: [num_kv_heads], null => 1.0
  const float* v_scale = nullptr;
  int64_t k_stride = 0;  // packed: token stride; paged: block stride
  int64_t v_stride = 0;
  const int32_t* block_table = nullptr;  // paged only
  int64_t block_table_stride = 0;
  int64_t block_size = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, group = 0;
  float scale = 1.0f;
  int64_t window_left = -1, window_right = -1;  // resolved: causal => window_right = 0
  float softcap = 0.0f;
  const float* alibi = nullptr;  // slopes [num_heads] (alibi_seq_stride 0) or [seqs, heads]
  int64_t alibi_seq_stride = 0;
};

struct Sequence {
  int64_t q_begin = 0;  // first row of q/out
  int64_t q_len = 0;
  int64_t k_begin = 0;  // packed: first key row; paged: cache position of key 0 (leftpad)
  int64_t k_len = 0;
  int64_t index = 0;    // row of block_table (paged form)
};

struct WorkItem {
  int64_t seq;
  int64_t kv_head;
  int64_t row_begin, row_end;  // query rows within the sequence
};

// Items of at least this many rows (query rows x heads of the group: a prefill tile, or a
// decode of a wide GQA group) run the row-block tile loops (scores and V sums of all rows at
// once over a transposed key tile); fewer rows take the per-row loops.
constexpr int64_t kRowBlockMin = 8;

struct Scratch {
  std::vector<float> q, acc, m, l, k_tile, v_tile, scores;
  std::vector<const float*> k_rows, v_rows;
  std::vector<float> kt, row_scores, corr;  // row-block form: K^T tile, scores, corrections
};

template <typename T, typename KV>
const KV* kv_row(const Problem<T, KV>& p, const KV* base, int64_t stride, const Sequence& s,
                 int64_t j, int64_t kv_head) {
  const int64_t row = p.num_kv_heads * p.head_dim;
  if (p.block_table == nullptr) {
    return base + (s.k_begin + j) * stride + kv_head * p.head_dim;
  }
  const int64_t pos = s.k_begin + j;
  const int32_t block = p.block_table[s.index * p.block_table_stride + pos / p.block_size];
  return base + block * stride + (pos % p.block_size) * row + kv_head * p.head_dim;
}

// Points rows[i] at float copies (or, for float inputs, the rows themselves) of keys j0..j1.
// An fp8 row is dequantised: e4m3(code) * scale (scale = 1 when none is given).
template <typename T, typename KV>
void load_tile(const Problem<T, KV>& p, const KV* base, int64_t stride, const float* scales,
               const Sequence& s, int64_t j0, int64_t j1, int64_t kv_head,
               std::vector<float>& buf, std::vector<const float*>& rows) {
  const int64_t d = p.head_dim;
  for (int64_t j = j0; j < j1; ++j) {
    const KV* src = kv_row(p, base, stride, s, j, kv_head);
    if constexpr (std::is_same_v<KV, float>) {
      rows[j - j0] = src;
    } else if constexpr (std::is_same_v<KV, f8e4m3_t>) {
      const float* table = e4m3_table();
      const float scale = scales != nullptr ? scales[kv_head] : 1.0f;
      float* dst = buf.data() + (j - j0) * d;
      for (int64_t x = 0; x < d; ++x) dst[x] = table[src[x].bits] * scale;
      rows[j - j0] = dst;
    } else {
      float* dst = buf.data() + (j - j0) * d;
      for (int64_t x = 0; x < d; ++x) dst[x] = to_float(src[x]);
      rows[j - j0] = dst;
    }
  }
}

// Asks for keys j0..j1 of the next tile ahead of use. Rows of one KV head sit
// num_kv_heads * head_dim elements apart (often exactly a 4 KiB page), a stride the hardware
// prefetchers do not follow across pages.
template <typename T, typename KV>
void prefetch_tile(const Problem<T, KV>& p, const KV* base, int64_t stride, const Sequence& s,
                   int64_t j0, int64_t j1, int64_t kv_head) {
  const int64_t bytes = p.head_dim * static_cast<int64_t>(sizeof(KV));
  for (int64_t j = j0; j < j1; ++j) {
    const char* row = reinterpret_cast<const char*>(kv_row(p, base, stride, s, j, kv_head));
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(row + off, 0, 2);
  }
}

// Keys visible to query row i: [begin, end) (empty when begin >= end). Bottom-right aligned:
// with offset = k_len - q_len, key j is visible iff i + offset - left <= j <= i + offset +
// right, each bound only when it is >= 0 (flash-attn's window_size).
using KeyRange = KeySpan;
template <typename P>
KeyRange key_range(const P& p, int64_t i, int64_t q_len, int64_t k_len) {
  const int64_t diag = i + k_len - q_len;
  const int64_t begin =
      p.window_left >= 0 ? std::clamp<int64_t>(diag - p.window_left, 0, k_len) : 0;
  const int64_t end =
      p.window_right >= 0 ? std::clamp<int64_t>(diag + p.window_right + 1, 0, k_len) : k_len;
  return {begin, end};
}

// Keys an item reads: the union of its rows' ranges (both bounds grow with the row).
template <typename P>
KeyRange item_range(const P& p, const Sequence& s, const WorkItem& w) {
  return {key_range(p, w.row_begin, s.q_len, s.k_len).begin,
          key_range(p, w.row_end - 1, s.q_len, s.k_len).end};
}

// softcap * tanh(s / softcap), in place (softcap > 0).
inline void apply_softcap(float* s, int64_t n, float softcap) {
  const float inv = 1.0f / softcap;
  for (int64_t j = 0; j < n; ++j) s[j] = softcap * std::tanh(s[j] * inv);
}

// ALiBi: s[j] -= slope * |diag - (j0 + j)| for the keys j0 .. j0+n-1 of a row whose diagonal
// (i + Lk - Lq) is diag.
inline void apply_alibi(float* s, int64_t n, float slope, int64_t diag, int64_t j0) {
  for (int64_t j = 0; j < n; ++j) {
    s[j] -= slope * static_cast<float>(std::abs(diag - (j0 + j)));
  }
}

// Rows of an item: (query row, head of the group) pairs.
inline int64_t item_rows(const WorkItem& w, int64_t group) {
  return (w.row_end - w.row_begin) * group;
}

}  // namespace kvattn::cpu::attn
