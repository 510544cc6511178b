// Property tests: long random sequences of cache operations (allocate, compute a step through
// the batch builder and register, append, free, fork, preempt and reallocate, bad calls) run
// against a simple model, checking every invariant after every operation.
//
// The model's key piece is a simulated KV pool: a "compute" writes, at each slot the builder
// assigned, a 64-bit fingerprint of the sequence's whole prefix up to that token (a strong hash
// independent of the manager's). Then "the KV of every computed token of every live sequence is
// right" is one comparison per token, and it covers prefix hits (never another prefix's KV,
// whatever the injected hash function), fork copies, and writes into shared blocks.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/core/error.h"

namespace kvattn {
namespace {

int64_t g_total_ops = 0;

// Sanitized builds (CI runs ASan+UBSan) run half the operations.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kScale = 2;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kScale = 2;
#else
constexpr int kScale = 1;
#endif
#else
constexpr int kScale = 1;
#endif

// A failed model check. Thrown (not asserted) so that both rapidcheck (which then shrinks the
// op list) and plain gtest report it.
template <typename... Parts>
void require(bool ok, const Parts&... parts) {
  if (ok) return;
  std::ostringstream os;
  os << "model check failed: ";
  (os << ... << parts);
  throw std::logic_error(os.str());
}

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// ---- injected hash functions ----
uint64_t low_bits_hash(uint64_t parent, const int32_t* t, int64_t n) {
  return xxhash_block_hash(parent, t, n) & 7;  // 8 keys: constant collisions
}
uint64_t tokens_only_hash(uint64_t, const int32_t* t, int64_t n) {
  return xxhash_block_hash(1, t, n);  // the same block after another prefix collides
}
uint64_t constant_hash(uint64_t, const int32_t*, int64_t) { return 0x5eed; }

const BlockHashFn kHashes[] = {nullptr, &low_bits_hash, &tokens_only_hash, &constant_hash};
const char* const kHashNames[] = {"xxhash", "low-3-bits", "tokens-only", "constant"};

struct Config {
  int64_t num_blocks = 16;
  int64_t block_size = 4;
  bool prefix_caching = true;
  int hash = 0;        // index into kHashes
  int32_t alphabet = 4;
  uint64_t seed = 1;
};

std::ostream& operator<<(std::ostream& os, const Config& c) {
  return os << "{blocks " << c.num_blocks << ", block_size " << c.block_size << ", caching "
            << c.prefix_caching << ", hash " << kHashNames[c.hash] << ", alphabet "
            << c.alphabet << ", seed " << c.seed << "}";
}

struct Totals {
  int64_t ops = 0, allocs = 0, hit_tokens = 0, collisions = 0, evictions = 0, copies = 0;
  int64_t steps = 0, rejected = 0;
};

class Harness {
 public:
  explicit Harness(const Config& c)
      : cfg_(c),
        m_(c.num_blocks, c.block_size, c.prefix_caching, kHashes[c.hash]),
        builder_(m_),
        kv_(static_cast<size_t>(c.num_blocks * c.block_size), 0),
        freed_at_(static_cast<size_t>(c.num_blocks), 0),
        rng_(c.seed) {
    for (int f = 0; f < 3; ++f) {
      std::vector<int32_t> fam(static_cast<size_t>(uniform(1, 5 * c.block_size + 3)));
      for (auto& t : fam) t = token();
      families_.push_back(std::move(fam));
    }
  }

  void run(const std::vector<uint64_t>& ops) {
    for (uint64_t op : ops) apply(op);
    finish();
  }

  const Totals& totals() const { return totals_; }
  const BlockManager& manager() const { return m_; }

 private:
  using SeqPtr = std::unique_ptr<Sequence>;
  static constexpr size_t kMaxLive = 10;
  static constexpr size_t kMaxIdle = 6;

  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  int32_t token() { return static_cast<int32_t>(uniform(0, cfg_.alphabet - 1)); }
  int64_t bs() const { return cfg_.block_size; }

  // Fingerprint of tokens [0, p] of s.
  std::vector<uint64_t> fingerprints(const Sequence& s) const {
    std::vector<uint64_t> fp(static_cast<size_t>(s.num_tokens()));
    uint64_t h = 0x1234;
    for (int64_t p = 0; p < s.num_tokens(); ++p) {
      h = mix64(h ^ (static_cast<uint64_t>(s.token_ids()[p]) * 0x100000001B3ull));
      fp[p] = h;
    }
    return fp;
  }

  int64_t slot(const Sequence& s, int64_t p) const {
    return s.block_table()[p / bs()] * bs() + p % bs();
  }

  void apply(uint64_t op) {
    ++totals_.ops;
    rng_.seed(op ^ cfg_.seed);
    const int kind = static_cast<int>(op % 100);
    if (kind < 18) new_request();
    else if (kind < 40) compute_step();
    else if (kind < 56) append_tokens();
    else if (kind < 68) free_one(/*drop=*/false);
    else if (kind < 76) fork_one();
    else if (kind < 84) reallocate_idle();
    else if (kind < 92) bad_call();
    else if (kind < 99) free_one(/*drop=*/true);
    else reset_cache();
    check_all();
  }

  // ---- operations ----

  void new_request() {
    if (live_.size() >= kMaxLive) return;
    const auto& fam = families_[static_cast<size_t>(uniform(0, 2))];
    std::vector<int32_t> prompt(fam.begin(), fam.begin() + uniform(0, static_cast<int64_t>(fam.size())));
    const int64_t extra = uniform(prompt.empty() ? 1 : 0, 2 * bs() + 2);
    for (int64_t i = 0; i < extra; ++i) prompt.push_back(token());
    auto seq = std::make_unique<Sequence>(next_id_++, std::move(prompt));
    try_allocate(std::move(seq));
  }

  void reallocate_idle() {
    if (idle_.empty() || live_.size() >= kMaxLive) return;
    const size_t i = static_cast<size_t>(uniform(0, static_cast<int64_t>(idle_.size()) - 1));
    SeqPtr seq = std::move(idle_[i]);
    idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
    try_allocate(std::move(seq));
  }

  void try_allocate(SeqPtr seq) {
    const int64_t need = (seq->num_tokens() + bs() - 1) / bs();
    const int64_t predicted_hit = m_.num_prefix_hit_tokens(*seq);
    const bool can = m_.can_allocate(*seq);
    require(!(need <= m_.num_free_blocks()) || can, "can_allocate false with ", need,
            " blocks needed and ", m_.num_free_blocks(), " free");
    if (!can) {
      expect_rejected(*seq, [&] { m_.allocate(*seq); });
      park(std::move(seq));
      return;
    }
    const auto before = pool_state();
    m_.allocate(*seq);
    ++totals_.allocs;
    const int64_t c = seq->num_computed_tokens();
    require(c == predicted_hit && c == seq->num_cached_tokens(), "allocate hit ", c,
            " tokens but num_prefix_hit_tokens said ", predicted_hit);
    require(c % bs() == 0 && c < seq->num_tokens(), "computed count ", c,
            " must be a multiple of ", bs(), " and < ", seq->num_tokens());
    require(seq->num_blocks() == need, "allocate gave ", seq->num_blocks(), " blocks, need ", need);
    totals_.hit_tokens += c;
    check_lru(before, *seq, c / bs());
    live_.push_back(std::move(seq));
  }

  void compute_step() {
    std::vector<ScheduledSequence> batch;
    std::vector<Sequence*> seqs;
    for (auto& s : live_) {
      const int64_t covered = std::min(s->num_tokens(), s->num_blocks() * bs());
      const int64_t todo = covered - s->num_computed_tokens();
      if (todo <= 0 || uniform(0, 3) == 0) continue;
      const int64_t n = uniform(0, 2) == 0 ? todo : uniform(1, todo);
      batch.push_back({s.get(), n});
      seqs.push_back(s.get());
    }
    if (batch.empty()) return;
    BatchBuildOptions opt;
    const bool all_one = std::all_of(batch.begin(), batch.end(),
                                     [](const ScheduledSequence& b) { return b.num_new_tokens == 1; });
    if (all_one && uniform(0, 1)) opt.pad_decode_batch_to = static_cast<int64_t>(batch.size()) + uniform(0, 3);
    if (uniform(0, 3) == 0) opt.block_table_width = m_.num_blocks();
    const BatchMetadata& md = builder_.build(batch, opt);
    check_metadata(batch, opt, md);
    // "Run" the step: store each new token's KV fingerprint at its slot.
    const int32_t* slots = md.ctx.slot_mapping.ptr<int32_t>();
    int64_t t = 0;
    for (const auto& b : batch) {
      const auto fp = fingerprints(*b.seq);
      for (int64_t p = b.seq->num_computed_tokens(); p < b.seq->num_computed_tokens() + b.num_new_tokens; ++p) {
        kv_[static_cast<size_t>(slots[t++])] = fp[static_cast<size_t>(p)];
      }
    }
    for (size_t i = 0; i < seqs.size(); ++i) m_.mark_computed(*seqs[i], batch[i].num_new_tokens);
    ++totals_.steps;
  }

  void append_tokens() {
    if (live_.empty()) return;
    Sequence& s = *live_[static_cast<size_t>(uniform(0, static_cast<int64_t>(live_.size()) - 1))];
    const int64_t k = uniform(0, 3) == 0 ? uniform(2, bs() + 2) : 1;
    for (int64_t i = 0; i < k; ++i) s.append_token(token());
    const int64_t need = (s.num_tokens() + bs() - 1) / bs() - s.num_blocks();
    const bool can = m_.can_append(s);
    require(can == (need <= m_.num_free_blocks()), "can_append is ", can, " with ", need,
            " blocks needed and ", m_.num_free_blocks(), " free");
    if (!can) {
      expect_rejected(s, [&] { m_.append(s); });
      return;  // s keeps uncovered tokens until a later append or free
    }
    const auto before = pool_state();
    m_.append(s);
    check_lru(before, s, 0);
  }

  void free_one(bool drop) {
    if (live_.empty()) {
      if (drop && !idle_.empty()) idle_.erase(idle_.begin());
      return;
    }
    const size_t i = static_cast<size_t>(uniform(0, static_cast<int64_t>(live_.size()) - 1));
    SeqPtr s = std::move(live_[i]);
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
    const std::vector<BlockId> table(s->block_table().begin(), s->block_table().end());
    m_.free(*s);
    for (auto it = table.rbegin(); it != table.rend(); ++it) {  // released last to first
      if (m_.ref_count(*it) == 0) freed_at_[static_cast<size_t>(*it)] = ++clock_;
    }
    require(!s->is_allocated() && s->num_blocks() == 0 && s->num_computed_tokens() == 0,
            "free left sequence ", s->id(), " with state");
    if (!drop) park(std::move(s));
  }

  void fork_one() {
    if (live_.empty() || live_.size() >= kMaxLive) return;
    Sequence& p = *live_[static_cast<size_t>(uniform(0, static_cast<int64_t>(live_.size()) - 1))];
    std::vector<BlockCopy> copies = {{-7, -7}};  // fork appends; it must keep what is there
    if (!m_.can_fork(p)) {
      expect_rejected(p, [&] { (void)m_.fork(p, next_id_, copies); });
      require(copies.size() == 1, "a rejected fork changed the copy list");
      return;
    }
    const auto before = pool_state();
    auto child = std::make_unique<Sequence>(m_.fork(p, next_id_++, copies));
    require(copies.size() == (p.num_computed_tokens() % bs() ? 2u : 1u), "fork returned ",
            copies.size() - 1, " copies for ", p.num_computed_tokens(), " computed tokens");
    for (size_t i = 1; i < copies.size(); ++i) {
      const auto [src, dst] = copies[i];
      require(src == p.block_table()[p.num_computed_tokens() / bs()] &&
                  dst == child->block_table()[p.num_computed_tokens() / bs()],
              "fork copy is (", src, ", ", dst, ")");
      std::copy_n(kv_.begin() + src * bs(), bs(), kv_.begin() + dst * bs());
      ++totals_.copies;
    }
    require(std::equal(p.token_ids().begin(), p.token_ids().end(), child->token_ids().begin(),
                       child->token_ids().end()) &&
                child->num_computed_tokens() == p.num_computed_tokens() &&
                child->num_blocks() == p.num_blocks(),
            "fork child differs from its parent");
    check_lru(before, *child, 0);
    live_.push_back(std::move(child));
  }

  // Calls that must throw and change nothing.
  void bad_call() {
    const int which = static_cast<int>(uniform(0, 3));
    if (which == 0 && !idle_.empty()) {
      Sequence& s = *idle_.front();
      expect_rejected(s, [&] { m_.free(s); });  // freed twice
      expect_rejected(s, [&] { m_.append(s); });
      expect_rejected(s, [&] { m_.mark_computed(s, 0); });
    } else if (which == 1 && !live_.empty()) {
      Sequence& s = *live_.front();
      expect_rejected(s, [&] { m_.mark_computed(s, s.num_uncomputed_tokens() + 1); });
      expect_rejected(s, [&] { m_.allocate(s); });
    } else if (which == 2 && !live_.empty()) {
      Sequence& s = *live_.back();
      if (s.num_computed_tokens() >= std::min(s.num_tokens(), s.num_blocks() * bs())) return;
      std::vector<ScheduledSequence> dup = {{&s, 1}, {&s, 1}};
      expect_rejected(s, [&] { builder_.build(dup); });
    } else {
      Sequence big(next_id_++, std::vector<int32_t>(static_cast<size_t>((m_.num_free_blocks() + 1) * bs()), 1));
      if (m_.can_allocate(big)) return;  // a long cached run of token 1 may fit after all
      expect_rejected(big, [&] { m_.allocate(big); });
    }
  }

  void reset_cache() {
    if (uniform(0, 3) > 0) return;  // rare: it wipes what the other ops build up
    m_.reset_prefix_cache();
    for (BlockId b = 0; b < m_.num_blocks(); ++b) require(!m_.is_cached(b), "reset left block ", b);
  }

  void park(SeqPtr s) {
    idle_.push_back(std::move(s));
    if (idle_.size() > kMaxIdle) idle_.erase(idle_.begin());
  }

  void finish() {
    while (!live_.empty()) free_one(true);
    check_all();
    const BlockManagerStats st = m_.stats();
    require(st.num_free_blocks == m_.num_blocks() && st.num_used_blocks == 0 &&
                st.num_sequences == 0,
            "blocks leaked: ", st.num_used_blocks, " used after every sequence was freed");
    totals_.collisions = st.num_hash_collisions;
    totals_.evictions = st.num_evictions;
    g_total_ops += totals_.ops;
  }

  // ---- checks ----

  struct PoolState {
    std::vector<int32_t> refs;
    std::vector<bool> cached;
  };
  PoolState pool_state() const {
    PoolState s;
    for (BlockId b = 0; b < m_.num_blocks(); ++b) {
      s.refs.push_back(m_.ref_count(b));
      s.cached.push_back(m_.is_cached(b));
    }
    return s;
  }

  template <typename F>
  void expect_rejected(const Sequence& s, F&& call) {
    const PoolState before = pool_state();
    const BlockManagerStats st = m_.stats();
    const std::vector<BlockId> table(s.block_table().begin(), s.block_table().end());
    const int64_t computed = s.num_computed_tokens();
    bool threw = false;
    try {
      call();
    } catch (const Error&) {
      threw = true;
    }
    require(threw, "a bad call on sequence ", s.id(), " did not throw");
    const PoolState after = pool_state();
    require(after.refs == before.refs && after.cached == before.cached &&
                m_.stats().num_free_blocks == st.num_free_blocks &&
                m_.stats().query_tokens == st.query_tokens &&
                std::equal(table.begin(), table.end(), s.block_table().begin(),
                           s.block_table().end()) &&
                s.num_computed_tokens() == computed,
            "a rejected call on sequence ", s.id(), " changed state");
    ++totals_.rejected;
  }

  // An allocating op took `fresh` blocks beyond the `hits` leading hit blocks of s. Blocks with
  // no cache entry must go first; then the least recently freed cached blocks.
  void check_lru(const PoolState& before, const Sequence& s, int64_t hits) {
    std::vector<BlockId> fresh;
    for (int64_t i = hits; i < s.num_blocks(); ++i) {
      const BlockId b = s.block_table()[i];
      if (before.refs[b] == 0) fresh.push_back(b);
    }
    std::vector<bool> is_hit(static_cast<size_t>(m_.num_blocks()), false);
    for (int64_t i = 0; i < hits; ++i) is_hit[s.block_table()[i]] = true;
    std::vector<BlockId> candidates;  // cached, free, not taken as a hit
    int64_t uncached_free = 0;
    for (BlockId b = 0; b < m_.num_blocks(); ++b) {
      if (before.refs[b] != 0) continue;
      if (!before.cached[b]) ++uncached_free;
      else if (!is_hit[b]) candidates.push_back(b);
    }
    std::sort(candidates.begin(), candidates.end(),
              [&](BlockId a, BlockId b) { return freed_at_[a] < freed_at_[b]; });
    const int64_t evict = std::max<int64_t>(0, static_cast<int64_t>(fresh.size()) - uncached_free);
    std::vector<BlockId> expected(candidates.begin(), candidates.begin() + evict);
    std::vector<BlockId> actual;
    for (BlockId b : fresh) if (before.cached[b]) actual.push_back(b);
    std::sort(expected.begin(), expected.end());
    std::sort(actual.begin(), actual.end());
    require(expected == actual, "evicted ", actual.size(), " cached blocks, LRU order wanted ",
            expected.size(), " (first ", expected.empty() ? -1 : expected[0], ", got ",
            actual.empty() ? -1 : actual[0], ")");
    for (BlockId b = 0; b < m_.num_blocks(); ++b) {
      const bool evicted = std::binary_search(actual.begin(), actual.end(), b);
      require(m_.is_cached(b) == (before.cached[b] && !evicted), "block ", b,
              " changed cache state outside eviction");
    }
  }

  void check_metadata(const std::vector<ScheduledSequence>& batch, const BatchBuildOptions& opt,
                      const BatchMetadata& md) {
    bool decode = true, any_cached = false;
    for (const auto& b : batch) {
      decode = decode && b.num_new_tokens == 1;
      any_cached = any_cached || b.seq->num_computed_tokens() > 0;
    }
    const int64_t rows = decode && opt.pad_decode_batch_to ? opt.pad_decode_batch_to
                                                           : static_cast<int64_t>(batch.size());
    require(md.ctx.phase == (decode ? Phase::kDecode : Phase::kPrefill), "wrong phase");
    require(md.reads_kv_from_cache == (!decode && any_cached), "wrong reads_kv_from_cache");
    require(md.ctx.block_tables.defined() == (decode || any_cached), "block_tables presence");
    require(md.num_seqs == rows && md.ctx.context_lens.size(0) == rows, "row count");
    const int32_t* slot = md.ctx.slot_mapping.ptr<int32_t>();
    const int32_t* pos = md.positions.ptr<int32_t>();
    const int32_t* ids = md.token_ids.ptr<int32_t>();
    const int32_t* cu_q = md.ctx.cu_seqlens_q.ptr<int32_t>();
    const int32_t* cu_k = md.ctx.cu_seqlens_k.ptr<int32_t>();
    const int32_t* lens = md.ctx.context_lens.ptr<int32_t>();
    const int64_t width = md.ctx.block_tables.defined() ? md.ctx.block_tables.size(1) : 0;
    const int32_t* tables = md.ctx.block_tables.defined() ? md.ctx.block_tables.ptr<int32_t>() : nullptr;
    require(cu_q[0] == 0 && cu_k[0] == 0, "cu_seqlens start");
    int64_t t = 0, max_q = 0, max_k = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const bool pad = r >= static_cast<int64_t>(batch.size());
      const Sequence* s = pad ? nullptr : batch[r].seq;
      const int64_t c = pad ? 0 : s->num_computed_tokens();
      const int64_t n = pad ? 1 : batch[r].num_new_tokens;
      const int64_t lk = pad ? 0 : c + n;
      require(cu_q[r + 1] - cu_q[r] == n && cu_k[r + 1] - cu_k[r] == lk && lens[r] == lk,
              "row ", r, " lengths");
      for (int64_t p = c; p < c + n; ++p, ++t) {
        require(slot[t] == (pad ? -1 : slot_of(*s, p)) && pos[t] == (pad ? 0 : p) &&
                    ids[t] == (pad ? 0 : s->token_ids()[p]),
                "row ", r, " token ", p, " metadata");
      }
      if (tables) {
        const int64_t nb = pad ? 0 : (lk + bs() - 1) / bs();
        for (int64_t j = 0; j < width; ++j) {
          require(tables[r * width + j] == (j < nb ? s->block_table()[j] : -1), "row ", r,
                  " block table entry ", j);
        }
      }
      if (!pad) max_q = std::max(max_q, n), max_k = std::max(max_k, lk);
    }
    require(t == md.num_tokens && md.ctx.slot_mapping.size(0) == t, "token count");
    require(md.ctx.max_seqlen_q == max_q && md.ctx.max_seqlen_k == max_k, "max seqlens");
  }
  int32_t slot_of(const Sequence& s, int64_t p) const { return static_cast<int32_t>(slot(s, p)); }

  void check_all() {
    m_.check_invariants();
    std::vector<int32_t> holders(static_cast<size_t>(m_.num_blocks()), 0);
    for (const auto& s : live_) {
      require(s->is_allocated() && s->owner() == &m_, "live sequence ", s->id(), " not held");
      const int64_t want = (s->num_tokens() + bs() - 1) / bs();
      require(s->num_blocks() <= want && s->num_blocks() * bs() >= s->num_computed_tokens(),
              "sequence ", s->id(), " holds ", s->num_blocks(), " blocks for ", s->num_tokens(),
              " tokens");
      std::vector<BlockId> sorted(s->block_table().begin(), s->block_table().end());
      std::sort(sorted.begin(), sorted.end());
      require(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
              "sequence ", s->id(), " holds a block twice");
      for (BlockId b : sorted) ++holders[static_cast<size_t>(b)];
      // The KV of every computed token is the KV of this sequence's own prefix.
      const auto fp = fingerprints(*s);
      for (int64_t p = 0; p < s->num_computed_tokens(); ++p) {
        require(kv_[static_cast<size_t>(slot(*s, p))] == fp[static_cast<size_t>(p)], "sequence ",
                s->id(), " token ", p, " has another prefix's KV (slot ", slot(*s, p), ")");
      }
    }
    int64_t free_count = 0;
    for (BlockId b = 0; b < m_.num_blocks(); ++b) {
      require(m_.ref_count(b) == holders[static_cast<size_t>(b)], "block ", b, " ref count ",
              m_.ref_count(b), " but ", holders[static_cast<size_t>(b)], " holders");
      free_count += holders[static_cast<size_t>(b)] == 0;
    }
    const BlockManagerStats st = m_.stats();
    require(st.num_free_blocks == free_count && m_.num_free_blocks() == free_count &&
                st.num_used_blocks == m_.num_blocks() - free_count,
            "free count ", st.num_free_blocks, " but ", free_count, " blocks have no holder");
    require(st.num_sequences == static_cast<int64_t>(live_.size()), "sequence count");
    for (const auto& s : idle_) require(!s->is_allocated(), "idle sequence holds blocks");
  }

  Config cfg_;
  BlockManager m_;
  BatchMetadataBuilder builder_;
  std::vector<uint64_t> kv_;
  std::vector<uint64_t> freed_at_;
  uint64_t clock_ = 0;
  std::mt19937_64 rng_;
  std::vector<std::vector<int32_t>> families_;
  std::vector<SeqPtr> live_;
  std::vector<SeqPtr> idle_;
  SeqId next_id_ = 0;
  Totals totals_;
};

// Up to 4000 ops (2000 sanitized; the list shrinks on failure). The elements are drawn at rapidcheck's nominal
// size: an integer generated at size 4000 saturates to its maximum.
rc::Gen<std::vector<uint64_t>> op_lists() {
  return rc::gen::resize(4000 / kScale, rc::gen::container<std::vector<uint64_t>>(
                                   rc::gen::resize(100, rc::gen::arbitrary<uint64_t>())));
}

rc::Gen<Config> configs(std::vector<int> hashes, int64_t max_blocks, bool caching_may_be_off) {
  return rc::gen::exec([=] {
    Config c;
    c.num_blocks = *rc::gen::inRange<int64_t>(2, max_blocks + 1);
    c.block_size = *rc::gen::elementOf(std::vector<int64_t>{1, 2, 3, 4, 16});
    c.prefix_caching = caching_may_be_off ? *rc::gen::element(true, false) : true;
    c.hash = *rc::gen::elementOf(hashes);
    c.alphabet = *rc::gen::elementOf(std::vector<int32_t>{2, 4, 50000});
    c.seed = *rc::gen::arbitrary<uint64_t>();
    return c;
  });
}

void run_case(const Config& c, const std::vector<uint64_t>& ops) {
  RC_TAG(kHashNames[c.hash]);
  Harness h(c);
  h.run(ops);
}

RC_GTEST_PROP(BlockManagerProperty, XxHashRandomOps, ()) {
  run_case(*configs({0}, 48, /*caching_may_be_off=*/true), *op_lists());
}

RC_GTEST_PROP(BlockManagerProperty, CollidingHashesRandomOps, ()) {
  run_case(*configs({1, 2, 3}, 48, false), *op_lists());
}

RC_GTEST_PROP(BlockManagerProperty, TinyPoolsRandomOps, ()) {
  run_case(*configs({0, 1, 2, 3}, 6, true), *op_lists());
}

RC_GTEST_PROP(BlockManagerProperty, LargePoolsRandomOps, ()) {
  run_case(*configs({0, 2}, 200, false), *op_lists());
}

// Fixed seeds, long runs: proves each mechanism is really exercised (not only never broken).
TEST(BlockManagerProperty, EveryMechanismIsExercised) {
  Totals sum;
  int64_t hash_collisions = 0;
  std::mt19937_64 rng(0xC0FFEE);
  for (int i = 0; i < 40; ++i) {
    Config c;
    c.num_blocks = 8 + i % 24;
    c.block_size = std::vector<int64_t>{1, 2, 4, 16}[i % 4];
    c.hash = i % 4;
    c.alphabet = i % 3 == 0 ? 2 : 4;
    c.seed = rng();
    std::vector<uint64_t> ops(8000 / kScale);
    for (auto& o : ops) o = rng();
    Harness h(c);
    ASSERT_NO_THROW(h.run(ops)) << c;
    const Totals& t = h.totals();
    sum.ops += t.ops;
    sum.allocs += t.allocs;
    sum.hit_tokens += t.hit_tokens;
    sum.evictions += t.evictions;
    sum.copies += t.copies;
    sum.steps += t.steps;
    sum.rejected += t.rejected;
    if (c.hash != 0) hash_collisions += t.collisions;
    else EXPECT_EQ(t.collisions, 0) << "xxhash collided? " << c;
  }
  std::printf("exercised: %lld ops, %lld allocations, %lld hit tokens, %lld evictions, "
              "%lld fork copies, %lld steps, %lld rejected calls, %lld hash collisions\n",
              static_cast<long long>(sum.ops), static_cast<long long>(sum.allocs),
              static_cast<long long>(sum.hit_tokens), static_cast<long long>(sum.evictions),
              static_cast<long long>(sum.copies), static_cast<long long>(sum.steps),
              static_cast<long long>(sum.rejected), static_cast<long long>(hash_collisions));
  EXPECT_GT(sum.hit_tokens, 1000 / kScale);
  EXPECT_GT(sum.evictions, 100 / kScale);
  EXPECT_GT(sum.copies, 100 / kScale);
  EXPECT_GT(sum.rejected, 1000 / kScale);
  EXPECT_GT(hash_collisions, 100 / kScale);
}

class OpCountReporter : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("cache property tests: %lld operations in total\n",
                static_cast<long long>(g_total_ops));
  }
};
const auto* const kReporter = ::testing::AddGlobalTestEnvironment(new OpCountReporter);

}  // namespace
}  // namespace kvattn
