#include "kvattn/cache/batch_builder.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

constexpr const char* kFn = "BatchMetadataBuilder::build: ";
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Unique across builders and threads, so a sequence's stamp names exactly one build.
std::atomic<uint64_t> g_next_build_stamp{1};

TensorView host_i32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return TensorView(v.data(), DType::kI32, Device::cpu(), shape);
}

}  // namespace

BatchMetadataBuilder::BatchMetadataBuilder(const BlockManager& manager)
    : manager_(manager) {}

void BatchMetadataBuilder::validate(std::span<const ScheduledSequence> batch,
                                    const BatchBuildOptions& options) {
  KVATTN_CHECK(!batch.empty(), kFn, "batch must hold at least one sequence but is empty");
  KVATTN_CHECK(options.pad_decode_batch_to >= 0, kFn,
               "options.pad_decode_batch_to must be >= 0 but is ", options.pad_decode_batch_to);
  KVATTN_CHECK(options.block_table_width >= 0, kFn,
               "options.block_table_width must be >= 0 but is ", options.block_table_width);
  const int64_t bs = manager_.block_size();
  const uint64_t stamp = g_next_build_stamp.fetch_add(1, std::memory_order_relaxed);
  decode_ = true;
  any_cached_ = false;
  total_new_ = 0;
  int64_t total_k = 0;
  int64_t widest = 0;
  for (size_t row = 0; row < batch.size(); ++row) {
    const Sequence* seq = batch[row].seq;
    const int64_t n = batch[row].num_new_tokens;
    KVATTN_CHECK(seq != nullptr, kFn, "batch[", row, "].seq must not be null");
    KVATTN_CHECK(seq->owner() == &manager_, kFn, "batch[", row, "]: sequence ", seq->id(),
                 " must hold blocks of this builder's manager but ",
                 seq->owner() ? "belongs to another manager" : "holds none");
    const int64_t c = seq->num_computed_tokens();
    KVATTN_CHECK(n >= 1 && c + n <= seq->num_tokens(), kFn, "batch[", row, "]: num_new_tokens of ",
                 "sequence ", seq->id(), " must be in [1, ", seq->num_tokens() - c, "] (",
                 seq->num_tokens(), " tokens, ", c, " computed) but is ", n);
    KVATTN_CHECK(c + n <= seq->num_blocks() * bs, kFn, "batch[", row, "]: sequence ", seq->id(),
                 " needs blocks for ", c + n, " tokens but holds ", seq->num_blocks(),
                 " blocks of ", bs, " (call BlockManager::append first)");
    if (seq->build_stamp_ == stamp) {
      KVATTN_FAIL(kFn, "batch[", row, "]: sequence ", seq->id(), " is also batch[",
                  seq->build_row_, "]; a sequence may appear once per step");
    }
    seq->build_stamp_ = stamp;
    seq->build_row_ = static_cast<int64_t>(row);
    decode_ = decode_ && n == 1;
    any_cached_ = any_cached_ || c > 0;
    total_new_ += n;
    total_k += c + n;
    widest = std::max(widest, (c + n + bs - 1) / bs);
  }
  KVATTN_CHECK(total_k <= kInt32Max, kFn, "the batch reads ", total_k,
               " keys in total but int32 cu_seqlens hold at most ", kInt32Max);
  width_ = options.block_table_width > 0 ? options.block_table_width : widest;
  KVATTN_CHECK(width_ >= widest, kFn, "options.block_table_width is ", width_,
               " but a sequence of the batch needs ", widest, " blocks");
  const int64_t rows = static_cast<int64_t>(batch.size());
  KVATTN_CHECK(!decode_ || options.pad_decode_batch_to == 0 || options.pad_decode_batch_to >= rows,
               kFn, "options.pad_decode_batch_to is ", options.pad_decode_batch_to,
               " but the decode batch has ", rows, " sequences");
}

// Row `row` := table[0, nb) then -1. A row that held a prefix of the same table (same
// table_id, same width) only gets the difference: a decode step touches O(1) entries per row
// instead of the whole width.
void BatchMetadataBuilder::write_table_row(int64_t row, uint64_t table_id, const int32_t* table,
                                           int64_t nb) {
  RowCache& rc = row_cache_[static_cast<size_t>(row)];
  int32_t* dst = block_tables_.data() + row * width_;
  if (rc.table_id == table_id) {
    if (nb > rc.num_blocks) {
      std::memcpy(dst + rc.num_blocks, table + rc.num_blocks, sizeof(int32_t) * (nb - rc.num_blocks));
    } else {
      std::fill(dst + nb, dst + rc.num_blocks, -1);
    }
  } else {
    if (nb > 0) std::memcpy(dst, table, sizeof(int32_t) * nb);
    std::fill(dst + nb, dst + width_, -1);
  }
  rc = RowCache{table_id, nb};
}

const BatchMetadata& BatchMetadataBuilder::build(std::span<const ScheduledSequence> batch,
                                                 const BatchBuildOptions& options) {
  validate(batch, options);
  const int64_t bs = manager_.block_size();
  const int64_t scheduled = static_cast<int64_t>(batch.size());
  const int64_t rows =
      decode_ && options.pad_decode_batch_to > 0 ? options.pad_decode_batch_to : scheduled;
  const int64_t tokens = total_new_ + (rows - scheduled);  // a pad row is one decode token
  const bool paged = decode_ || any_cached_;

  slot_mapping_.resize(static_cast<size_t>(tokens));
  token_ids_.resize(static_cast<size_t>(tokens));
  positions_.resize(static_cast<size_t>(tokens));
  cu_seqlens_q_.resize(static_cast<size_t>(rows + 1));
  cu_seqlens_k_.resize(static_cast<size_t>(rows + 1));
  context_lens_.resize(static_cast<size_t>(rows));
  if (paged) {
    if (width_ != table_width_) {  // a new layout: every row is rewritten
      row_cache_.assign(row_cache_.size(), RowCache{});
      table_width_ = width_;
    }
    if (static_cast<int64_t>(row_cache_.size()) < rows) row_cache_.resize(static_cast<size_t>(rows));
    if (static_cast<int64_t>(block_tables_.size()) < rows * width_) {
      block_tables_.resize(static_cast<size_t>(rows * width_));  // keeps the rows already there
    }
  }

  int32_t* slot = slot_mapping_.data();
  int32_t* ids = token_ids_.data();
  int32_t* pos = positions_.data();
  int32_t cu_q = 0;
  int32_t cu_k = 0;
  int64_t max_q = 0;
  int64_t max_k = 0;
  cu_seqlens_q_[0] = 0;
  cu_seqlens_k_[0] = 0;
  for (int64_t row = 0; row < scheduled; ++row) {
    const Sequence& seq = *batch[static_cast<size_t>(row)].seq;
    const int64_t n = batch[static_cast<size_t>(row)].num_new_tokens;
    const int64_t c = seq.num_computed_tokens();
    const int64_t lk = c + n;
    const int32_t* table = seq.block_table().data();
    const int32_t* tok = seq.token_ids().data();
    // One division per row (slots < 2^31, so 32-bit): a 64-bit idiv per token dominated
    // decode steps.
    int32_t blk = static_cast<int32_t>(static_cast<uint32_t>(c) / static_cast<uint32_t>(bs));
    int32_t off = static_cast<int32_t>(c) - blk * static_cast<int32_t>(bs);
    for (int64_t p = c; p < lk; ++p) {
      *slot++ = table[blk] * static_cast<int32_t>(bs) + off;
      *ids++ = tok[p];
      *pos++ = static_cast<int32_t>(p);
      if (++off == bs) off = 0, ++blk;
    }
    const int64_t nb = blk + (off > 0);  // blocks covering [0, lk)
    cu_q += static_cast<int32_t>(n);
    cu_k += static_cast<int32_t>(lk);
    cu_seqlens_q_[row + 1] = cu_q;
    cu_seqlens_k_[row + 1] = cu_k;
    context_lens_[row] = static_cast<int32_t>(lk);
    max_q = std::max(max_q, n);
    max_k = std::max(max_k, lk);
    if (paged) write_table_row(row, seq.table_id_, table, nb);
  }
  for (int64_t row = scheduled; row < rows; ++row) {  // CUDA-graph padding (decode only)
    *slot++ = -1;
    *ids++ = 0;
    *pos++ = 0;
    cu_seqlens_q_[row + 1] = ++cu_q;
    cu_seqlens_k_[row + 1] = cu_k;
    context_lens_[row] = 0;
    write_table_row(row, kPadRow, nullptr, 0);
  }

  BatchContext& ctx = meta_.ctx;
  ctx = BatchContext{};
  ctx.phase = decode_ ? Phase::kDecode : Phase::kPrefill;
  ctx.slot_mapping = host_i32(slot_mapping_, {tokens});
  ctx.cu_seqlens_q = host_i32(cu_seqlens_q_, {rows + 1});
  ctx.cu_seqlens_k = host_i32(cu_seqlens_k_, {rows + 1});
  ctx.max_seqlen_q = max_q;
  ctx.max_seqlen_k = max_k;
  ctx.context_lens = host_i32(context_lens_, {rows});
  if (paged) ctx.block_tables = host_i32(block_tables_, {rows, width_});
  meta_.token_ids = host_i32(token_ids_, {tokens});
  meta_.positions = host_i32(positions_, {tokens});
  meta_.num_seqs = rows;
  meta_.num_tokens = tokens;
  meta_.num_scheduled_seqs = scheduled;
  meta_.num_scheduled_tokens = total_new_;
  meta_.reads_kv_from_cache = !decode_ && any_cached_;
  if (decode_ && options.cascade_min_prefix_blocks > 0 && scheduled >= 2 && rows == scheduled) {
    set_cascade(batch, options.cascade_min_prefix_blocks, options.cascade_min_saved_blocks);
  }
  return meta_;
}

void BatchMetadataBuilder::set_cascade(std::span<const ScheduledSequence> batch,
                                       int64_t min_blocks, int64_t min_saved_blocks) {
  const int64_t bs = manager_.block_size();
  const auto n = static_cast<int64_t>(batch.size());
  // Whole blocks strictly before a row's last key: the row keeps >= 1 key of its own.
  auto usable = [&](int64_t r) {
    const ScheduledSequence& s = batch[static_cast<size_t>(r)];
    return (s.seq->num_computed_tokens() + s.num_new_tokens - 1) / bs;
  };
  auto table = [&](int64_t r) { return batch[static_cast<size_t>(r)].seq->block_table().data(); };
  int64_t best_lo = 0, best_rows = 0, best_blocks = 0, best_saved = 0;
  for (int64_t lo = 0; lo < n;) {
    int64_t common = usable(lo);
    int64_t hi = lo + 1;
    for (; hi < n; ++hi) {
      const int64_t c = std::min(common, usable(hi));
      const int32_t* a = table(lo);
      const int32_t* b = table(hi);
      int64_t j = 0;
      while (j < c && a[j] == b[j]) ++j;
      if (j < min_blocks) break;
      common = j;
    }
    const int64_t rows = hi - lo;
    if (rows >= 2 && (rows - 1) * common > best_saved) {
      best_lo = lo, best_rows = rows, best_blocks = common, best_saved = (rows - 1) * common;
    }
    lo = hi;
  }
  if (best_rows < 2 || best_saved < min_saved_blocks) return;
  const auto prefix = static_cast<int32_t>(best_blocks * bs);
  const int32_t* first = table(best_lo);
  cascade_table_.assign(first, first + best_blocks);
  cascade_cu_ = {0, static_cast<int32_t>(best_rows), 0, prefix};
  cascade_leftpad_.assign(static_cast<size_t>(n), 0);
  std::fill_n(cascade_leftpad_.begin() + best_lo, best_rows, prefix);
  BatchContext& ctx = meta_.ctx;
  ctx.cascade_prefix_len = prefix;
  ctx.cascade_first_row = best_lo;
  ctx.cascade_num_rows = best_rows;
  ctx.cascade_block_table = host_i32(cascade_table_, {1, best_blocks});
  ctx.cascade_cu_seqlens = host_i32(cascade_cu_, {4});
  ctx.cascade_leftpad = host_i32(cascade_leftpad_, {n});
}

}  // namespace kvattn
