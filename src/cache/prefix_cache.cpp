// BlockManager, prefix-cache half: finding cached prefixes and entering computed blocks.
//
// Why an entry also records its parent block and that block's generation: the hash is only a
// lookup key. A hit on block i must mean "this KV was computed from exactly our tokens
// [0, (i+1) * block_size)". Comparing block i's own tokens is not enough when hashes collide
// (the same tokens after a different prefix). But the walk reaches block i only through hit
// i-1, which by induction holds our prefix; if the candidate's recorded parent is that very
// block, unchanged since (same generation), the candidate was computed after our prefix. So
// hits are exact for any hash function, at the cost of one compare per block.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "kvattn/cache/block_manager.h"
#include "kvattn/core/error.h"

namespace kvattn {
namespace {

std::atomic<uint64_t> g_next_cache_epoch{1};

}  // namespace

void BlockManager::cache_changed() {
  cache_epoch_ = g_next_cache_epoch.fetch_add(1, std::memory_order_relaxed);
}

uint64_t BlockManager::block_hash(const Sequence& seq, int64_t i) const {
  auto& memo = seq.block_hashes_;
  if (seq.hashes_fn_ != hash_fn_ || seq.hashes_block_size_ != block_size_) {
    memo.clear();
    seq.hashes_fn_ = hash_fn_;
    seq.hashes_block_size_ = block_size_;
  }
  while (static_cast<int64_t>(memo.size()) <= i) {
    const int64_t j = static_cast<int64_t>(memo.size());
    const uint64_t parent = j == 0 ? kRootBlockHash : memo.back();
    memo.push_back(hash_fn_(parent, seq.tokens_.data() + j * block_size_, block_size_));
  }
  return memo[static_cast<size_t>(i)];
}

bool BlockManager::same_content(BlockId b, const int32_t* tokens, BlockId parent,
                                uint32_t parent_gen) const {
  const Block& blk = blocks_[b];
  if (blk.parent != parent) return false;
  if (parent >= 0 && blk.parent_gen != parent_gen) return false;
  return std::memcmp(block_tokens(b), tokens, sizeof(int32_t) * block_size_) == 0;
}

// An entry nobody can reach: its parent block is no longer cached or holds new content. The
// walk only passes through cached blocks, so such an entry can never hit again.
bool BlockManager::is_stale(BlockId b) const {
  const Block& blk = blocks_[b];
  if (blk.parent < 0) return false;
  const Block& p = blocks_[blk.parent];
  return !p.cached || p.gen != blk.parent_gen;
}

const std::vector<BlockId>& BlockManager::match_prefix(const Sequence& seq) const {
  std::vector<BlockId>& hits = seq.match_hits_;
  if (seq.match_epoch_ == cache_epoch_ && seq.match_num_tokens_ == seq.num_tokens()) return hits;
  hits.clear();
  seq.match_epoch_ = cache_epoch_;
  seq.match_num_tokens_ = seq.num_tokens();
  seq.match_collided_ = false;
  if (!prefix_caching_ || !seq.reads_prefix_cache()) return hits;
  const int64_t max_hits = (seq.num_tokens() - 1) / block_size_;
  BlockId parent = -1;
  uint32_t parent_gen = 0;
  for (int64_t i = 0; i < max_hits; ++i) {
    const BlockId b = table_.find(block_hash(seq, i));
    if (b < 0) break;
    if (!same_content(b, seq.tokens_.data() + i * block_size_, parent, parent_gen)) {
      // A live entry under our key with other content is a true hash collision (its parent is
      // cached under another key, or it holds other tokens); a stale one is just dead.
      seq.match_collided_ = !is_stale(b);
      break;
    }
    hits.push_back(b);
    parent = b;
    parent_gen = blocks_[b].gen;
  }
  return hits;
}

int64_t BlockManager::num_prefix_hit_tokens(const Sequence& seq) const {
  return static_cast<int64_t>(match_prefix(seq).size()) * block_size_;
}

// Enters seq's newly full, computed blocks. Per block, the entry under its hash is:
// - absent: ours is entered;
// - the same content (a twin computed by a concurrent sequence): the twin stays, and our later
//   blocks name the twin as parent, so the chain stays reachable through the cache;
// - stale: it is dropped and ours is entered;
// - different content (a true hash collision): it stays, and the rest of our chain is not
//   offered.
// Offers also stop once the parent we would name has left the cache.
void BlockManager::offer_computed_blocks(Sequence& seq) {
  const int64_t full = seq.num_computed_tokens_ / block_size_;
  for (int64_t i = seq.num_offered_blocks_; i < full && !seq.offers_stopped_; ++i) {
    const BlockId p = seq.offer_parent_;
    if (p >= 0 && (!blocks_[p].cached || blocks_[p].gen != seq.offer_parent_gen_)) {
      // The block our next entry would name as parent left the cache (a twin evicted, or our
      // own entry replaced as stale): nothing entered after it could ever be reached.
      seq.offers_stopped_ = true;
      break;
    }
    const uint64_t h = block_hash(seq, i);
    const int32_t* tokens = seq.tokens_.data() + i * block_size_;
    const BlockId ours = seq.block_table_[i];
    BlockId canonical = ours;
    BlockId existing = table_.find(h);
    if (existing == ours) {
      // Already entered (shared through fork or a hit).
    } else if (existing >= 0 &&
               same_content(existing, tokens, seq.offer_parent_, seq.offer_parent_gen_)) {
      canonical = existing;
    } else if (existing >= 0 && !is_stale(existing)) {
      ++num_collisions_;
      seq.offers_stopped_ = true;
      break;
    } else {
      if (existing >= 0) {
        uncache(existing);
        if (blocks_[existing].ref == 0) {  // now worthless: reuse it before any cached block
          --num_evictable_;
          free_.remove(existing);
          free_.push_front(existing);
        }
      }
      Block& blk = blocks_[ours];
      blk.hash = h;
      blk.parent = seq.offer_parent_;
      blk.parent_gen = seq.offer_parent_gen_;
      blk.cached = true;
      std::memcpy(block_tokens_.data() + static_cast<int64_t>(ours) * block_size_, tokens,
                  sizeof(int32_t) * block_size_);
      table_.insert(h, ours);
      cache_changed();
    }
    seq.offer_parent_ = canonical;
    seq.offer_parent_gen_ = blocks_[canonical].gen;
  }
  seq.num_offered_blocks_ = std::max(seq.num_offered_blocks_, full);
}

void BlockManager::reset_prefix_cache() {
  for (BlockId b = 0; b < num_blocks(); ++b) {
    if (blocks_[b].cached) uncache(b);  // free ones now all uncached: the list order holds
  }
  num_evictable_ = 0;
  cache_changed();
}

}  // namespace kvattn
