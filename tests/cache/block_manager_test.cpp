// Hand-written BlockManager scenarios: prefix hits and their limits, registration timing,
// collisions, LRU order, fork, and bad calls that must throw and change nothing.
#include "kvattn/cache/block_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<BlockId> table_of(const Sequence& s) {
  return {s.block_table().begin(), s.block_table().end()};
}

// Everything a failed call must leave alone.
struct Snapshot {
  std::vector<int32_t> refs;
  std::vector<bool> cached;
  int64_t free_blocks, cached_blocks, evictable, sequences, query, hit, evictions, collisions;
  std::vector<BlockId> table;
  int64_t computed, tokens;
  bool allocated;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snap(const BlockManager& m, const Sequence& s) {
  Snapshot x;
  for (BlockId b = 0; b < m.num_blocks(); ++b) {
    x.refs.push_back(m.ref_count(b));
    x.cached.push_back(m.is_cached(b));
  }
  const BlockManagerStats st = m.stats();
  x.free_blocks = st.num_free_blocks;
  x.cached_blocks = st.num_cached_blocks;
  x.evictable = st.num_evictable_blocks;
  x.sequences = st.num_sequences;
  x.query = st.query_tokens;
  x.hit = st.hit_tokens;
  x.evictions = st.num_evictions;
  x.collisions = st.num_hash_collisions;
  x.table = table_of(s);
  x.computed = s.num_computed_tokens();
  x.tokens = s.num_tokens();
  x.allocated = s.is_allocated();
  return x;
}

// Runs `call`, expects kvattn::Error whose message contains `needle`, and no state change.
template <typename F>
void expect_rejected(const BlockManager& m, const Sequence& s, F&& call, const char* needle) {
  const Snapshot before = snap(m, s);
  try {
    call();
    ADD_FAILURE() << "expected kvattn::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_TRUE(snap(m, s) == before) << "state changed by a rejected call";
  m.check_invariants();
}

TEST(BlockManager, ConstructorValidatesArguments) {
  EXPECT_THROW(BlockManager(0, 16), Error);
  EXPECT_THROW(BlockManager(8, 0), Error);
  EXPECT_THROW(BlockManager(int64_t{1} << 31, 1), Error);
  EXPECT_THROW(BlockManager(int64_t{1} << 27, 16), Error);  // 2^31 int32 slots
  BlockManager m(10, 16);
  EXPECT_EQ(m.num_free_blocks(), 10);
  EXPECT_EQ(m.stats().num_used_blocks, 0);
  m.check_invariants();
}

TEST(BlockManager, AllocateCoversEveryTokenAndFreeReturnsAll) {
  BlockManager m(8, 4);
  Sequence s(1, iota_tokens(9));
  ASSERT_TRUE(m.can_allocate(s));
  m.allocate(s);
  EXPECT_EQ(s.num_blocks(), 3);
  EXPECT_EQ(s.num_computed_tokens(), 0);
  EXPECT_EQ(m.num_free_blocks(), 5);
  for (BlockId b : s.block_table()) EXPECT_EQ(m.ref_count(b), 1);
  m.free(s);
  EXPECT_FALSE(s.is_allocated());
  EXPECT_EQ(m.num_free_blocks(), 8);
  EXPECT_EQ(m.stats().num_sequences, 0);
  m.check_invariants();
}

TEST(BlockManager, PrefixHitReusesComputedFullBlocks) {
  BlockManager m(16, 4);
  Sequence a(1, iota_tokens(10));
  m.allocate(a);
  m.mark_computed(a, 10);
  EXPECT_EQ(m.stats().num_cached_blocks, 2);  // two full blocks; the third is partly filled
  const auto a_table = table_of(a);
  m.free(a);
  EXPECT_EQ(m.stats().num_evictable_blocks, 2);

  Sequence b(2, concat(iota_tokens(8), {7, 7, 7}));
  EXPECT_EQ(m.num_prefix_hit_tokens(b), 8);
  m.allocate(b);
  EXPECT_EQ(b.num_computed_tokens(), 8);
  EXPECT_EQ(b.num_cached_tokens(), 8);
  EXPECT_EQ(b.block_table()[0], a_table[0]);
  EXPECT_EQ(b.block_table()[1], a_table[1]);
  EXPECT_EQ(b.num_blocks(), 3);
  EXPECT_EQ(m.stats().hit_tokens, 8);
  EXPECT_EQ(m.stats().query_tokens, 10 + 11);
  EXPECT_DOUBLE_EQ(m.stats().hit_rate(), 8.0 / 21.0);
  m.check_invariants();
}

// A sequence that does not read the prefix cache computes every token (no hit, no cached
// tokens), while its computed blocks still join the cache for the next one.
TEST(BlockManager, ASequenceThatDoesNotReadThePrefixCacheGetsNoHit) {
  BlockManager m(16, 4);
  Sequence a(1, iota_tokens(10));
  m.allocate(a);
  m.mark_computed(a, 10);
  m.free(a);
  Sequence b(2, iota_tokens(10));
  b.set_reads_prefix_cache(false);
  EXPECT_EQ(m.num_prefix_hit_tokens(b), 0);
  m.allocate(b);
  EXPECT_EQ(b.num_computed_tokens(), 0);
  EXPECT_EQ(b.num_cached_tokens(), 0);
  m.mark_computed(b, 10);
  m.free(b);
  Sequence c(3, iota_tokens(10));
  EXPECT_EQ(m.num_prefix_hit_tokens(c), 8);
  Sequence moved = std::move(b);
  EXPECT_FALSE(moved.reads_prefix_cache());
  EXPECT_TRUE(b.reads_prefix_cache());  // NOLINT(bugprone-use-after-move): reset by the move
  m.check_invariants();
}

TEST(BlockManager, PrefixHitStopsInsideAPartlyMatchingBlock) {
  BlockManager m(16, 4);
  Sequence a(1, iota_tokens(12));
  m.allocate(a);
  m.mark_computed(a, 12);
  auto tokens = iota_tokens(12);
  tokens[6] = 1;  // differs inside block 1
  Sequence b(2, tokens);
  m.allocate(b);
  EXPECT_EQ(b.num_computed_tokens(), 4);
  EXPECT_EQ(b.block_table()[0], a.block_table()[0]);
  EXPECT_NE(b.block_table()[1], a.block_table()[1]);
  EXPECT_EQ(m.ref_count(a.block_table()[0]), 2);
}

TEST(BlockManager, FullHitStillComputesTheLastToken) {
  BlockManager m(16, 4);
  Sequence a(1, iota_tokens(8));
  m.allocate(a);
  m.mark_computed(a, 8);
  EXPECT_EQ(m.stats().num_cached_blocks, 2);
  Sequence b(2, iota_tokens(8));
  m.allocate(b);
  // Both blocks are cached, but block 1 is recomputed so that Lq >= 1 and the computed count
  // stays a multiple of the block size: only block 0 is shared.
  EXPECT_EQ(b.num_computed_tokens(), 4);
  EXPECT_LT(b.num_computed_tokens(), b.num_tokens());
  EXPECT_EQ(b.block_table()[0], a.block_table()[0]);
  EXPECT_NE(b.block_table()[1], a.block_table()[1]);
  // A one-token prompt never hits.
  Sequence c(3, {100});
  m.allocate(c);
  EXPECT_EQ(c.num_computed_tokens(), 0);
}

TEST(BlockManager, BlocksEnterTheCacheOnlyOnceComputed) {
  BlockManager m(16, 4);
  Sequence a(1, iota_tokens(12));
  m.allocate(a);
  Sequence probe(9, iota_tokens(13));
  EXPECT_EQ(m.num_prefix_hit_tokens(probe), 0);  // allocated, nothing computed yet
  m.mark_computed(a, 3);
  EXPECT_EQ(m.num_prefix_hit_tokens(probe), 0);  // block 0 not complete
  m.mark_computed(a, 1);
  EXPECT_EQ(m.num_prefix_hit_tokens(probe), 4);
  m.mark_computed(a, 8);
  EXPECT_EQ(m.num_prefix_hit_tokens(probe), 12);
  EXPECT_EQ(m.stats().num_cached_blocks, 3);
}

TEST(BlockManager, PrefixCachingOffNeverHits) {
  BlockManager m(16, 4, /*enable_prefix_caching=*/false);
  Sequence a(1, iota_tokens(12));
  m.allocate(a);
  m.mark_computed(a, 12);
  m.free(a);
  Sequence b(2, iota_tokens(12));
  m.allocate(b);
  EXPECT_EQ(b.num_computed_tokens(), 0);
  EXPECT_EQ(m.stats().num_cached_blocks, 0);
  m.check_invariants();
}

uint64_t constant_hash(uint64_t, const int32_t*, int64_t) { return 42; }

TEST(BlockManager, ConstantHashNeverServesOtherTokens) {
  BlockManager m(16, 4, true, &constant_hash);
  Sequence a(1, iota_tokens(9));
  m.allocate(a);
  m.mark_computed(a, 9);
  // Block 0 took the only key; block 1 collided with it, so the rest of a's chain is private.
  EXPECT_EQ(m.stats().num_cached_blocks, 1);
  EXPECT_EQ(m.stats().num_hash_collisions, 1);
  Sequence b(2, iota_tokens(9, 500));  // other tokens, same hash
  m.allocate(b);
  EXPECT_EQ(b.num_computed_tokens(), 0);
  EXPECT_EQ(m.stats().num_hash_collisions, 2);
  Sequence c(3, iota_tokens(9));  // the same tokens: block 0 is a genuine hit
  m.allocate(c);
  EXPECT_EQ(c.num_computed_tokens(), 4);
  EXPECT_EQ(c.block_table()[0], a.block_table()[0]);
  m.check_invariants();
}

// Ignores the parent: equal blocks after different prefixes collide.
uint64_t tokens_only_hash(uint64_t, const int32_t* t, int64_t n) {
  return xxhash_block_hash(7, t, n);
}

TEST(BlockManager, SameBlockAfterADifferentPrefixIsNotAHit) {
  BlockManager m(32, 4, true, &tokens_only_hash);
  const std::vector<int32_t> x = {1, 1, 1, 1}, z = {2, 2, 2, 2}, y = {3, 3, 3, 3};
  Sequence a(1, concat(concat(x, y), {9}));
  m.allocate(a);
  m.mark_computed(a, 9);  // enters x, then y (parent: a's x block)
  Sequence b(2, concat(concat(z, y), {9}));
  m.allocate(b);
  EXPECT_EQ(b.num_computed_tokens(), 0);
  m.mark_computed(b, 9);  // enters z; y's key is taken by a's y (other parent): a collision
  EXPECT_EQ(m.stats().num_hash_collisions, 1);
  // d = z y ...: block 0 hits b's z; the entry under y's key is a's block, computed after x.
  // Serving it would be wrong KV, so the hit must stop at one block.
  Sequence d(3, concat(concat(z, y), {9, 9}));
  m.allocate(d);
  EXPECT_EQ(d.num_computed_tokens(), 4);
  EXPECT_EQ(d.block_table()[0], b.block_table()[0]);
  EXPECT_NE(d.block_table()[1], a.block_table()[1]);
  m.check_invariants();
}

TEST(BlockManager, ConcurrentTwinsKeepTheLaterChainReachable) {
  BlockManager m(32, 4);
  const auto shared = iota_tokens(8);
  Sequence a(1, concat(shared, {1, 2, 3, 4, 0}));
  Sequence b(2, concat(shared, {5, 6, 7, 8, 0}));
  m.allocate(a);
  m.allocate(b);  // before a computed anything: no hit, b computes its own copy of `shared`
  EXPECT_EQ(b.num_computed_tokens(), 0);
  m.mark_computed(a, 13);
  m.mark_computed(b, 13);  // b's shared blocks are twins of a's; b's third block chains on them
  EXPECT_EQ(m.stats().num_cached_blocks, 4);
  EXPECT_EQ(m.stats().num_hash_collisions, 0);
  Sequence c(3, concat(concat(shared, {5, 6, 7, 8}), {1}));
  m.allocate(c);
  EXPECT_EQ(c.num_computed_tokens(), 12);
  EXPECT_EQ(c.block_table()[0], a.block_table()[0]);
  EXPECT_EQ(c.block_table()[1], a.block_table()[1]);
  EXPECT_EQ(c.block_table()[2], b.block_table()[2]);
}

// Caches one full block per 2-token prompt [t, t, 99] and frees it.
void cache_one_block(BlockManager& m, SeqId id, int32_t t) {
  Sequence s(id, {t, t, 99});
  m.allocate(s);
  m.mark_computed(s, 3);
  m.free(s);
}

TEST(BlockManager, EvictsTheLeastRecentlyFreedCachedBlockAfterUncachedOnes) {
  BlockManager m(6, 2);
  cache_one_block(m, 1, 10);
  cache_one_block(m, 2, 20);
  cache_one_block(m, 3, 30);
  cache_one_block(m, 4, 40);
  EXPECT_EQ(m.stats().num_evictable_blocks, 4);
  // Touch 10 again: it becomes the most recently freed.
  {
    Sequence s(5, {10, 10, 7});
    m.allocate(s);
    EXPECT_EQ(s.num_computed_tokens(), 2);
    m.free(s);
  }
  // 3 fresh blocks; 2 uncached free blocks go first, then the LRU cached one: 20.
  Sequence big(6, iota_tokens(6, 1000));
  m.allocate(big);
  EXPECT_EQ(m.stats().num_evictions, 1);
  auto hit = [&](int32_t t) {
    Sequence p(100 + t, {t, t, 5});
    return m.num_prefix_hit_tokens(p) > 0;
  };
  EXPECT_FALSE(hit(20));
  EXPECT_TRUE(hit(10));
  EXPECT_TRUE(hit(30));
  EXPECT_TRUE(hit(40));
  m.check_invariants();
}

TEST(BlockManager, FreeingLastToFirstEvictsTheTailOfAChainFirst) {
  BlockManager m(4, 2);
  Sequence a(1, {1, 1, 2, 2, 3, 3, 9});
  m.allocate(a);
  m.mark_computed(a, 7);
  m.free(a);  // 3 cached blocks + 1 uncached
  Sequence b(2, {5, 5, 6});  // 2 fresh blocks: the uncached one, then the LRU cached one
  m.allocate(b);
  Sequence probe(3, {1, 1, 2, 2, 3, 3, 9});
  EXPECT_EQ(m.num_prefix_hit_tokens(probe), 4);  // the prefix survived; block [3,3] went
}

TEST(BlockManager, AppendGrowsAcrossBlockBoundaries) {
  BlockManager m(3, 4);
  Sequence s(1, iota_tokens(4));
  m.allocate(s);
  m.mark_computed(s, 4);
  s.append_token(7);
  ASSERT_TRUE(m.can_append(s));
  m.append(s);
  EXPECT_EQ(s.num_blocks(), 2);
  m.append(s);  // already covered: no-op
  EXPECT_EQ(s.num_blocks(), 2);
  s.append_tokens(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7});  // speculative burst to 12
  m.append(s);
  EXPECT_EQ(s.num_blocks(), 3);
  s.append_token(1);
  EXPECT_FALSE(m.can_append(s));
  expect_rejected(m, s, [&] { m.append(s); }, "needs 1 free blocks but only 0");
}

TEST(BlockManager, BadCallsThrowAndChangeNothing) {
  BlockManager m(4, 4);
  Sequence s(1, iota_tokens(6));
  Sequence stranger(2, iota_tokens(3));
  expect_rejected(m, stranger, [&] { m.append(stranger); }, "holds none");
  expect_rejected(m, stranger, [&] { m.free(stranger); }, "holds none");
  expect_rejected(m, stranger, [&] { m.mark_computed(stranger, 1); }, "holds none");
  std::vector<BlockCopy> copies;
  expect_rejected(m, stranger, [&] { (void)m.fork(stranger, 3, copies); }, "holds none");
  EXPECT_TRUE(copies.empty());

  m.allocate(s);
  expect_rejected(m, s, [&] { m.allocate(s); }, "must hold no blocks");
  expect_rejected(m, s, [&] { m.mark_computed(s, 7); }, "more must stay within");
  expect_rejected(m, s, [&] { m.mark_computed(s, -1); }, "must be >= 0");
  Sequence huge(4, iota_tokens(13));
  EXPECT_FALSE(m.can_allocate(huge));
  expect_rejected(m, huge, [&] { m.allocate(huge); }, "needs 4 free blocks but only 2");
  m.free(s);
  expect_rejected(m, s, [&] { m.free(s); }, "holds none");  // freed twice

  BlockManager other(4, 4);
  other.allocate(stranger);
  expect_rejected(m, stranger, [&] { m.append(stranger); }, "another manager");
  EXPECT_THROW(m.ref_count(4), Error);
  EXPECT_THROW(m.is_cached(-1), Error);
  EXPECT_THROW(Sequence(5, {}), Error);
  EXPECT_THROW(Sequence(5, {1, -2}), Error);
  EXPECT_THROW(s.append_token(-1), Error);
}

TEST(BlockManager, ForkSharesFullBlocksAndCopiesThePartialOne) {
  BlockManager m(8, 4);
  Sequence p(1, iota_tokens(10));
  m.allocate(p);
  m.mark_computed(p, 10);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.can_fork(p));
  Sequence c = m.fork(p, 2, copies);
  EXPECT_EQ(c.id(), 2);
  EXPECT_EQ(c.num_tokens(), 10);
  EXPECT_EQ(c.num_prompt_tokens(), 10);
  EXPECT_EQ(c.num_computed_tokens(), 10);
  EXPECT_EQ(c.block_table()[0], p.block_table()[0]);
  EXPECT_EQ(c.block_table()[1], p.block_table()[1]);
  EXPECT_NE(c.block_table()[2], p.block_table()[2]);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0], (BlockCopy{p.block_table()[2], c.block_table()[2]}));
  EXPECT_EQ(m.ref_count(p.block_table()[0]), 2);
  EXPECT_EQ(m.ref_count(p.block_table()[2]), 1);
  EXPECT_EQ(m.stats().num_sequences, 2);
  m.free(p);
  EXPECT_EQ(m.ref_count(c.block_table()[0]), 1);
  m.free(c);
  EXPECT_EQ(m.num_free_blocks(), 8);
  m.check_invariants();
}

TEST(BlockManager, ForkOfAnAlignedParentCopiesNothing) {
  BlockManager m(4, 4);
  Sequence p(1, iota_tokens(8));
  m.allocate(p);
  m.mark_computed(p, 8);
  p.append_token(3);
  m.append(p);  // 3 blocks; the third holds only the uncomputed sampled token
  std::vector<BlockCopy> copies;
  Sequence c = m.fork(p, 2, copies);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(c.num_blocks(), 3);
  EXPECT_NE(c.block_table()[2], p.block_table()[2]);
  EXPECT_FALSE(m.can_fork(p));  // 0 free blocks, 1 needed
  expect_rejected(m, p, [&] { (void)m.fork(p, 3, copies); }, "needs 1 free blocks");
  EXPECT_TRUE(copies.empty());
}

TEST(BlockManager, PreemptedSequenceReallocatesFromItsOwnCachedBlocks) {
  BlockManager m(8, 4);
  Sequence s(1, iota_tokens(6));
  m.allocate(s);
  m.mark_computed(s, 6);
  for (int32_t t : {1, 2, 3}) {
    s.append_token(t);
    m.append(s);
    m.mark_computed(s, 1);
  }
  const auto before = table_of(s);
  m.free(s);  // preempted
  EXPECT_EQ(s.num_computed_tokens(), 0);
  m.allocate(s);
  EXPECT_EQ(s.num_computed_tokens(), 8);  // 9 tokens: two full blocks hit, last token recomputed
  EXPECT_EQ(s.block_table()[0], before[0]);
  EXPECT_EQ(s.block_table()[1], before[1]);
}

TEST(BlockManager, ResetPrefixCacheForgetsEveryEntry) {
  BlockManager m(16, 4);
  Sequence a(1, iota_tokens(9));
  m.allocate(a);
  m.mark_computed(a, 9);
  Sequence b(2, iota_tokens(9, 500));
  m.allocate(b);
  m.mark_computed(b, 8);
  m.free(b);
  EXPECT_EQ(m.stats().num_cached_blocks, 4);
  EXPECT_EQ(m.stats().num_evictable_blocks, 2);
  Sequence probe(3, iota_tokens(9));
  EXPECT_EQ(m.num_prefix_hit_tokens(probe), 8);
  m.reset_prefix_cache();
  m.check_invariants();
  EXPECT_EQ(m.stats().num_cached_blocks, 0);
  EXPECT_EQ(m.stats().num_evictable_blocks, 0);
  EXPECT_EQ(m.num_prefix_hit_tokens(probe), 0);
  EXPECT_EQ(m.ref_count(a.block_table()[0]), 1);  // a keeps its blocks
  for (int32_t t : {1, 2, 3, 4}) {  // a's next full block is not entered: its parent is gone
    a.append_token(t);
    m.append(a);
    m.mark_computed(a, 1);
  }
  EXPECT_EQ(m.stats().num_cached_blocks, 0);
  m.free(a);
  EXPECT_EQ(m.num_free_blocks(), 16);
}

TEST(BlockManager, MovedSequenceCarriesItsBlocks) {
  BlockManager m(4, 4);
  Sequence a(1, iota_tokens(5));
  m.allocate(a);
  Sequence b(std::move(a));
  EXPECT_FALSE(a.is_allocated());  // NOLINT(bugprone-use-after-move): the contract
  EXPECT_THROW(m.free(a), Error);
  EXPECT_FALSE(m.can_allocate(a));
  EXPECT_THROW(m.allocate(a), Error);  // no tokens left
  EXPECT_TRUE(b.is_allocated());
  m.free(b);
  EXPECT_EQ(m.num_free_blocks(), 4);
}

}  // namespace
}  // namespace kvattn
