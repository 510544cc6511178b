// BlockManager: stats, introspection and the internal invariant check.
#include <vector>

#include "kvattn/cache/block_manager.h"
#include "kvattn/core/error.h"

namespace kvattn {

BlockManagerStats BlockManager::stats() const {
  BlockManagerStats s;
  s.num_blocks = num_blocks();
  s.num_free_blocks = free_.size();
  s.num_used_blocks = num_blocks() - free_.size();
  s.num_cached_blocks = table_.size();
  s.num_evictable_blocks = num_evictable_;
  s.num_sequences = num_sequences_;
  s.query_tokens = query_tokens_;
  s.hit_tokens = hit_tokens_;
  s.num_evictions = num_evictions_;
  s.num_hash_collisions = num_collisions_;
  return s;
}

int32_t BlockManager::ref_count(BlockId block) const {
  KVATTN_CHECK(block >= 0 && block < num_blocks(), "BlockManager::ref_count: block must be in [0, ",
               num_blocks(), ") but is ", block);
  return blocks_[block].ref;
}

bool BlockManager::is_cached(BlockId block) const {
  KVATTN_CHECK(block >= 0 && block < num_blocks(), "BlockManager::is_cached: block must be in [0, ",
               num_blocks(), ") but is ", block);
  return blocks_[block].cached;
}

void BlockManager::check_invariants() const {
  const char* fn = "BlockManager::check_invariants: ";
  int64_t zero_ref = 0;
  int64_t evictable = 0;
  int64_t cached = 0;
  for (BlockId b = 0; b < num_blocks(); ++b) {
    const Block& blk = blocks_[b];
    KVATTN_CHECK(blk.ref >= 0, fn, "block ", b, " has ref count ", blk.ref);
    KVATTN_CHECK((blk.ref == 0) == free_.contains(b), fn, "block ", b, " has ref count ", blk.ref,
                 " but is ", free_.contains(b) ? "" : "not ", "in the free list");
    zero_ref += blk.ref == 0;
    evictable += blk.ref == 0 && blk.cached;
    cached += blk.cached;
    if (blk.cached) {
      KVATTN_CHECK(table_.find(blk.hash) == b, fn, "cached block ", b, " is not in the table");
    }
  }
  KVATTN_CHECK(zero_ref == free_.size(), fn, "free list holds ", free_.size(), " blocks but ",
               zero_ref, " have ref count 0");
  KVATTN_CHECK(evictable == num_evictable_, fn, "evictable count is ", num_evictable_, " but ",
               evictable, " free blocks are cached");
  KVATTN_CHECK(cached == table_.size(), fn, "table holds ", table_.size(), " entries but ",
               cached, " blocks are cached");
  table_.for_each([&](uint64_t key, int32_t b) {
    KVATTN_CHECK(b >= 0 && b < num_blocks() && blocks_[b].cached && blocks_[b].hash == key, fn,
                 "table entry ", key, " -> ", b, " does not match the block");
  });
  // Reuse order: every uncached free block comes before every cached one.
  int64_t walked = 0;
  bool seen_cached = false;
  for (BlockId b = free_.front(); b >= 0; b = free_.next(b)) {
    KVATTN_CHECK(++walked <= free_.size(), fn, "free list is longer than its size (a cycle)");
    if (blocks_[b].cached) {
      seen_cached = true;
    } else {
      KVATTN_CHECK(!seen_cached, fn, "uncached free block ", b,
                   " comes after a cached one in the free list");
    }
  }
  KVATTN_CHECK(walked == free_.size(), fn, "free list walk found ", walked, " blocks but size is ",
               free_.size());
  if (!prefix_caching_) KVATTN_CHECK(cached == 0, fn, cached, " blocks cached with caching off");
}

}  // namespace kvattn
