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
//
// Files: attention_problem.h (items, tiles, masks), attention_item.h (one piece's online
// softmax), attention_work_plan.h (the cut), attention_partials.h (merging a cut item).
#include <algorithm>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/attention_item.h"
#include "kernels/cpu/attention_partials.h"
#include "kernels/cpu/attention_problem.h"
#include "kernels/cpu/attention_work_plan.h"

namespace kvattn::cpu {
namespace {

using namespace attn;  // NOLINT: this file is the backend the attn:: helpers serve

template <typename T, typename KV>
void run(const Problem<T, KV>& p, const std::vector<Sequence>& seqs) {
  std::vector<WorkItem> items;
  for (int64_t b = 0; b < static_cast<int64_t>(seqs.size()); ++b) {
    for (int64_t h = 0; h < p.num_kv_heads; ++h) {
      const int64_t tile = query_tile(seqs[b].q_len);
      for (int64_t i = 0; i < seqs[b].q_len; i += tile) {
        items.push_back({b, h, i, std::min(i + tile, seqs[b].q_len)});
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
