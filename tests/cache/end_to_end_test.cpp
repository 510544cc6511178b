// End to end on the CPU: a small scheduler drives BlockManager and BatchMetadataBuilder over a
// random multi-request workload (shared prefixes, chunked prefill under a token budget,
// interleaved decode, parallel-sampling forks, preemption, CUDA-graph padding), and a two-layer
// Attention stack bound to a KVPool must give, for every token of every request, the output
// of dense float64 attention over that request's own history.
//
// K, V and Q of a token are pseudo-random functions of a fingerprint of the request's whole
// prefix up to that token (as in a real model past layer 0), so KV served from the prefix
// cache is right exactly when it was computed from the same prefix: a wrong hit, a lost fork
// copy or a stray write shows up as an output mismatch.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <deque>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "kvattn/attention/attention.h"
#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/cache/kv_pool.h"

namespace kvattn {
namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t tokens_only_hash(uint64_t, const int32_t* t, int64_t n) {
  return xxhash_block_hash(3, t, n);  // the same block after another prefix collides
}

struct Shape {
  int64_t block_size, num_heads, num_kv_heads, head_dim;
  BlockHashFn hash;
  int32_t alphabet;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << "{block_size " << s.block_size << ", heads " << s.num_heads << "/" << s.num_kv_heads
      << ", head_dim " << s.head_dim << ", hash " << (s.hash ? "tokens-only" : "xxhash")
      << ", alphabet " << s.alphabet << "}";
}

class Workload {
 public:
  Workload(const Shape& s, uint64_t seed)
      : s_(s),
        spec_{kLayers, s.num_kv_heads, s.head_dim, DType::kF32, s.block_size},
        pool_(spec_, kNumBlocks),
        manager_(kNumBlocks, s.block_size, true, s.hash),
        builder_(manager_),
        rng_(seed) {
    float* p = pool_.storage().ptr<float>();  // poison: unwritten KV must never be read
    std::fill(p, p + pool_.storage().numel(), std::nanf(""));
    for (int64_t l = 0; l < kLayers; ++l) {
      layers_.emplace_back(s.num_heads, s.head_dim, 0.0f, s.num_kv_heads);
      layers_.back().bind_cache(pool_.k_cache(l), pool_.v_cache(l));
    }
    for (int f = 0; f < 4; ++f) {
      std::vector<int32_t> fam(static_cast<size_t>(uniform(s.block_size, 6 * s.block_size + 5)));
      for (auto& t : fam) t = token();
      families_.push_back(std::move(fam));
    }
  }

  void run(int steps) {
    for (int i = 0; i < steps; ++i) step();
    while (!running_.empty()) finish(0);
    EXPECT_EQ(manager_.num_free_blocks(), kNumBlocks);
  }

  struct Counts {
    int64_t steps = 0, tokens = 0, mixed = 0, decode = 0, padded = 0, paged_prefill = 0;
    int64_t forks = 0, copies = 0, preemptions = 0, finished = 0;
  } counts;
  double err2 = 0, ref2 = 0, max_abs = 0;
  const BlockManager& manager() const { return manager_; }

 private:
  static constexpr int64_t kLayers = 2;
  static constexpr int64_t kNumBlocks = 40;

  struct Req {
    std::unique_ptr<Sequence> seq;
    int64_t max_new = 0;
  };

  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  int32_t token() { return static_cast<int32_t>(uniform(0, s_.alphabet - 1)); }
  int64_t kv_width() const { return s_.num_kv_heads * s_.head_dim; }
  int64_t q_width() const { return s_.num_heads * s_.head_dim; }

  // Fingerprints of every prefix of seq.
  static std::vector<uint64_t> fingerprints(const Sequence& seq) {
    std::vector<uint64_t> fp(static_cast<size_t>(seq.num_tokens()));
    uint64_t h = 77;
    for (int64_t p = 0; p < seq.num_tokens(); ++p) {
      fp[p] = h = mix64(h ^ (static_cast<uint64_t>(seq.token_ids()[p]) + 1) * 0x100000001B3ull);
    }
    return fp;
  }
  // K, V (kv_width each) or Q (q_width) of the token with fingerprint fp in layer l.
  const std::vector<float>& vec(uint64_t fp, int64_t l, int kind) {
    const uint64_t key = mix64(fp ^ mix64(static_cast<uint64_t>(l * 3 + kind)));
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    std::mt19937_64 r(key);
    std::uniform_real_distribution<float> u(kind == 2 ? -2.0f : -1.0f, kind == 2 ? 2.0f : 1.0f);
    std::vector<float> v(static_cast<size_t>(kind == 2 ? q_width() : kv_width()));
    for (auto& x : v) x = u(r);
    return memo_.emplace(key, std::move(v)).first->second;
  }

  void finish(size_t i) {
    manager_.free(*running_[i].seq);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    ++counts.finished;
  }

  void preempt(size_t i) {
    manager_.free(*running_[i].seq);
    waiting_.push_front(std::move(running_[i]));
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    ++counts.preemptions;
  }

  void step() {
    // New arrivals share a family prefix, cut anywhere (mid-block or on a boundary).
    if (uniform(0, 2) == 0) {
      const auto& fam = families_[static_cast<size_t>(uniform(0, 3))];
      std::vector<int32_t> prompt(fam.begin(), fam.begin() + uniform(1, static_cast<int64_t>(fam.size())));
      for (int64_t i = uniform(0, 2 * s_.block_size); i > 0; --i) prompt.push_back(token());
      waiting_.push_back({std::make_unique<Sequence>(next_id_++, std::move(prompt)), uniform(1, 12)});
    }
    // Running requests whose tokens are all computed sample a token (or finish, or fork).
    for (size_t i = 0; i < running_.size();) {
      Sequence& seq = *running_[i].seq;
      if (seq.num_uncomputed_tokens() > 0) { ++i; continue; }
      if (seq.num_completion_tokens() >= running_[i].max_new) { finish(i); continue; }
      if (uniform(0, 9) == 0 && running_.size() < 12 && manager_.can_fork(seq)) {
        std::vector<BlockCopy> copies;
        Req child{std::make_unique<Sequence>(manager_.fork(seq, next_id_++, copies)),
                  running_[i].max_new + 2};
        pool_.copy_blocks(copies);
        counts.copies += static_cast<int64_t>(copies.size());
        ++counts.forks;
        running_.push_back(std::move(child));
      }
      seq.append_token(token());
      if (!manager_.can_append(seq)) { preempt(i); continue; }
      manager_.append(seq);
      ++i;
    }
    while (!waiting_.empty() && running_.size() < 12 && manager_.can_allocate(*waiting_.front().seq)) {
      manager_.allocate(*waiting_.front().seq);
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    // Schedule under a token budget; long prompts are chunked.
    int64_t budget = 3 * s_.block_size + 5;
    std::vector<ScheduledSequence> batch;
    for (auto& r : running_) {
      const int64_t n = std::min(r.seq->num_uncomputed_tokens(), budget);
      if (n <= 0) continue;
      batch.push_back({r.seq.get(), n});
      budget -= n;
    }
    if (batch.empty()) return;
    BatchBuildOptions opt;
    if (uniform(0, 1)) opt.pad_decode_batch_to = static_cast<int64_t>(batch.size()) + uniform(0, 3);
    const BatchMetadata& md = builder_.build(batch, opt);
    forward_and_check(batch, md);
    for (const auto& b : batch) {
      for (auto& r : running_) {
        if (r.seq.get() == b.seq) manager_.mark_computed(*r.seq, b.num_new_tokens);
      }
    }
  }

  void forward_and_check(const std::vector<ScheduledSequence>& batch, const BatchMetadata& md) {
    ++counts.steps;
    counts.tokens += md.num_scheduled_tokens;
    bool has_decode_row = false, has_prefill_row = false;
    for (const auto& b : batch) {
      (b.num_new_tokens == 1 && b.seq->num_computed_tokens() > 0 ? has_decode_row : has_prefill_row) = true;
    }
    counts.mixed += md.ctx.phase == Phase::kPrefill && has_decode_row && has_prefill_row;
    counts.decode += md.ctx.phase == Phase::kDecode;
    counts.padded += md.num_seqs > md.num_scheduled_seqs;
    counts.paged_prefill += md.reads_kv_from_cache;

    const int64_t T = md.num_tokens;
    std::vector<std::vector<uint64_t>> fps;
    for (const auto& b : batch) fps.push_back(fingerprints(*b.seq));
    for (int64_t l = 0; l < kLayers; ++l) {
      Tensor q = Tensor::empty({T, q_width()}, DType::kF32);
      Tensor k = Tensor::empty({T, kv_width()}, DType::kF32);
      Tensor v = Tensor::empty({T, kv_width()}, DType::kF32);
      std::normal_distribution<float> garbage(0.0f, 3.0f);  // padding rows
      for (int64_t i = 0; i < T * q_width(); ++i) q.ptr<float>()[i] = garbage(rng_);
      for (int64_t i = 0; i < T * kv_width(); ++i) k.ptr<float>()[i] = garbage(rng_);
      for (int64_t i = 0; i < T * kv_width(); ++i) v.ptr<float>()[i] = garbage(rng_);
      int64_t t = 0;
      for (size_t r = 0; r < batch.size(); ++r) {
        const int64_t c = batch[r].seq->num_computed_tokens();
        for (int64_t p = c; p < c + batch[r].num_new_tokens; ++p, ++t) {
          std::copy_n(vec(fps[r][p], l, 2).data(), q_width(), q.ptr<float>() + t * q_width());
          std::copy_n(vec(fps[r][p], l, 0).data(), kv_width(), k.ptr<float>() + t * kv_width());
          std::copy_n(vec(fps[r][p], l, 1).data(), kv_width(), v.ptr<float>() + t * kv_width());
        }
      }
      Tensor out = layers_[l].forward(q, k, v, md.ctx);
      t = 0;
      for (size_t r = 0; r < batch.size(); ++r) {
        const int64_t c = batch[r].seq->num_computed_tokens();
        for (int64_t p = c; p < c + batch[r].num_new_tokens; ++p, ++t) {
          compare_row(fps[r], p, l, out.ptr<float>() + t * q_width());
        }
      }
      for (; t < T; ++t) {  // padding rows attend to nothing: zeros
        for (int64_t i = 0; i < q_width(); ++i) ASSERT_EQ(out.ptr<float>()[t * q_width() + i], 0.0f);
      }
    }
  }

  // Dense float64 causal attention of token p over the request's tokens [0, p].
  void compare_row(const std::vector<uint64_t>& fp, int64_t p, int64_t l, const float* out) {
    const int64_t D = s_.head_dim, group = s_.num_heads / s_.num_kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const auto& q = vec(fp[p], l, 2);
    std::vector<const float*> ks, vs;
    for (int64_t j = 0; j <= p; ++j) {
      ks.push_back(vec(fp[j], l, 0).data());
      vs.push_back(vec(fp[j], l, 1).data());
    }
    std::vector<double> score(static_cast<size_t>(p + 1));
    for (int64_t h = 0; h < s_.num_heads; ++h) {
      const int64_t kh = h / group;
      double mx = -INFINITY;
      for (int64_t j = 0; j <= p; ++j) {
        const float* k = ks[j];
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[h * D + d]) * k[kh * D + d];
        score[j] = dot * scale;
        mx = std::max(mx, score[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= p; ++j) sum += (score[j] = std::exp(score[j] - mx));
      for (int64_t d = 0; d < D; ++d) {
        double ref = 0;
        for (int64_t j = 0; j <= p; ++j) ref += score[j] * vs[j][kh * D + d];
        ref /= sum;
        const double got = out[h * D + d];
        const double diff = std::isnan(got) ? INFINITY : got - ref;
        err2 += diff * diff;
        ref2 += ref * ref;
        max_abs = std::max(max_abs, std::abs(diff));
      }
    }
  }

  Shape s_;
  KVCacheSpec spec_;
  KVPool pool_;
  BlockManager manager_;
  BatchMetadataBuilder builder_;
  std::vector<Attention> layers_;
  std::mt19937_64 rng_;
  std::vector<std::vector<int32_t>> families_;
  std::deque<Req> waiting_;
  std::vector<Req> running_;
  std::unordered_map<uint64_t, std::vector<float>> memo_;
  SeqId next_id_ = 0;
};

class EndToEnd : public ::testing::TestWithParam<Shape> {};

TEST_P(EndToEnd, PagedAttentionMatchesDenseAttentionPerRequest) {
  const Shape s = GetParam();
  // Steps here are tens of tokens: on a busy 2-core CI box, OpenMP fork/join costs far more
  // than the math. The threaded kernel paths are the kernel tests' business.
  omp_set_num_threads(1);
  Workload w(s, 0xE2E0 + static_cast<uint64_t>(s.block_size * 131 + s.num_kv_heads));
  w.run(400);
  const double rel = std::sqrt(w.err2 / w.ref2);
  const auto& c = w.counts;
  const BlockManagerStats st = w.manager().stats();
  std::printf("block_size %lld, heads %lld/%lld, head_dim %lld: %lld steps, %lld tokens "
              "(%lld mixed, %lld decode, %lld padded, %lld paged-prefill steps), %lld finished, "
              "%lld forks (%lld copies), %lld preemptions, hit rate %.3f, %lld collisions; "
              "rel L2 %.2e, max abs %.2e\n",
              (long long)s.block_size, (long long)s.num_heads, (long long)s.num_kv_heads,
              (long long)s.head_dim, (long long)c.steps, (long long)c.tokens, (long long)c.mixed,
              (long long)c.decode, (long long)c.padded, (long long)c.paged_prefill,
              (long long)c.finished, (long long)c.forks, (long long)c.copies,
              (long long)c.preemptions, st.hit_rate(), (long long)st.num_hash_collisions, rel,
              w.max_abs);
  EXPECT_LT(rel, 1e-5);
  EXPECT_LT(w.max_abs, 1e-4);
  // The workload really exercised what it claims to.
  EXPECT_GT(st.hit_tokens, 0);
  EXPECT_GT(c.mixed, 0);
  EXPECT_GT(c.decode, 0);
  EXPECT_GT(c.padded, 0);
  EXPECT_GT(c.paged_prefill, 0);
  EXPECT_GT(c.forks, 0);
  EXPECT_GT(c.finished, 10);
}

INSTANTIATE_TEST_SUITE_P(
    Cache, EndToEnd,
    ::testing::Values(Shape{4, 4, 2, 16, nullptr, 8}, Shape{16, 4, 1, 32, nullptr, 50000},
                      Shape{1, 2, 2, 8, nullptr, 6}, Shape{3, 8, 4, 16, &tokens_only_hash, 2},
                      Shape{2, 4, 4, 8, &tokens_only_hash, 3}));

}  // namespace
}  // namespace kvattn
