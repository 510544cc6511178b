// BlockManager: hands out the fixed-size KV blocks of one pool to sequences, counts their
// holders, and keeps computed full blocks findable for reuse (prefix caching).
//
// Contract
// - Every block is either free (no holder) or held; a block's ref count is the number of
//   sequences whose block table contains it. A sequence holds ceil(num_tokens / block_size)
//   blocks after allocate, append and fork.
// - Prefix cache: a full block whose KV has been computed (mark_computed) is entered under
//   hash(parent hash, its token ids). allocate reuses the longest chain of entries whose hash,
//   token ids and parent block all match, so a hash collision never serves wrong KV. The hit
//   stops one token short of the sequence, so every scheduled sequence computes >= 1 token.
// - Freed blocks keep their entry until the block is reused. Blocks without an entry are reused
//   first; after that, eviction takes the least recently freed cached block (LRU). A freed
//   sequence releases its blocks last-to-first, so a prefix outlives the blocks built on it.
// - Blocks a sequence writes (positions >= num_computed_tokens) are never shared: hits and fork
//   share only full, computed blocks, and fork copies a partly computed last block at once.
// - Bad calls throw kvattn::Error naming the sequence and the expected and actual values, and
//   leave the manager and the sequence unchanged.
// Not thread-safe: one scheduler thread owns the manager.
#pragma once

#include <cstdint>
#include <vector>

#include "kvattn/cache/block_hash.h"
#include "kvattn/cache/detail/block_hash_table.h"
#include "kvattn/cache/detail/free_block_list.h"
#include "kvattn/cache/sequence.h"

namespace kvattn {

// One block copy the KV pool must perform before the next step (copy-on-write at fork).
struct BlockCopy {
  BlockId src;
  BlockId dst;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct BlockManagerStats {
  int64_t num_blocks = 0;
  int64_t num_free_blocks = 0;       // no holder (includes evictable cached blocks)
  int64_t num_used_blocks = 0;       // at least one holder
  int64_t num_cached_blocks = 0;     // in the prefix cache, held or free
  int64_t num_evictable_blocks = 0;  // in the prefix cache and free
  int64_t num_sequences = 0;         // sequences holding blocks
  // Prefix-cache effectiveness over every allocate: prompt tokens asked for, tokens served.
  int64_t query_tokens = 0;
  int64_t hit_tokens = 0;
  int64_t num_evictions = 0;         // cached blocks reused for new content
  int64_t num_hash_collisions = 0;   // hash matched an entry whose tokens or parent differ
  double hit_rate() const {
    return query_tokens == 0 ? 0.0 : static_cast<double>(hit_tokens) / query_tokens;
  }
};

class BlockManager {
 public:
  // num_blocks >= 1, block_size >= 1, num_blocks * block_size < 2^31 (slots are int32).
  // hash_fn: nullptr => xxhash_block_hash.
  BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching = true,
               BlockHashFn hash_fn = nullptr);
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int64_t num_free_blocks() const { return free_.size(); }

  // Tokens of seq the prefix cache would serve now (a multiple of block_size, < num_tokens).
  int64_t num_prefix_hit_tokens(const Sequence& seq) const;

  // allocate: seq must hold no blocks. Reuses the cached prefix, sets num_computed_tokens and
  // num_cached_tokens to the hit, and allocates blocks for the rest of seq's tokens.
  bool can_allocate(const Sequence& seq) const;
  void allocate(Sequence& seq);

  // append: seq (allocated here) gets blocks for the tokens added since (decode, speculative
  // tokens, a streamed prompt chunk). A no-op when its blocks already cover its tokens.
  bool can_append(const Sequence& seq) const;
  void append(Sequence& seq);

  // After a step computed the KV of seq's next num_tokens tokens (0 allowed): advances
  // num_computed_tokens and enters the blocks that became full and computed in the cache.
  // num_computed_tokens + num_tokens must not exceed seq's tokens or its blocks.
  void mark_computed(Sequence& seq, int64_t num_tokens);

  // Releases seq's blocks and resets its cache state (it may be allocated again later, e.g.
  // after preemption). Throws for a sequence this manager does not hold (e.g. freed twice).
  void free(Sequence& seq);

  // Parallel sampling: a child with parent's tokens and computed count. Full computed blocks are
  // shared; a partly computed block is copied (copy-on-write, resolved now: both will write
  // into it next step) and the copy is appended to `copies`; later blocks are fresh.
  bool can_fork(const Sequence& parent) const;
  Sequence fork(const Sequence& parent, SeqId child_id, std::vector<BlockCopy>& copies);

  // Forgets every cached prefix (e.g. after the model's weights changed, which makes all
  // cached KV stale). Held blocks stay with their sequences; their later blocks are no longer
  // entered either. Stats counters are kept.
  void reset_prefix_cache();

  BlockManagerStats stats() const;

  // Introspection (tests, debugging). block must be in [0, num_blocks).
  int32_t ref_count(BlockId block) const;
  bool is_cached(BlockId block) const;
  // Throws kvattn::Error describing the first broken internal invariant. O(num_blocks).
  void check_invariants() const;

 private:
  struct Block {
    int32_t ref = 0;
    uint32_t gen = 0;         // bumped whenever the block is given new content
    uint64_t hash = 0;        // valid while cached
    BlockId parent = -1;      // parent block when cached, and its generation then
    uint32_t parent_gen = 0;
    bool cached = false;      // entered in table_
  };

  void check_held(const Sequence& seq, const char* fn) const;
  int64_t blocks_for(int64_t num_tokens) const;
  // The cache state's hash of seq's block i (memoized on seq).
  uint64_t block_hash(const Sequence& seq, int64_t i) const;
  // Longest chain of verified cache hits for seq, at most (num_tokens - 1) / block_size,
  // memoized on seq until the cache changes (can_allocate then allocate walk once).
  const std::vector<BlockId>& match_prefix(const Sequence& seq) const;
  bool same_content(BlockId b, const int32_t* tokens, BlockId parent, uint32_t parent_gen) const;
  bool is_stale(BlockId b) const;
  const int32_t* block_tokens(BlockId b) const {
    return block_tokens_.data() + static_cast<int64_t>(b) * block_size_;
  }

  void acquire(BlockId b);       // one more holder of an existing (hit or shared) block
  BlockId take_fresh_block();    // a free block for new content (may evict)
  void release(BlockId b);       // one holder fewer
  void uncache(BlockId b);       // drops the cache entry of b
  void cache_changed();          // new cache_epoch_: invalidates every memoized match
  void offer_computed_blocks(Sequence& seq);

  int64_t block_size_;
  bool prefix_caching_;
  BlockHashFn hash_fn_;
  std::vector<Block> blocks_;
  std::vector<int32_t> block_tokens_;  // token ids of each cached block
  detail::FreeBlockList free_;
  detail::BlockHashTable table_;
  uint64_t cache_epoch_ = 0;  // unique across managers; changes whenever an entry comes or goes
  int64_t num_evictable_ = 0;
  int64_t num_sequences_ = 0;
  int64_t query_tokens_ = 0;
  int64_t hit_tokens_ = 0;
  int64_t num_evictions_ = 0;
  int64_t num_collisions_ = 0;
};

}  // namespace kvattn
