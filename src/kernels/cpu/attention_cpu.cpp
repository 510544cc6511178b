// CPU attention backend, shared by prefill (packed or paged keys) and decode (paged keys).
//
// Work is split into items (sequence, KV head, tile of query rows); an item with many keys
// in a problem of few items is cut into pieces of its key range (attention_work_plan.h: a
// single decoding sequence has one item per KV head), attended independently and merged by
// their maxima and sums. OpenMP threads take pieces dynamically. Each piece runs a blocked
// online softmax: key tiles of kKeyTile rows are visited once for all query heads of the GQA
// group and all rows of the tile, so every K/V byte of a (sequence, KV head) is read once per
// query tile, and no O(L^2) temporary is ever formed. Arithmetic is float32; bf16/f16 tiles
// are converted once per tile, and a float8_e4m3 cache is dequantised there too
// (table[code] * scale of the KV head), so the kernel computes on exactly the values
// e4m3(stored) * scale. Each query row sees one contiguous key range (causal, sliding window:
// key_range); an item visits only the union of its rows' ranges, so the keys before a sliding
// window are never read. Softcap and ALiBi change the score tile before the online softmax; a
// decode's cache_leftpad moves where a sequence's key 0 lives (Sequence::k_begin). The tile
// loops (scores, exp, weighted sum of V) run AVX2+FMA code when the CPU has it
// (attention_tile_math.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/attention_tile_math.h"
#include "kernels/cpu/attention_work_plan.h"

namespace kvattn::cpu {
namespace {

constexpr int64_t kKeyTile = 64;
constexpr int64_t kQueryTile = 16;  // query rows per work item (times the GQA group)

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

// One row's step of the online softmax over its visible keys jb .. jb + n - 1 of a tile,
// whose raw scores are in `scores`: softcap and ALiBi, then the running maximum; leaves
// exp(score - new max) in `scores`, the old sum's correction in sc.corr[r], and updates
// sc.m[r] and sc.l[r] (the caller rescales the row's output by sc.corr[r]).
template <typename T, typename KV>
void online_softmax_row(const Problem<T, KV>& p, const Sequence& s, const WorkItem& w,
                        int64_t r, int64_t jb, float* scores, int64_t n, Scratch& sc) {
  const int64_t g = p.group;
  const int64_t i = w.row_begin + r / g;
  if (p.softcap > 0.0f) apply_softcap(scores, n, p.softcap);
  if (p.alibi != nullptr) {
    const float slope = p.alibi[s.index * p.alibi_seq_stride + w.kv_head * g + r % g];
    apply_alibi(scores, n, slope, i + s.k_len - s.q_len, jb);
  }
  float tile_max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) tile_max = std::max(tile_max, scores[j]);
  const float m_new = std::max(sc.m[r], tile_max);
  sc.corr[r] = std::exp(sc.m[r] - m_new);  // exp(-inf) = 0 on the first tile
  const float sum = tile_math().softmax(scores, n, m_new);
  sc.l[r] = sc.l[r] * sc.corr[r] + sum;
  sc.m[r] = m_new;
}

// attend's row-block form: per key tile, K is transposed (columns past the tile zeroed up to
// a multiple of 16), every row's scores come from one scores_rows call, each row's visible
// keys go through the online softmax (its masked keys get probability 0, a row without a
// visible key correction 1), and one axpy_rows call adds P V to every row.
template <typename T, typename KV>
void attend_rows(const Problem<T, KV>& p, const Sequence& s, const WorkItem& w, KeyRange keys,
                 Scratch& sc) {
  const TileMath& math = tile_math();
  const int64_t d = p.head_dim, g = p.group;
  const int64_t rows = item_rows(w, g);
  sc.kt.resize(d * kKeyTile);
  sc.row_scores.resize(rows * kKeyTile);
  for (int64_t j0 = keys.begin; j0 < keys.end; j0 += kKeyTile) {
    const int64_t j1 = std::min(j0 + kKeyTile, keys.end);
    const int64_t n = j1 - j0, nk = (n + 15) / 16 * 16;
    const int64_t next_end = std::min(j1 + kKeyTile, keys.end);
    prefetch_tile(p, p.k, p.k_stride, s, j1, next_end, w.kv_head);
    prefetch_tile(p, p.v, p.v_stride, s, j1, next_end, w.kv_head);
    load_tile(p, p.k, p.k_stride, p.k_scale, s, j0, j1, w.kv_head, sc.k_tile, sc.k_rows);
    load_tile(p, p.v, p.v_stride, p.v_scale, s, j0, j1, w.kv_head, sc.v_tile, sc.v_rows);
    // Row by row, so each K row is read contiguously.
    for (int64_t j = 0; j < n; ++j) {
      const float* k = sc.k_rows[j];
      for (int64_t x = 0; x < d; ++x) sc.kt[x * kKeyTile + j] = k[x];
    }
    for (int64_t x = 0; x < d; ++x) {
      std::fill(sc.kt.begin() + x * kKeyTile + n, sc.kt.begin() + x * kKeyTile + nk, 0.0f);
    }
    math.scores_rows(sc.q.data(), rows, d, sc.kt.data(), kKeyTile, nk, sc.row_scores.data(),
                     kKeyTile);
    for (int64_t r = 0; r < rows; ++r) {
      float* row_p = sc.row_scores.data() + r * kKeyTile;
      const KeyRange row = key_range(p, w.row_begin + r / g, s.q_len, s.k_len);
      const int64_t jb = std::max(j0, row.begin);
      const int64_t jl = std::min(j1, row.end);
      if (jl <= jb) {
        std::fill(row_p, row_p + n, 0.0f);
        sc.corr[r] = 1.0f;
        continue;
      }
      online_softmax_row(p, s, w, r, jb, row_p + (jb - j0), jl - jb, sc);
      std::fill(row_p, row_p + (jb - j0), 0.0f);
      std::fill(row_p + (jl - j0), row_p + n, 0.0f);
    }
    math.axpy_rows(sc.acc.data(), rows, d, sc.corr.data(), sc.row_scores.data(), kKeyTile,
                   sc.v_rows.data(), n);
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
    const int64_t next_end = std::min(j1 + kKeyTile, k_end);
    prefetch_tile(p, p.k, p.k_stride, s, j1, next_end, w.kv_head);
    prefetch_tile(p, p.v, p.v_stride, s, j1, next_end, w.kv_head);
    load_tile(p, p.k, p.k_stride, p.k_scale, s, j0, j1, w.kv_head, sc.k_tile, sc.k_rows);
    load_tile(p, p.v, p.v_stride, p.v_scale, s, j0, j1, w.kv_head, sc.v_tile, sc.v_rows);
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
      online_softmax_row(p, s, w, r, jb, scores, n, sc);
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

// A piece's partial state in its slot: acc [rows * d], then m [rows], then l [rows].
inline int64_t partial_floats(int64_t rows, int64_t d) { return rows * (d + 2); }

void save_partial(const Scratch& sc, int64_t rows, int64_t d, float* slot) {
  std::copy(sc.acc.begin(), sc.acc.begin() + rows * d, slot);
  std::copy(sc.m.begin(), sc.m.begin() + rows, slot + rows * d);
  std::copy(sc.l.begin(), sc.l.begin() + rows, slot + rows * (d + 1));
}

// Merges `parts` consecutive partial states (in key order) into sc: each row's maximum M over
// the parts, then sum and output weighted by exp(m_part - M). A row no part saw keeps -inf and
// 0 (zeros out).
void merge_partials(const float* first, int64_t parts, int64_t rows, int64_t d, Scratch& sc) {
  const int64_t stride = partial_floats(rows, d);
  sc.acc.assign(rows * d, 0.0f);
  sc.m.assign(rows, -std::numeric_limits<float>::infinity());
  sc.l.assign(rows, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < parts; ++k) m = std::max(m, first[k * stride + rows * d + r]);
    if (m == -std::numeric_limits<float>::infinity()) continue;
    float* acc = sc.acc.data() + r * d;
    for (int64_t k = 0; k < parts; ++k) {
      const float* slot = first + k * stride;
      const float weight = std::exp(slot[rows * d + r] - m);  // 0 for a part without keys
      sc.l[r] += weight * slot[rows * (d + 1) + r];
      const float* part_acc = slot + r * d;
      for (int64_t x = 0; x < d; ++x) acc[x] += weight * part_acc[x];
    }
    sc.m[r] = m;
  }
}

template <typename T, typename KV>
void run(const Problem<T, KV>& p, const std::vector<Sequence>& seqs) {
  std::vector<WorkItem> items;
  for (int64_t b = 0; b < static_cast<int64_t>(seqs.size()); ++b) {
    for (int64_t h = 0; h < p.num_kv_heads; ++h) {
      for (int64_t i = 0; i < seqs[b].q_len; i += kQueryTile) {
        items.push_back({b, h, i, std::min(i + kQueryTile, seqs[b].q_len)});
      }
    }
  }
  std::vector<KeySpan> item_keys(items.size());
  std::vector<int64_t> item_partial(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    item_keys[i] = item_range(p, seqs[items[i].seq], items[i]);
    item_partial[i] = partial_floats(item_rows(items[i], p.group), p.head_dim);
  }
  WorkPlanLimits limits;
  limits.key_tile = kKeyTile;
  const WorkPlan plan = plan_work(item_keys, item_partial, limits);
  // Slot k of the partial states starts at slot_offset[k] (items differ in rows).
  std::vector<int64_t> slot_offset(plan.num_parts + 1, 0);
  for (const WorkPlan::CutItem& c : plan.cut_items) {
    for (int64_t k = 0; k < c.parts; ++k) {
      slot_offset[c.first_part + k + 1] = slot_offset[c.first_part + k] + item_partial[c.item];
    }
  }
  std::vector<float> partials(slot_offset.back());

  const auto pieces = static_cast<int64_t>(plan.pieces.size());
  const auto cut = static_cast<int64_t>(plan.cut_items.size());
#pragma omp parallel
  {
    Scratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t k = 0; k < pieces; ++k) {
      const WorkPiece& piece = plan.pieces[k];
      const WorkItem& w = items[piece.item];
      const Sequence& s = seqs[w.seq];
      attend(p, s, w, piece.keys, scratch);
      if (piece.part < 0) {
        write_rows(p, s, w, scratch);
      } else {
        save_partial(scratch, item_rows(w, p.group), p.head_dim,
                     partials.data() + slot_offset[piece.part]);
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < cut; ++c) {
      const WorkPlan::CutItem& ci = plan.cut_items[c];
      const WorkItem& w = items[ci.item];
      merge_partials(partials.data() + slot_offset[ci.first_part], ci.parts,
                     item_rows(w, p.group), p.head_dim, scratch);
      write_rows(p, seqs[w.seq], w, scratch);
    }
  }
}

template <typename T, typename KV>
Problem<T, KV> make_problem(const TensorView& q, const TensorView& out, const TensorView& lse,
                            const TensorView& k, const TensorView& v,
                            const TensorView& block_table, const TensorView& k_scale,
                            const TensorView& v_scale, const TensorView& alibi,
                            const AttentionShape& shape) {
  Problem<T, KV> p;
  p.q = q.ptr<const T>();
  p.q_stride = q.stride(0);
  p.out = out.ptr<T>();
  p.out_stride = out.stride(0);
  p.lse = lse.defined() ? lse.ptr<float>() : nullptr;
  p.total_q = shape.total_q;
  p.k = k.ptr<const KV>();
  p.v = v.ptr<const KV>();
  p.k_scale = k_scale.defined() ? k_scale.ptr<const float>() : nullptr;
  p.v_scale = v_scale.defined() ? v_scale.ptr<const float>() : nullptr;
  p.k_stride = k.stride(0);
  p.v_stride = v.stride(0);
  if (shape.paged) {
    p.block_table = block_table.ptr<const int32_t>();
    p.block_table_stride = block_table.stride(0);
    p.block_size = shape.block_size;
  }
  p.num_heads = shape.num_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.head_dim = shape.head_dim;
  p.group = shape.num_heads / shape.num_kv_heads;
  p.scale = shape.scale;
  p.window_left = shape.window_left;
  p.window_right = shape.window_right;
  p.softcap = shape.softcap;
  if (alibi.defined()) {
    p.alibi = alibi.ptr<const float>();
    p.alibi_seq_stride = alibi.ndim == 2 ? alibi.stride(0) : 0;
  }
  return p;
}

// Calls fn(T{}, KV{}) for the (q, keys) dtype pair; the entries admit exactly these pairs:
// KV == T, KV == float8_e4m3, and float32 queries over a bfloat16 cache.
template <typename Fn>
void dispatch_dtypes(DType q, DType kv, Fn fn) {
  auto with_kv = [&](auto t) {
    using T = decltype(t);
    if (kv == dtype_of<T>()) return fn(T{}, T{});
    if (kv == DType::kF8E4M3) return fn(T{}, f8e4m3_t{});
    if constexpr (std::is_same_v<T, float>) {
      if (kv == DType::kBF16) return fn(T{}, bf16_t{});
    }
    KVATTN_FAIL("attention (cpu): unsupported key dtype ", kv, " for q dtype ", q);
  };
  switch (q) {
    case DType::kF32: with_kv(float{}); break;
    case DType::kBF16: with_kv(bf16_t{}); break;
    case DType::kF16: with_kv(f16_t{}); break;
    default: KVATTN_FAIL("attention (cpu): unsupported dtype ", q);
  }
}

}  // namespace

void prefill_attention(const PrefillArgs& a, const AttentionShape& shape) {
  const int32_t* cu_q = a.cu_seqlens_q.ptr<const int32_t>();
  const int32_t* cu_k = a.cu_seqlens_k.ptr<const int32_t>();
  std::vector<Sequence> seqs(shape.num_seqs);
  for (int64_t b = 0; b < shape.num_seqs; ++b) {
    seqs[b] = {cu_q[b], cu_q[b + 1] - cu_q[b], shape.paged ? 0 : cu_k[b],
               cu_k[b + 1] - cu_k[b], b};
  }
  dispatch_dtypes(a.q.dtype, a.k.dtype, [&](auto t, auto kv) {
    using T = decltype(t);
    using KV = decltype(kv);
    run(make_problem<T, KV>(a.q, a.out, a.lse, a.k, a.v, a.block_table, a.k_scale, a.v_scale,
                            a.alibi_slopes, shape),
        seqs);
  });
}

void decode_attention(const DecodeArgs& a, const AttentionShape& shape) {
  const int32_t* lens = a.cache_seqlens.ptr<const int32_t>();
  const int32_t* leftpad =
      a.cache_leftpad.defined() ? a.cache_leftpad.ptr<const int32_t>() : nullptr;
  std::vector<Sequence> seqs(shape.num_seqs);
  for (int64_t b = 0; b < shape.num_seqs; ++b) {
    const int64_t pad = leftpad != nullptr ? leftpad[b] : 0;
    seqs[b] = {b * a.q_len, a.q_len, pad, lens[b] - pad, b};
  }
  dispatch_dtypes(a.q.dtype, a.k_cache.dtype, [&](auto t, auto kv) {
    using T = decltype(t);
    using KV = decltype(kv);
    run(make_problem<T, KV>(a.q, a.out, a.lse, a.k_cache, a.v_cache, a.block_table, a.k_scale,
                            a.v_scale, a.alibi_slopes, shape),
        seqs);
  });
}

}  // namespace kvattn::cpu
