// Sequence: one request as the cache sees it: its token ids, how many of them already have KV
// in the cache, the blocks holding that KV, and a scheduling status.
//
// Lifecycle (nano-vllm's shape):
//   Sequence seq(id, prompt);            // waiting, holds no blocks
//   manager.allocate(seq);               // prefix-cache hit + blocks for every token
//   ... a step computes tokens [num_computed_tokens, num_computed_tokens + n) ...
//   manager.mark_computed(seq, n);       // KV exists now: full blocks join the prefix cache
//   seq.append_token(next);              // the sampler's output (no blocks yet)
//   manager.append(seq);                 // blocks for the new token(s)
//   manager.free(seq);                   // finished or preempted
//
// Only BlockManager changes the cache state (block table, computed count); the token list grows
// through append_token(s). Sequences are move-only: a copy would be a second holder of the same
// blocks that the ref counts do not know about (use BlockManager::fork). Free a sequence before
// destroying it; destroying one that holds blocks leaks them (BlockManager::stats shows it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvattn/cache/block_hash.h"

namespace kvattn {

using SeqId = int64_t;
using BlockId = int32_t;

class BlockManager;
class BatchMetadataBuilder;

enum class SequenceStatus : uint8_t { kWaiting, kRunning, kFinished };

class Sequence {
 public:
  // prompt_token_ids: non-empty, every id >= 0.
  Sequence(SeqId id, std::vector<int32_t> prompt_token_ids);
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;
  // The moved-from sequence holds nothing (no tokens, no blocks).
  Sequence(Sequence&& other) noexcept;
  Sequence& operator=(Sequence&& other) noexcept;
  ~Sequence() = default;

  SeqId id() const { return id_; }
  SequenceStatus status() const { return status_; }
  void set_status(SequenceStatus s) { status_ = s; }

  std::span<const int32_t> token_ids() const { return tokens_; }
  std::span<const int32_t> prompt_token_ids() const;
  std::span<const int32_t> completion_token_ids() const;
  int32_t last_token() const;
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t num_prompt_tokens() const { return num_prompt_tokens_; }
  int64_t num_completion_tokens() const { return num_tokens() - num_prompt_tokens_; }

  // Tokens whose KV is in the cache: a prefix of token_ids().
  int64_t num_computed_tokens() const { return num_computed_tokens_; }
  int64_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens_; }
  // Tokens served by the prefix cache at the last allocate (a multiple of the block size).
  int64_t num_cached_tokens() const { return num_cached_tokens_; }
  // false: BlockManager::allocate serves none of this sequence's tokens from the prefix cache
  // (every token is computed, e.g. for its prompt's log-probabilities); its computed blocks
  // still join the cache for others. Default true.
  bool reads_prefix_cache() const { return reads_prefix_cache_; }
  void set_reads_prefix_cache(bool on) { reads_prefix_cache_ = on; }

  // Block i holds the KV of tokens [i * block_size, (i + 1) * block_size).
  std::span<const BlockId> block_table() const { return block_table_; }
  int64_t num_blocks() const { return static_cast<int64_t>(block_table_.size()); }
  // True between allocate (or fork) and free.
  bool is_allocated() const { return owner_ != nullptr; }
  const BlockManager* owner() const { return owner_; }

  // Grows the token list (sampled, speculative or streamed prompt tokens); ids must be >= 0.
  // Blocks for them come from BlockManager::append.
  void append_token(int32_t token);
  void append_tokens(std::span<const int32_t> tokens);

 private:
  friend class BlockManager;
  friend class BatchMetadataBuilder;
class BatchMetadataBuilder;

  SeqId id_;
  SequenceStatus status_ = SequenceStatus::kWaiting;
  std::vector<int32_t> tokens_;
  int64_t num_prompt_tokens_ = 0;
  int64_t num_computed_tokens_ = 0;
  int64_t num_cached_tokens_ = 0;
  std::vector<BlockId> block_table_;
  const BlockManager* owner_ = nullptr;
  // Names one allocation lifetime of block_table_ (unique process-wide, 0 while unallocated).
  // Within a lifetime the table only grows, so a consumer that copied a prefix of it under
  // this id may keep that prefix (the batch builder does, row by row).
  uint64_t table_id_ = 0;
  // The last BatchMetadataBuilder::build that scheduled this sequence, and its row there: how
  // a sequence scheduled twice in one step is caught in O(1).
  mutable uint64_t build_stamp_ = 0;
  mutable int64_t build_row_ = -1;

  // Prefix-cache registration, written by BlockManager. Leading full computed blocks already
  // offered to the cache; the block (and its generation) that the next block's entry names as
  // its parent; set when an offer hit a colliding entry (the rest of the chain stays private).
  int64_t num_offered_blocks_ = 0;
  BlockId offer_parent_ = -1;
  uint32_t offer_parent_gen_ = 0;
  bool offers_stopped_ = false;

  // Memo of the chain hashes of full blocks: a pure function of the tokens, the block size and
  // the hash function, so it is kept across free/allocate and recomputed when those change.
  mutable std::vector<uint64_t> block_hashes_;
  mutable BlockHashFn hashes_fn_ = nullptr;
  mutable int64_t hashes_block_size_ = 0;

  // Memo of BlockManager's prefix match: valid while the manager's cache epoch and the token
  // count are the ones recorded (epochs are unique across managers).
  mutable std::vector<BlockId> match_hits_;
  mutable uint64_t match_epoch_ = 0;
  mutable int64_t match_num_tokens_ = 0;
  mutable bool match_collided_ = false;
  bool reads_prefix_cache_ = true;
};

}  // namespace kvattn
