// BatchMetadataBuilder: turns the sequences scheduled for one step into the BatchContext the
// Attention layer reads (nano-vllm's prepare_prefill / prepare_decode, plus chunked prefill).
//
// Each scheduled sequence computes its next num_new_tokens tokens: positions
// [c, c + n) with c = num_computed_tokens, reading keys [0, c + n).
// Phase:
// - decode when every sequence has n == 1: context_lens and block_tables describe the keys;
//   optionally padded to a fixed batch for CUDA-graph replay (pad rows: slot -1, position 0,
//   context length 0, block-table row all -1, one query token each);
// - otherwise prefill. When some sequence already has KV in the cache (c > 0: a prefix hit, a
//   later chunk of a chunked prefill, or a decode sequence mixed into the step) the keys are
//   read from the paged cache (block_tables set, reads_kv_from_cache); when none has, the step
//   attends over the packed new K/V and block_tables is left empty.
// The result lives in host buffers owned by the builder and is valid until the next build();
// the engine copies it to the device and must not write into it (block-table rows are kept
// across builds and only updated where they changed). All index tensors are int32.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvattn/cache/batch_context.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/cache/sequence.h"
#include "kvattn/core/tensor.h"

namespace kvattn {

struct ScheduledSequence {
  const Sequence* seq = nullptr;
  int64_t num_new_tokens = 0;  // >= 1; c + n <= num_tokens and within the sequence's blocks
};

struct BatchBuildOptions {
  // Decode steps only: pad the batch to this many rows (0 => no padding). Must be >= the
  // number of scheduled sequences. Prefill steps are never padded.
  int64_t pad_decode_batch_to = 0;
  // Fixed block-table width for CUDA graphs (0 => the widest row of this batch).
  int64_t block_table_width = 0;
  // Decode steps of >= 2 unpadded rows: when consecutive rows begin with the same N >= this
  // block ids (a prompt prefix the prefix cache shares), each row with keys after them, set
  // ctx.cascade_* (batch_context.h) for the run that saves the most block reads (rows - 1
  // times N). 0 => off.
  int64_t cascade_min_prefix_blocks = 0;
  // ... and only when that run saves at least this many block reads ((rows - 1) x N).
  int64_t cascade_min_saved_blocks = 0;
};

struct BatchMetadata {
  BatchContext ctx;      // phase, slot_mapping, cu_seqlens_q/k, max_seqlen_q/k, context_lens,
                         // block_tables (decode_plan is left for the engine to fill)
  TensorView token_ids;  // int32 [num_tokens]: the input ids of the new tokens
  TensorView positions;  // int32 [num_tokens]: their positions (for RoPE)
  int64_t num_seqs = 0;        // rows, including padding
  int64_t num_tokens = 0;      // query tokens, including padding
  int64_t num_scheduled_seqs = 0;
  int64_t num_scheduled_tokens = 0;
  bool reads_kv_from_cache = false;  // prefill with paged keys (== block_tables set)
};

class BatchMetadataBuilder {
 public:
  // The builder reads block_size, ref counts and ownership from `manager`, which must outlive it.
  explicit BatchMetadataBuilder(const BlockManager& manager);

  // Validates the whole batch first (each sequence held by this manager, token counts in range
  // and covered by its blocks, no sequence twice), then fills the buffers. The blocks a step
  // writes need no check: BlockManager never shares a block holding positions >= the computed
  // count, so distinct sequences never write the same slot.
  // Throws kvattn::Error on a bad batch; the previous result is then no longer valid.
  const BatchMetadata& build(std::span<const ScheduledSequence> batch,
                             const BatchBuildOptions& options = {});

  const BatchMetadata& last() const { return meta_; }

 private:
  void validate(std::span<const ScheduledSequence> batch, const BatchBuildOptions& options);
  void write_table_row(int64_t row, uint64_t table_id, const int32_t* table, int64_t nb);
  // Sets meta_.ctx.cascade_* for the best run of rows sharing >= min_blocks leading blocks,
  // when it saves >= min_saved_blocks block reads.
  void set_cascade(std::span<const ScheduledSequence> batch, int64_t min_blocks,
                   int64_t min_saved_blocks);

  const BlockManager& manager_;
  BatchMetadata meta_;
  std::vector<int32_t> slot_mapping_;
  std::vector<int32_t> token_ids_;
  std::vector<int32_t> positions_;
  std::vector<int32_t> cu_seqlens_q_;
  std::vector<int32_t> cu_seqlens_k_;
  std::vector<int32_t> context_lens_;
  std::vector<int32_t> block_tables_;
  std::vector<int32_t> cascade_table_;     // the shared prefix's block ids
  std::vector<int32_t> cascade_cu_;        // {0, tokens, 0, prefix keys}
  std::vector<int32_t> cascade_leftpad_;   // prefix keys, per row
  // What each block-table row holds (its sequence's table_id and copied block count), so a
  // row whose sequence only grew since the last build is updated, not rewritten. Valid while
  // table_width_ is unchanged.
  struct RowCache {
    uint64_t table_id = 0;  // 0: unknown; kPadRow: all -1
    int64_t num_blocks = 0;
  };
  static constexpr uint64_t kPadRow = ~uint64_t{0};
  std::vector<RowCache> row_cache_;
  int64_t table_width_ = -1;
  // Filled by validate().
  bool decode_ = false;
  bool any_cached_ = false;
  int64_t total_new_ = 0;
  int64_t width_ = 0;
};

}  // namespace kvattn
