// BlockManager: block ownership (allocate, append, free, fork) and the free list.
// The prefix-cache half (lookup, registration) lives in prefix_cache.cpp.
#include "kvattn/cache/block_manager.h"

#include <atomic>
#include <limits>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

std::atomic<uint64_t> g_next_table_id{1};

uint64_t new_table_id() { return g_next_table_id.fetch_add(1, std::memory_order_relaxed); }

// All argument checks, run by the first member initializer so nothing is allocated for a
// pool that is then rejected.
int32_t checked_num_blocks(int64_t num_blocks, int64_t block_size) {
  KVATTN_CHECK(num_blocks >= 1 && num_blocks <= std::numeric_limits<int32_t>::max(),
               "BlockManager: num_blocks must be in [1, 2^31) but is ", num_blocks);
  KVATTN_CHECK(block_size >= 1, "BlockManager: block_size must be >= 1 but is ", block_size);
  KVATTN_CHECK(num_blocks <= std::numeric_limits<int32_t>::max() / block_size,
               "BlockManager: num_blocks * block_size must be < 2^31 (int32 slots) but is ",
               num_blocks, " * ", block_size);
  return static_cast<int32_t>(num_blocks);
}

}  // namespace

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
                           BlockHashFn hash_fn)
    : block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      hash_fn_(hash_fn ? hash_fn : &xxhash_block_hash),
      free_(checked_num_blocks(num_blocks, block_size)),
      table_(enable_prefix_caching ? num_blocks : 0) {
  cache_changed();
  blocks_.resize(static_cast<size_t>(num_blocks));
  if (prefix_caching_) block_tokens_.resize(static_cast<size_t>(num_blocks * block_size));
}

int64_t BlockManager::blocks_for(int64_t num_tokens) const {
  return (num_tokens + block_size_ - 1) / block_size_;
}

void BlockManager::check_held(const Sequence& seq, const char* fn) const {
  KVATTN_CHECK(seq.owner_ == this, "BlockManager::", fn, ": sequence ", seq.id(),
               " must hold blocks of this manager but ",
               seq.owner_ ? "belongs to another manager" : "holds none (never allocated, or freed)");
}

// ---- block transitions ----

void BlockManager::acquire(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.ref == 0) {
    free_.remove(b);
    if (blk.cached) --num_evictable_;
  }
  ++blk.ref;
}

BlockId BlockManager::take_fresh_block() {
  const BlockId b = free_.pop_front();
  Block& blk = blocks_[b];
  if (blk.cached) {
    --num_evictable_;
    ++num_evictions_;
    uncache(b);
  }
  ++blk.gen;
  blk.ref = 1;
  return b;
}

void BlockManager::release(BlockId b) {
  Block& blk = blocks_[b];
  if (--blk.ref > 0) return;
  if (blk.cached) {
    free_.push_back(b);
    ++num_evictable_;
  } else {
    free_.push_front(b);
  }
}

void BlockManager::uncache(BlockId b) {
  Block& blk = blocks_[b];
  table_.erase(blk.hash);
  blk.cached = false;
  blk.parent = -1;
  cache_changed();
}

// ---- sequence operations ----

bool BlockManager::can_allocate(const Sequence& seq) const {
  if (seq.owner_ != nullptr || seq.num_tokens() == 0) return false;
  const std::vector<BlockId>& hit_blocks = match_prefix(seq);
  int64_t free_hits = 0;
  for (BlockId b : hit_blocks) free_hits += blocks_[b].ref == 0;
  const int64_t fresh = blocks_for(seq.num_tokens()) - static_cast<int64_t>(hit_blocks.size());
  return fresh + free_hits <= free_.size();
}

void BlockManager::allocate(Sequence& seq) {
  KVATTN_CHECK(seq.owner_ == nullptr, "BlockManager::allocate: sequence ", seq.id(),
               " must hold no blocks but holds ", seq.num_blocks());
  KVATTN_CHECK(seq.num_tokens() > 0, "BlockManager::allocate: sequence ", seq.id(),
               " must have tokens but has none (moved from?)");
  // The memo on seq: evictions below only invalidate it (new epoch), nothing rewrites it.
  const std::vector<BlockId>& hit_blocks = match_prefix(seq);
  const bool collided = seq.match_collided_;
  const int64_t hits = static_cast<int64_t>(hit_blocks.size());
  int64_t free_hits = 0;
  for (BlockId b : hit_blocks) free_hits += blocks_[b].ref == 0;
  const int64_t total = blocks_for(seq.num_tokens());
  KVATTN_CHECK(total - hits + free_hits <= free_.size(), "BlockManager::allocate: sequence ",
               seq.id(), " (", seq.num_tokens(), " tokens, ", hits,
               " cached blocks) needs ", total - hits + free_hits, " free blocks but only ",
               free_.size(), " of ", num_blocks(), " are free");

  seq.block_table_.reserve(static_cast<size_t>(total));
  for (BlockId b : hit_blocks) {
    acquire(b);
    seq.block_table_.push_back(b);
  }
  for (int64_t i = hits; i < total; ++i) seq.block_table_.push_back(take_fresh_block());

  seq.owner_ = this;
  seq.table_id_ = new_table_id();
  seq.num_computed_tokens_ = hits * block_size_;
  seq.num_cached_tokens_ = hits * block_size_;
  seq.num_offered_blocks_ = hits;
  seq.offer_parent_ = hits > 0 ? hit_blocks.back() : -1;
  seq.offer_parent_gen_ = hits > 0 ? blocks_[hit_blocks.back()].gen : 0;
  seq.offers_stopped_ = false;
  ++num_sequences_;
  query_tokens_ += seq.num_tokens();
  hit_tokens_ += hits * block_size_;
  num_collisions_ += collided;
}

bool BlockManager::can_append(const Sequence& seq) const {
  if (seq.owner_ != this) return false;
  if (seq.num_tokens() <= seq.num_blocks() * block_size_) return true;  // the common case
  return blocks_for(seq.num_tokens()) - seq.num_blocks() <= free_.size();
}

void BlockManager::append(Sequence& seq) {
  check_held(seq, "append");
  if (seq.num_tokens() <= seq.num_blocks() * block_size_) return;  // decode: 15 of 16 steps
  const int64_t need = blocks_for(seq.num_tokens()) - seq.num_blocks();
  KVATTN_CHECK(need <= free_.size(), "BlockManager::append: sequence ", seq.id(), " (",
               seq.num_tokens(), " tokens in ", seq.num_blocks(), " blocks) needs ", need,
               " free blocks but only ", free_.size(), " are free");
  seq.block_table_.reserve(seq.block_table_.size() + static_cast<size_t>(need));
  for (int64_t i = 0; i < need; ++i) seq.block_table_.push_back(take_fresh_block());
}

void BlockManager::mark_computed(Sequence& seq, int64_t num_tokens) {
  check_held(seq, "mark_computed");
  const int64_t done = seq.num_computed_tokens_ + num_tokens;
  KVATTN_CHECK(num_tokens >= 0, "BlockManager::mark_computed: num_tokens of sequence ",
               seq.id(), " must be >= 0 but is ", num_tokens);
  KVATTN_CHECK(done <= seq.num_tokens() && done <= seq.num_blocks() * block_size_,
               "BlockManager::mark_computed: sequence ", seq.id(), " has ",
               seq.num_computed_tokens_, " computed tokens; ", num_tokens,
               " more must stay within its ", seq.num_tokens(), " tokens and the ",
               seq.num_blocks() * block_size_, " slots of its blocks");
  seq.num_computed_tokens_ = done;
  // Most decode steps complete no block: skip the offer without a division.
  if (prefix_caching_ && done >= (seq.num_offered_blocks_ + 1) * block_size_) {
    offer_computed_blocks(seq);
  }
}

void BlockManager::free(Sequence& seq) {
  check_held(seq, "free");
  for (auto it = seq.block_table_.rbegin(); it != seq.block_table_.rend(); ++it) release(*it);
  seq.block_table_.clear();
  seq.owner_ = nullptr;
  seq.table_id_ = 0;
  seq.num_computed_tokens_ = 0;
  seq.num_cached_tokens_ = 0;
  seq.num_offered_blocks_ = 0;
  seq.offer_parent_ = -1;
  seq.offer_parent_gen_ = 0;
  seq.offers_stopped_ = false;
  --num_sequences_;
}

bool BlockManager::can_fork(const Sequence& parent) const {
  if (parent.owner_ != this) return false;
  return parent.num_blocks() - parent.num_computed_tokens_ / block_size_ <= free_.size();
}

Sequence BlockManager::fork(const Sequence& parent, SeqId child_id,
                            std::vector<BlockCopy>& copies) {
  check_held(parent, "fork");
  const int64_t shared = parent.num_computed_tokens_ / block_size_;
  const int64_t fresh = parent.num_blocks() - shared;
  KVATTN_CHECK(fresh <= free_.size(), "BlockManager::fork: sequence ", parent.id(), " (",
               parent.num_blocks(), " blocks, ", shared, " shareable) needs ", fresh,
               " free blocks for child ", child_id, " but only ", free_.size(), " are free");
  const bool partial = parent.num_computed_tokens_ % block_size_ != 0;
  copies.reserve(copies.size() + 1);

  Sequence child(child_id, parent.tokens_);
  child.status_ = parent.status_;
  child.num_prompt_tokens_ = parent.num_prompt_tokens_;
  child.block_table_.reserve(parent.block_table_.size());
  for (int64_t i = 0; i < shared; ++i) {
    acquire(parent.block_table_[i]);
    child.block_table_.push_back(parent.block_table_[i]);
  }
  for (int64_t i = shared; i < parent.num_blocks(); ++i) {
    child.block_table_.push_back(take_fresh_block());
  }
  if (partial) copies.push_back({parent.block_table_[shared], child.block_table_[shared]});

  child.owner_ = this;
  child.table_id_ = new_table_id();
  child.num_computed_tokens_ = parent.num_computed_tokens_;
  child.num_offered_blocks_ = parent.num_offered_blocks_;
  child.offer_parent_ = parent.offer_parent_;
  child.offer_parent_gen_ = parent.offer_parent_gen_;
  child.offers_stopped_ = parent.offers_stopped_;
  child.block_hashes_ = parent.block_hashes_;
  child.hashes_fn_ = parent.hashes_fn_;
  child.hashes_block_size_ = parent.hashes_block_size_;
  ++num_sequences_;
  return child;
}

}  // namespace kvattn
