// Internal: one work piece of the CPU attention backend (see attention_cpu.cpp): the blocked
// online softmax of an item's rows over a range of its keys, per row or in row blocks, and
// writing the rows' outputs and LSE.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/attention_problem.h"
#include "kernels/cpu/attention_tile_math.h"

namespace kvattn::cpu::attn {

// One row's step of the online softmax over its visible keys jb .. jb + n - 1 of a tile,
// whose raw scores are in `scores`: softcap and ALiBi, then the running maximum; leaves
// exp(score - new max) in `scores`, the old sum's correction in sc.corr[r], and updates
// sc.m[r] and sc.l[r] (the caller rescales the row's output by sc.corr[r]).
template <typename T, typename KV>
void online_softmax_row(const TileMath& math, const Problem<T, KV>& p, const Sequence& s,
                        const WorkItem& w, int64_t r, int64_t jb, float* scores, int64_t n,
                        Scratch& sc) {
  const int64_t g = p.group;
  const int64_t i = w.row_begin + r / g;
  if (p.softcap > 0.0f) apply_softcap(scores, n, p.softcap);
  if (p.alibi != nullptr) {
    const float slope = p.alibi[s.index * p.alibi_seq_stride + w.kv_head * g + r % g];
    apply_alibi(scores, n, slope, i + s.k_len - s.q_len, jb);
  }
  const float m_new = math.max(scores, n, sc.m[r]);
  sc.corr[r] = std::exp(sc.m[r] - m_new);  // exp(-inf) = 0 on the first tile
  const float sum = math.softmax(scores, n, m_new);
  sc.l[r] = sc.l[r] * sc.corr[r] + sum;
  sc.m[r] = m_new;
}

// Points sc.k_rows / sc.v_rows at keys j0 .. j1 - 1 as float rows, and asks for the next
// tile (up to `end`) ahead of use.
template <typename T, typename KV>
void load_kv_tile(const Problem<T, KV>& p, const Sequence& s, const WorkItem& w, int64_t j0,
                  int64_t j1, int64_t end, Scratch& sc) {
  const int64_t next_end = std::min(j1 + kKeyTile, end);
  prefetch_tile(p, p.k, p.k_stride, s, j1, next_end, w.kv_head);
  prefetch_tile(p, p.v, p.v_stride, s, j1, next_end, w.kv_head);
  load_tile(p, p.k, p.k_stride, p.k_scale, s, j0, j1, w.kv_head, sc.k_tile, sc.k_rows);
  load_tile(p, p.v, p.v_stride, p.v_scale, s, j0, j1, w.kv_head, sc.v_tile, sc.v_rows);
}

// attend's row-block form: per key tile, K is transposed (columns past the tile zeroed up to
// a multiple of 16); then each block of kQueryTile query rows (times the group) whose keys
// reach the tile gets its scores from one scores_rows call, each of its rows' visible keys go
// through the online softmax (its masked keys get probability 0, a row without a visible key
// correction 1), and one axpy_rows call adds P V to its rows. A block whose rows see none of
// the tile's keys skips it (as a correction of 1 and zero probabilities would).
template <typename T, typename KV>
void attend_rows(const Problem<T, KV>& p, const Sequence& s, const WorkItem& w, KeyRange keys,
                 Scratch& sc) {
  const TileMath& math = tile_math();
  const int64_t d = p.head_dim, g = p.group;
  const int64_t rows = item_rows(w, g);
  const int64_t block_rows = kQueryTile * g;
  sc.kt.resize(d * kKeyTile);
  sc.row_scores.resize(rows * kKeyTile);
  for (int64_t j0 = keys.begin; j0 < keys.end; j0 += kKeyTile) {
    const int64_t j1 = std::min(j0 + kKeyTile, keys.end);
    const int64_t n = j1 - j0, nk = (n + 15) / 16 * 16;
    load_kv_tile(p, s, w, j0, j1, keys.end, sc);
    math.transpose(sc.k_rows.data(), n, d, sc.kt.data(), kKeyTile, nk);
    for (int64_t b0 = 0; b0 < rows; b0 += block_rows) {
      const int64_t b1 = std::min(rows, b0 + block_rows);
      // Key ranges grow with the query row: the block's union runs from its first row's
      // start to its last row's end.
      const int64_t first = w.row_begin + b0 / g, last = w.row_begin + (b1 - 1) / g;
      if (key_range(p, last, s.q_len, s.k_len).end <= j0 ||
          key_range(p, first, s.q_len, s.k_len).begin >= j1) {
        continue;
      }
      float* block_scores = sc.row_scores.data() + b0 * kKeyTile;
      math.scores_rows(sc.q.data() + b0 * d, b1 - b0, d, sc.kt.data(), kKeyTile, nk,
                       block_scores, kKeyTile);
      for (int64_t r = b0; r < b1; ++r) {
        float* row_p = sc.row_scores.data() + r * kKeyTile;
        const KeyRange row = key_range(p, w.row_begin + r / g, s.q_len, s.k_len);
        const int64_t jb = std::max(j0, row.begin);
        const int64_t jl = std::min(j1, row.end);
        if (jl <= jb) {
          std::fill(row_p, row_p + n, 0.0f);
          sc.corr[r] = 1.0f;
          continue;
        }
        online_softmax_row(math, p, s, w, r, jb, row_p + (jb - j0), jl - jb, sc);
        std::fill(row_p, row_p + (jb - j0), 0.0f);
        std::fill(row_p + (jl - j0), row_p + n, 0.0f);
      }
      math.axpy_rows(sc.acc.data() + b0 * d, b1 - b0, d, sc.corr.data() + b0, block_scores,
                     kKeyTile, sc.v_rows.data(), n);
    }
  }
}

// Runs the online softmax of item w's rows over its keys in `keys` (a tile-aligned part of
// item_range, or all of it), leaving each row's unnormalised output in sc.acc, its running
// maximum in sc.m and its sum in sc.l (-inf and 0 for a row that saw none of these keys).
template <typename T, typename KV>
void attend(const Problem<T, KV>& p, const Sequence& s, const WorkItem& w, KeyRange keys,
            Scratch& sc) {
  const TileMath& math = tile_math();
  const int64_t d = p.head_dim, g = p.group;
  const int64_t rows = item_rows(w, g);
  sc.q.resize(rows * d);
  sc.acc.assign(rows * d, 0.0f);
  sc.m.assign(rows, -std::numeric_limits<float>::infinity());
  sc.l.assign(rows, 0.0f);
  sc.k_tile.resize(kKeyTile * d);
  sc.v_tile.resize(kKeyTile * d);
  sc.scores.resize(kKeyTile);
  sc.k_rows.resize(kKeyTile);
  sc.v_rows.resize(kKeyTile);
  sc.corr.resize(rows);

  for (int64_t i = w.row_begin; i < w.row_end; ++i) {
    for (int64_t hg = 0; hg < g; ++hg) {
      const int64_t h = w.kv_head * g + hg;
      const T* src = p.q + (s.q_begin + i) * p.q_stride + h * d;
      float* dst = sc.q.data() + ((i - w.row_begin) * g + hg) * d;
      for (int64_t x = 0; x < d; ++x) dst[x] = to_float(src[x]) * p.scale;
    }
  }

  if (rows >= kRowBlockMin) {
    attend_rows(p, s, w, keys, sc);
    return;
  }
  const int64_t k_end = keys.end;
  for (int64_t j0 = keys.begin; j0 < k_end; j0 += kKeyTile) {
    const int64_t j1 = std::min(j0 + kKeyTile, k_end);
    load_kv_tile(p, s, w, j0, j1, k_end, sc);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = w.row_begin + r / g;
      const KeyRange row = key_range(p, i, s.q_len, s.k_len);
      const int64_t jb = std::max(j0, row.begin);
      const int64_t jl = std::min(j1, row.end);
      if (jl <= jb) continue;
      const float* qr = sc.q.data() + r * d;
      const int64_t n = jl - jb;
      float* scores = sc.scores.data();
      math.scores(qr, sc.k_rows.data() + (jb - j0), n, d, scores);
      online_softmax_row(math, p, s, w, r, jb, scores, n, sc);
      math.axpy(sc.acc.data() + r * d, sc.corr[r], scores, sc.v_rows.data() + (jb - j0), n, d);
    }
  }
}

// Writes item w's output rows (and LSE) from the online-softmax state in sc.
template <typename T, typename KV>
void write_rows(const Problem<T, KV>& p, const Sequence& s, const WorkItem& w,
                const Scratch& sc) {
  const int64_t d = p.head_dim, g = p.group;
  for (int64_t r = 0; r < item_rows(w, g); ++r) {
    const int64_t i = w.row_begin + r / g;
    const int64_t h = w.kv_head * g + r % g;
    const float l = sc.l[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key outputs zeros
    T* dst = p.out + (s.q_begin + i) * p.out_stride + h * d;
    const float* acc = sc.acc.data() + r * d;
    for (int64_t x = 0; x < d; ++x) dst[x] = from_float<T>(acc[x] * inv);
    if (p.lse != nullptr) {
      p.lse[h * p.total_q + s.q_begin + i] =
          l > 0.0f ? sc.m[r] + std::log(l) : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace kvattn::cpu::attn
