// The GPU model's serving path: padded decode steps replayed from CUDA graphs, device
// sampling, fork's batched KV block copy, and KV memory planning. A random Qwen3-shaped model
// (head_dim 128, built in memory) is driven through the BlockManager and the metadata builder
// the way the engine drives it (unpadded metadata; the model pads). Exits 77 without a CUDA
// device (or in a build without the CUDA backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/cache/kv_pool.h"
#include "kvattn/engine/model.h"
#include "engine_test_util.h"
#include "kvattn/engine/sampler.h"
#include "kvattn/kernels/device_faults.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "engine/model/cuda_model.h"
#include "engine/model/cuda_sampling.h"
#include "engine/model/kv_copy.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

// ---- a random Qwen3-shaped model ----

ModelConfig tiny_qwen3(int64_t vocab = 4096) {
  ModelConfig c;
  c.architecture = "qwen3";
  c.vocab_size = vocab;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.max_position_embeddings = 4096;
  c.qk_norm = true;
  return c;
}

// Deterministic in `seed`: equal seeds give equal weights (each Model consumes its own copy).
// Projections ~ N(0, 1/fan_in), norms ~ 1 + 0.1 N(0, 1), the lm_head's rows with log-normal
// norms so the top logits stand apart by more than a bf16 step.
ModelWeights random_weights(const ModelConfig& c, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ModelWeights w;
  w.config = c;
  auto mat = [&](int64_t rows, int64_t cols, float scale) {
    Tensor t = Tensor::empty({rows, cols}, DType::kF32);
    float* p = t.ptr<float>();
    for (int64_t i = 0; i < rows * cols; ++i) p[i] = nd(rng) * scale;
    return t;
  };
  auto norm = [&](int64_t n) {
    Tensor t = Tensor::empty({n}, DType::kF32);
    for (int64_t i = 0; i < n; ++i) t.ptr<float>()[i] = 1.0f + 0.1f * nd(rng);
    return t;
  };
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  w.tensors["model.embed_tokens.weight"] = mat(c.vocab_size, H, 1.0f);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w.tensors[p + "input_layernorm.weight"] = norm(H);
    w.tensors[p + "post_attention_layernorm.weight"] = norm(H);
    w.tensors[p + "self_attn.q_proj.weight"] = mat(c.num_heads * D, H, 1.0f / std::sqrt(float(H)));
    w.tensors[p + "self_attn.k_proj.weight"] = mat(c.num_kv_heads * D, H, 1.0f / std::sqrt(float(H)));
    w.tensors[p + "self_attn.v_proj.weight"] = mat(c.num_kv_heads * D, H, 1.0f / std::sqrt(float(H)));
    w.tensors[p + "self_attn.o_proj.weight"] = mat(H, c.num_heads * D, 1.0f / std::sqrt(float(c.num_heads * D)));
    w.tensors[p + "self_attn.q_norm.weight"] = norm(D);
    w.tensors[p + "self_attn.k_norm.weight"] = norm(D);
    w.tensors[p + "mlp.gate_proj.weight"] = mat(I, H, 1.0f / std::sqrt(float(H)));
    w.tensors[p + "mlp.up_proj.weight"] = mat(I, H, 1.0f / std::sqrt(float(H)));
    w.tensors[p + "mlp.down_proj.weight"] = mat(H, I, 1.0f / std::sqrt(float(I)));
  }
  w.tensors["model.norm.weight"] = norm(H);
  Tensor head = mat(c.vocab_size, H, 1.0f / std::sqrt(float(H)));
  for (int64_t v = 0; v < c.vocab_size; ++v) {
    const float s = std::exp(0.7f * nd(rng));
    for (int64_t i = 0; i < H; ++i) head.ptr<float>()[v * H + i] *= s;
  }
  w.tensors["lm_head.weight"] = std::move(head);
  return w;
}

std::unique_ptr<Model> make_model(bool graphs, int64_t max_decode_batch = 256, uint64_t seed = 1) {
  ModelOptions o;
  o.cuda_graphs = graphs;
  o.max_decode_batch = max_decode_batch;
  return Model::create(random_weights(tiny_qwen3(), seed), Device::cuda(0), o);
}

std::vector<int32_t> host_argmax(const std::vector<float>& logits, int64_t vocab) {
  std::vector<int32_t> out(logits.size() / vocab);
  for (size_t r = 0; r < out.size(); ++r) {
    out[r] = argmax(std::span<const float>(logits.data() + r * vocab, vocab));
  }
  return out;
}

// ---- driving the models like the engine ----

struct Driver {
  BlockManager bm;
  BatchMetadataBuilder builder;
  std::vector<Sequence> seqs;
  int64_t step = 0;
  Driver(int64_t num_blocks, int64_t block_size) : bm(num_blocks, block_size, false), builder(bm) {}

  void add(int n, uint64_t seed, int min_len, int max_len, int64_t vocab) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> len(min_len, max_len);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
    seqs.reserve(seqs.size() + n);
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> p(len(rng));
      for (auto& t : p) t = tok(rng);
      seqs.emplace_back(static_cast<SeqId>(seqs.size()), std::move(p));
      bm.allocate(seqs.back());
    }
  }

  // The next step over every sequence: whatever is uncomputed (prefill) or one token (decode).
  // Fills rows with the last row of each sequence.
  const BatchMetadata& build(std::vector<int32_t>& rows) {
    std::vector<ScheduledSequence> batch;
    rows.clear();
    int64_t row = 0;
    for (auto& s : seqs) {
      const int64_t n = s.num_uncomputed_tokens();
      batch.push_back({&s, n});
      row += n;
      rows.push_back(static_cast<int32_t>(row - 1));
    }
    return builder.build(batch);
  }

  void advance(const BatchMetadata& meta, const std::vector<int32_t>& next) {
    (void)meta;
    for (size_t i = 0; i < seqs.size(); ++i) {
      bm.mark_computed(seqs[i], seqs[i].num_uncomputed_tokens());
      seqs[i].append_token(next[i]);
      bm.append(seqs[i]);
    }
    ++step;
  }

  ~Driver() {
    for (auto& s : seqs) bm.free(s);
  }
};

ModelInput input_of(const BatchMetadata& meta, const std::vector<int32_t>& rows) {
  ModelInput in;
  in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
  in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
  in.logit_rows = rows;
  in.ctx = &meta.ctx;
  return in;
}

std::vector<RowSampling> greedy_rows(size_t n) { return std::vector<RowSampling>(n); }

std::vector<RowSampling> random_rows(size_t n, int64_t step) {
  std::vector<RowSampling> r(n);
  for (size_t i = 0; i < n; ++i) {
    r[i].temperature = 0.8f;
    r[i].top_k = i % 3 == 0 ? 40 : 0;
    r[i].top_p = i % 2 == 0 ? 0.9f : 1.0f;
    r[i].min_p = i % 5 == 0 ? 0.05f : 0.0f;
    r[i].seed = 1234;
    r[i].stream = i;
    r[i].step = static_cast<uint64_t>(step);
  }
  return r;
}

// The model steps one run_step() takes: forward, the greedy and the random draw, and the
// random draw again with rows copied back.
constexpr int64_t kStepsPerRunStep = 4;

struct StepResult {
  std::vector<float> logits;
  std::vector<int32_t> greedy, random;
};

StepResult run_step(Model& m, const ModelInput& in, int64_t step) {
  const int64_t V = m.config().vocab_size;
  const size_t R = in.logit_rows.size();
  StepResult r;
  r.logits.assign(R * V, NAN);
  m.forward(in, r.logits);
  r.greedy.assign(R, -1);
  m.forward_sample(in, greedy_rows(R), r.greedy);
  r.random.assign(R, -1);
  const auto rows = random_rows(R, step);
  m.forward_sample(in, rows, r.random);
  // copy_rows (SamplingParams::logprobs, penalties): the rows named come back too, the same
  // bits forward() returns, general and fixed (graph) steps alike; here every other row.
  std::vector<int32_t> copy_rows;
  for (size_t k = step % 2; k < R; k += 2) copy_rows.push_back(static_cast<int32_t>(k));
  std::vector<float> sampled_from(copy_rows.size() * V, NAN);
  std::vector<int32_t> again(R, -1);
  m.forward_sample(in, rows, again, copy_rows, sampled_from);
  EXPECT_EQ(again, r.random) << "copying rows changed the draws at step " << step;
  for (size_t j = 0; j < copy_rows.size(); ++j) {
    EXPECT_EQ(std::memcmp(sampled_from.data() + j * V, r.logits.data() + copy_rows[j] * V,
                          V * sizeof(float)),
              0)
        << "forward_sample's row " << copy_rows[j] << " differs from forward()'s at step " << step;
  }
  return r;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    err = std::max(err, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return err / scale;
}

// (a) + (b): greedy device tokens == host argmax of forward()'s logits; graphs on and off
// give bit-identical logits and identical greedy and sampled tokens, at batch sizes that
// need padding; the unpadded general path (max_decode_batch 0) stays within bf16 noise.
class DecodeBatch : public ::testing::TestWithParam<int> {};

TEST_P(DecodeBatch, GraphsOnAndOffAreBitIdenticalAndGreedyIsArgmax) {
  const int n = GetParam();
  auto on = make_model(true);
  auto off = make_model(false);
  auto general = make_model(true, /*max_decode_batch=*/0);
  const int64_t V = on->config().vocab_size, bs = 16, num_blocks = 4096;
  for (Model* m : {on.get(), off.get(), general.get()}) m->allocate_kv_cache(num_blocks, bs);
  Driver d(num_blocks, bs);
  d.add(n, 100 + n, 1, 300, V);
  read_device_faults(Device::cuda(0), true);
  int64_t decode_steps = 0;
  size_t same_as_general = 0, total = 0;
  for (int s = 0; s < 7; ++s) {
    std::vector<int32_t> rows;
    const BatchMetadata& meta = d.build(rows);
    const bool decode = meta.ctx.phase == Phase::kDecode;
    decode_steps += decode ? 1 : 0;
    SCOPED_TRACE("step " + std::to_string(s) + (decode ? " (decode)" : " (prefill)"));
    const ModelInput in = input_of(meta, rows);
    const StepResult a = run_step(*on, in, d.step);
    const StepResult b = run_step(*off, in, d.step);
    const StepResult g = run_step(*general, in, d.step);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0)
        << "graphs on/off logits differ (max rel " << max_rel_diff(a.logits, b.logits) << ")";
    const auto am = host_argmax(a.logits, V);
    EXPECT_EQ(a.greedy, am) << "device greedy != host argmax (graphs on)";
    EXPECT_EQ(b.greedy, host_argmax(b.logits, V)) << "device greedy != host argmax (graphs off)";
    EXPECT_EQ(a.greedy, b.greedy);
    EXPECT_EQ(a.random, b.random) << "sampled tokens differ between graphs on and off";
    EXPECT_EQ(g.greedy, host_argmax(g.logits, V)) << "device greedy != host argmax (general path)";
    for (int32_t t : a.random) EXPECT_TRUE(t >= 0 && t < V);
    const double rel = max_rel_diff(a.logits, g.logits);
    EXPECT_LT(rel, 3e-2) << "padded fixed-buffer logits vs the unpadded general path";
    for (size_t i = 0; i < am.size(); ++i) same_as_general += am[i] == g.greedy[i];
    total += am.size();
    d.advance(meta, am);
  }
  std::printf("batch %d: %zu of %zu greedy tokens equal the unpadded path's\n", n,
              same_as_general, total);
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
  const CudaModelStats so = cuda_model_stats(*on), sf = cuda_model_stats(*off),
                       sg = cuda_model_stats(*general);
  EXPECT_EQ(so.graph_replays, kStepsPerRunStep * decode_steps);
  EXPECT_EQ(so.fixed_eager_steps, 0);
  EXPECT_GE(so.graph_captures, 1);
  EXPECT_EQ(sf.graph_captures, 0);
  EXPECT_EQ(sf.fixed_eager_steps, kStepsPerRunStep * decode_steps);
  EXPECT_EQ(sg.graph_replays + sg.fixed_eager_steps, 0);
  EXPECT_EQ(so.decode_table_width, 4096 / bs);  // max_position_embeddings / block_size
}

INSTANTIATE_TEST_SUITE_P(Sizes, DecodeBatch, ::testing::Values(1, 3, 17, 100));

// Decode batches above max_decode_batch run unpadded and eagerly in both modes.
TEST(CudaServing, DecodeBeyondTheLadderRunsTheGeneralPath) {
  auto on = make_model(true, 64);
  auto off = make_model(false, 64);
  const int64_t V = on->config().vocab_size;
  for (Model* m : {on.get(), off.get()}) m->allocate_kv_cache(2048, 16);
  Driver d(2048, 16);
  d.add(100, 7, 1, 100, V);
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> rows;
    const BatchMetadata& meta = d.build(rows);
    const ModelInput in = input_of(meta, rows);
    const StepResult a = run_step(*on, in, d.step);
    const StepResult b = run_step(*off, in, d.step);
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0);
    EXPECT_EQ(a.greedy, host_argmax(a.logits, V));
    EXPECT_EQ(a.random, b.random);
    d.advance(meta, a.greedy);
  }
  EXPECT_EQ(cuda_model_stats(*on).graph_replays, 0);
  EXPECT_EQ(cuda_model_stats(*on).general_steps, 3 * kStepsPerRunStep);
}

// Logit rows in any order, fewer than the sequences, on a padded decode step.
TEST(CudaServing, DecodeWithPermutedAndPartialLogitRows) {
  auto on = make_model(true);
  auto off = make_model(false);
  const int64_t V = on->config().vocab_size;
  for (Model* m : {on.get(), off.get()}) m->allocate_kv_cache(512, 16);
  Driver d(512, 16);
  d.add(5, 3, 10, 40, V);
  std::vector<int32_t> rows;
  {
    const BatchMetadata& meta = d.build(rows);
    const ModelInput in = input_of(meta, rows);
    std::vector<int32_t> next(rows.size());
    on->forward_sample(in, greedy_rows(rows.size()), next);
    off->forward_sample(in, greedy_rows(rows.size()), next);
    d.advance(meta, next);
  }
  const BatchMetadata& meta = d.build(rows);
  ASSERT_EQ(meta.ctx.phase, Phase::kDecode);
  std::vector<float> all(5 * V);
  on->forward(input_of(meta, rows), all);
  const std::vector<int32_t> pick = {3, 0, 3};
  std::vector<float> some(pick.size() * V), some_off(pick.size() * V);
  on->forward(input_of(meta, pick), some);
  off->forward(input_of(meta, pick), some_off);
  for (size_t r = 0; r < pick.size(); ++r) {
    EXPECT_EQ(std::memcmp(&some[r * V], &all[pick[r] * V], V * sizeof(float)), 0) << r;
  }
  EXPECT_EQ(std::memcmp(some.data(), some_off.data(), some.size() * sizeof(float)), 0);
  std::vector<int32_t> toks(pick.size());
  on->forward_sample(input_of(meta, pick), greedy_rows(pick.size()), toks);
  EXPECT_EQ(toks, host_argmax(some, V));
}

// ---- (c) the sampler against the host Sampler's distribution ----

std::vector<float> quantized_logits(int64_t vocab, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> l(vocab);
  for (auto& x : l) x = std::clamp(std::round(nd(rng) * 8.0f) / 8.0f, -31.0f, 31.0f);  // bf16-exact, many ties
  return l;
}

std::vector<RowSampling> draws(const SamplingParams& sp, int64_t n, uint64_t seed, uint64_t stream,
                               uint64_t first_step = 0) {
  std::vector<RowSampling> rows(n);
  for (int64_t i = 0; i < n; ++i) {
    rows[i] = RowSampling{sp.temperature, sp.top_k, sp.top_p, sp.min_p, seed, stream,
                          first_step + static_cast<uint64_t>(i)};
  }
  return rows;
}

// The filters' boundaries must not sit within rounding of a token (host exp vs device expf,
// double vs 40-bit fixed-point sums), or the test would check rounding, not semantics.
void check_margins(const std::vector<float>& l, const SamplingParams& sp) {
  if (sp.temperature <= 0.0f) return;
  const float m = *std::max_element(l.begin(), l.end());
  std::vector<double> q(l.size());
  for (size_t i = 0; i < l.size(); ++i) q[i] = std::exp((l[i] - m) * (1.0f / sp.temperature));
  if (sp.min_p > 0.0f) {
    for (double x : q) ASSERT_GT(std::abs(x - sp.min_p), 1e-5) << "a token sits on the min_p cut";
  }
  if (sp.top_p < 1.0f) {
    std::vector<size_t> ord(l.size());
    for (size_t i = 0; i < ord.size(); ++i) ord[i] = i;
    std::sort(ord.begin(), ord.end(), [&](size_t a, size_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    if (sp.top_k > 0 && sp.top_k < static_cast<int>(ord.size())) ord.resize(sp.top_k);
    double total = 0;
    for (size_t i : ord) total += q[i];
    double cum = 0;
    for (size_t i : ord) {
      cum += q[i];
      ASSERT_GT(std::abs(cum - sp.top_p * total), 1e-7 * total) << "a cumulative mass sits on top_p";
    }
  }
}

void check_distribution(const std::vector<float>& logits, const SamplingParams& sp, int64_t n,
                        const std::string& what) {
  SCOPED_TRACE(what);
  check_margins(logits, sp);
  const auto V = static_cast<int64_t>(logits.size());
  Sampler host(sp, 0);
  const std::vector<float> p = host.probabilities(logits);
  const auto toks = cuda_model::sample_on_device(0, logits, V, draws(sp, n, 99, 3));
  std::vector<int64_t> count(V, 0);
  for (int32_t t : toks) {
    ASSERT_TRUE(t >= 0 && t < V) << t;
    ++count[t];
  }
  double chi2 = 0, rest_exp = 0, rest_obs = 0;
  int dof = -1;
  double worst_sigma = 0;
  for (int64_t j = 0; j < V; ++j) {
    if (p[j] == 0.0f) {
      EXPECT_EQ(count[j], 0) << "token " << j << " is masked on the host but was drawn";
      continue;
    }
    const double e = n * double(p[j]);
    const double sigma = std::sqrt(e * (1.0 - p[j])) + 1e-9;
    if (e >= 20) {  // the normal approximation holds
      worst_sigma = std::max(worst_sigma, std::abs(count[j] - e) / sigma);
    } else {  // a loose Poisson tail bound
      EXPECT_LE(count[j], e + 10 * std::sqrt(e) + 10) << "token " << j << " expected " << e;
    }
    if (e >= 5) {
      chi2 += (count[j] - e) * (count[j] - e) / e;
      ++dof;
    } else {
      rest_exp += e;
      rest_obs += count[j];
    }
  }
  if (rest_exp >= 5) {
    chi2 += (rest_obs - rest_exp) * (rest_obs - rest_exp) / rest_exp;
    ++dof;
  }
  dof = std::max(dof, 1);
  std::printf("%s: %lld draws, chi2 %.1f on %d dof, worst token %.2f sigma\n", what.c_str(),
              static_cast<long long>(n), chi2, dof, worst_sigma);
  EXPECT_LT(chi2, dof + 7.0 * std::sqrt(2.0 * dof)) << "chi-square far above its dof";
  EXPECT_LT(worst_sigma, 6.0) << "one token's frequency is off by more than 6 sigma";
}

SamplingParams sp_of(float t, int k, float p, float minp) {
  SamplingParams sp;
  sp.temperature = t;
  sp.top_k = k;
  sp.top_p = p;
  sp.min_p = minp;
  return sp;
}

TEST(CudaSampling, DistributionMatchesTheHostSampler) {
  const auto l = quantized_logits(1000, 5, 2.0f);
  const int64_t N = 200000;
  check_distribution(l, sp_of(1.0f, 0, 1.0f, 0.0f), N, "temperature 1");
  check_distribution(l, sp_of(0.7f, 50, 1.0f, 0.0f), N, "top_k 50 (ties at the boundary)");
  check_distribution(l, sp_of(1.3f, 0, 0.8f, 0.0f), N, "top_p 0.8");
  check_distribution(l, sp_of(0.9f, 0, 1.0f, 0.05f), N, "min_p 0.05");
  check_distribution(l, sp_of(0.8f, 40, 0.9f, 0.02f), N, "top_k 40 + top_p 0.9 + min_p 0.02");
  const auto odd = quantized_logits(997, 6, 1.0f);  // scalar loads
  check_distribution(odd, sp_of(2.0f, 0, 0.5f, 0.0f), N, "vocab 997, top_p 0.5");
  check_distribution(odd, sp_of(0.5f, 7, 1.0f, 0.0f), N, "vocab 997, top_k 7");
  const std::vector<float> flat(997, 1.5f);
  check_distribution(flat, sp_of(1.0f, 3, 1.0f, 0.0f), N, "equal logits, top_k 3: ids 0-2");
  check_distribution(flat, sp_of(1.0f, 0, 0.01f, 0.0f), N, "equal logits, top_p 0.01: ids 0-9");
}

// A Qwen3-sized vocabulary: every draw lies in the host's nucleus, and the top token's
// frequency matches.
TEST(CudaSampling, LargeVocabularyStaysInTheNucleus) {
  const int64_t V = 151936, N = 8192;
  const auto l = quantized_logits(V, 11, 3.0f);
  for (const auto& sp : {sp_of(0.6f, 0, 0.95f, 0.0f), sp_of(1.0f, 20, 1.0f, 0.0f),
                         sp_of(0.7f, 100, 0.9f, 0.01f)}) {
    check_margins(l, sp);
    const std::vector<float> p = Sampler(sp, 0).probabilities(l);
    const auto toks = cuda_model::sample_on_device(0, l, V, draws(sp, N, 5, 1));
    const auto top = std::max_element(p.begin(), p.end()) - p.begin();
    int64_t hits = 0;
    for (int32_t t : toks) {
      ASSERT_TRUE(t >= 0 && t < V);
      EXPECT_GT(p[t], 0.0f) << "token " << t << " is outside the host's filtered set";
      hits += t == top;
    }
    const double e = N * double(p[top]);
    EXPECT_LT(std::abs(hits - e), 6 * std::sqrt(e * (1 - p[top])) + 1) << "top token frequency";
  }
}

TEST(CudaSampling, GreedyIsTheHostArgmaxIncludingTiesAndNaN) {
  const int64_t V = 1000;
  std::vector<std::vector<float>> cases;
  cases.push_back(quantized_logits(V, 1, 1.0f));  // many ties
  auto c = quantized_logits(V, 2, 1.0f);
  c[10] = c[500] = c[999] = 40.0f;
  cases.push_back(c);
  c[0] = c[5] = NAN;
  cases.push_back(c);
  cases.push_back(std::vector<float>(V, NAN));
  cases.push_back(std::vector<float>(V, -INFINITY));
  auto d = std::vector<float>(V, -INFINITY);
  d[0] = NAN;
  d[3] = -1.0f;
  cases.push_back(d);
  cases.push_back(std::vector<float>(V, 0.0f));
  std::vector<float> all;
  for (const auto& x : cases) all.insert(all.end(), x.begin(), x.end());
  std::vector<RowSampling> greedy(cases.size());
  greedy[1].temperature = 0.7f;
  greedy[1].top_k = 1;  // also greedy
  const auto toks = cuda_model::sample_on_device(0, all, V, greedy);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(toks[i], argmax(cases[i])) << "case " << i;
  // Sampling a row without a finite maximum falls back to the argmax.
  std::vector<float> inf = quantized_logits(V, 3, 1.0f);
  inf[7] = INFINITY;
  std::vector<float> rows2 = std::vector<float>(V, NAN);
  rows2.insert(rows2.end(), inf.begin(), inf.end());
  const auto t2 = cuda_model::sample_on_device(0, rows2, V, draws(sp_of(1.0f, 0, 1.0f, 0.0f), 2, 1, 1));
  EXPECT_EQ(t2[0], 0);
  EXPECT_EQ(t2[1], 7);
}

// Small batches split each row over several CTAs (cuda_sampling.cu, "split form"), with the
// top-k / top-p selects by slice 0 alone or by a thread block cluster: the tokens must be
// those of one CTA per row, bit for bit, for every filter, for rows with NaN, infinities and
// ties, for odd vocabularies (scalar loads) and for every slice count.
TEST(CudaSampling, SplitFormDrawsTheOneCtaTokens) {
  // KVATTN_GPU_TEST_QUICK (compute-sanitizer runs): one vocabulary, two batch sizes.
  const char* q = std::getenv("KVATTN_GPU_TEST_QUICK");
  const bool quick = q != nullptr && q[0] != '\0' && q[0] != '0';
  const std::vector<int64_t> vocabs =
      quick ? std::vector<int64_t>{151936} : std::vector<int64_t>{151936, 50001, 8195};
  const std::vector<int64_t> batches =
      quick ? std::vector<int64_t>{1, 17} : std::vector<int64_t>{1, 3, 17, 64};
  for (const int64_t V : vocabs) {
    for (const int64_t rows : batches) {
      SCOPED_TRACE(testing::Message() << "vocab " << V << ", rows " << rows);
      const int slices = cuda_model::sample_slices(rows, V);
      std::mt19937_64 rng(static_cast<uint64_t>(V * 131 + rows));
      std::vector<float> all;
      for (int64_t r = 0; r < rows; ++r) {
        auto l = quantized_logits(V, rng(), 1.0f + static_cast<float>(r % 4));
        switch (r % 7) {
          case 1: l[static_cast<size_t>(rng() % V)] = NAN; l[0] = NAN; break;
          case 2: l[static_cast<size_t>(V - 1)] = 40.0f; l[static_cast<size_t>(V / 2)] = 40.0f; break;
          case 3: std::fill(l.begin(), l.end(), -INFINITY); l[static_cast<size_t>(V - 2)] = -3.0f; break;
          case 4: l[static_cast<size_t>(rng() % V)] = INFINITY; break;
          case 5: std::fill(l.begin(), l.end(), NAN); break;
          default: break;
        }
        all.insert(all.end(), l.begin(), l.end());
      }
      for (const auto& sp : {sp_of(0.0f, 0, 1.0f, 0.0f), sp_of(0.6f, 0, 1.0f, 0.0f),
                             sp_of(1.0f, 0, 1.0f, 0.05f), sp_of(0.8f, 40, 1.0f, 0.0f),
                             sp_of(0.7f, 0, 0.9f, 0.0f), sp_of(0.9f, 100, 0.95f, 0.01f)}) {
        for (uint64_t step : quick ? std::vector<uint64_t>{7} : std::vector<uint64_t>{0, 7, 1000}) {
          const auto rs = draws(sp, rows, 77, 5, step);
          const auto one = cuda_model::sample_on_device(0, all, V, rs, 1);
          const auto split = cuda_model::sample_on_device(0, all, V, rs, 64, 0);
          // The selects in thread block clusters (sm_90+; elsewhere the same as `split`).
          const auto clustered = cuda_model::sample_on_device(0, all, V, rs, 64, 1);
          ASSERT_EQ(split, one) << "temperature " << sp.temperature << ", top_k " << sp.top_k
                                << ", top_p " << sp.top_p << ", min_p " << sp.min_p << ", step "
                                << step << ", " << slices << " slices";
          ASSERT_EQ(clustered, one) << "clusters: temperature " << sp.temperature << ", top_k "
                                    << sp.top_k << ", top_p " << sp.top_p << ", min_p "
                                    << sp.min_p << ", step " << step << ", " << slices
                                    << " slices";
        }
      }
      if (V == 151936 && rows <= 64) {
        EXPECT_GE(slices, 2) << "a Qwen3-sized vocabulary at " << rows << " rows is not split";
      }
    }
  }
}

TEST(CudaSampling, DrawsDependOnSeedStreamAndStepOnly) {
  const auto l = quantized_logits(1000, 8, 1.0f);
  const int64_t V = 1000, N = 4096;
  const SamplingParams sp = sp_of(1.0f, 50, 0.95f, 0.0f);
  const auto a = cuda_model::sample_on_device(0, l, V, draws(sp, N, 42, 9));
  const auto b = cuda_model::sample_on_device(0, l, V, draws(sp, N, 42, 9));
  EXPECT_EQ(a, b) << "same (seed, stream, step) must give the same token";
  for (int64_t i : {0, 5, 77, 1234, 4095}) {  // alone, or at another row of another batch
    const auto one = cuda_model::sample_on_device(0, l, V, draws(sp, 1, 42, 9, i));
    EXPECT_EQ(one[0], a[i]) << "step " << i;
    const auto shifted = cuda_model::sample_on_device(0, l, V, draws(sp, 3, 42, 9, i));
    EXPECT_EQ(shifted[0], a[i]) << "step " << i;
  }
  const auto other_stream = cuda_model::sample_on_device(0, l, V, draws(sp, N, 42, 10));
  const auto other_seed = cuda_model::sample_on_device(0, l, V, draws(sp, N, 43, 9));
  int64_t same_stream = 0, same_seed = 0;
  for (int64_t i = 0; i < N; ++i) {
    same_stream += a[i] == other_stream[i];
    same_seed += a[i] == other_seed[i];
  }
  EXPECT_LT(same_stream, N / 2) << "streams must draw differently";
  EXPECT_LT(same_seed, N / 2) << "seeds must draw differently";
  std::vector<RowSampling> bad = draws(sp, 1, 0, 0);
  bad[0].top_p = 0.0f;
  EXPECT_THROW(cuda_model::sample_on_device(0, l, V, bad), Error);
}

// ---- (d) fork's KV block copy ----

std::vector<uint8_t> download(const KVPool& pool) {
  std::vector<uint8_t> h(pool.storage().nbytes());
  EXPECT_EQ(cudaMemcpy(h.data(), pool.storage().data(), h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(CudaKVCopy, BatchedCopyIsBitExactAndGuarded) {
  for (auto spec : {KVCacheSpec{3, 2, 128, DType::kBF16, 16}, KVCacheSpec{2, 1, 2, DType::kBF16, 1},
                    KVCacheSpec{4, 8, 128, DType::kBF16, 256}}) {
    const int64_t nb = 24;
    SCOPED_TRACE("block_size " + std::to_string(spec.block_size));
    KVPool gpu(spec, nb, Device::cuda(0));
    KVPool cpu(spec, nb, Device::cpu());
    std::mt19937_64 rng(spec.block_size);
    auto* c = static_cast<uint8_t*>(cpu.storage().data());
    for (int64_t i = 0; i < cpu.storage().nbytes(); ++i) c[i] = static_cast<uint8_t>(rng());
    ASSERT_EQ(cudaMemcpy(gpu.storage().data(), c, cpu.storage().nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    cuda_model::KVBlockCopier copier;
    const std::vector<BlockCopy> copies = {{1, 5}, {1, 6}, {7, 2}, {3, 4}, {23, 0}, {8, 22}};
    cpu.copy_blocks(copies);
    copier.run(gpu, copies, nullptr);
    // A second batch right away (the staging is reused).
    const std::vector<BlockCopy> more = {{5, 9}, {6, 10}};
    cpu.copy_blocks(more);
    copier.run(gpu, more, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto after = download(gpu);
    ASSERT_EQ(after.size(), static_cast<size_t>(cpu.storage().nbytes()));
    EXPECT_EQ(std::memcmp(after.data(), c, after.size()), 0) << "GPU copy differs from KVPool::copy_blocks";
    for (const std::vector<BlockCopy>& bad :
         {std::vector<BlockCopy>{{0, 24}}, std::vector<BlockCopy>{{-1, 3}}, std::vector<BlockCopy>{{3, 3}},
          std::vector<BlockCopy>{{1, 2}, {3, 2}}, std::vector<BlockCopy>{{1, 2}, {2, 3}},
          std::vector<BlockCopy>{{4, 11}, {11, 12}}}) {
      EXPECT_THROW(copier.run(gpu, bad, nullptr), Error);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(download(gpu), after) << "a rejected batch must copy nothing";
    // The role scratch is clean again: a valid batch after the rejections still works.
    copier.run(gpu, std::vector<BlockCopy>{{2, 11}}, nullptr);
    cpu.copy_blocks(std::vector<BlockCopy>{{2, 11}});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(std::memcmp(download(gpu).data(), c, after.size()), 0);
  }
}

// Through the model: a fork's copy-on-write block is copied by copy_kv_blocks, so the child
// decodes exactly like its parent.
TEST(CudaKVCopy, ForkedChildDecodesLikeItsParent) {
  for (bool graphs : {true, false}) {
    auto m = make_model(graphs);
    const int64_t V = m->config().vocab_size;
    m->allocate_kv_cache(64, 16);
    EXPECT_THROW(m->copy_kv_blocks(std::vector<BlockCopy>{{0, 64}}), Error);
    EXPECT_THROW(m->copy_kv_blocks(std::vector<BlockCopy>{{1, 2}, {3, 2}}), Error);
    Driver d(64, 16);
    d.add(1, 9, 40, 40, V);  // 2 full blocks + a partial one
    std::vector<int32_t> rows;
    {
      const BatchMetadata& meta = d.build(rows);
      std::vector<float> lg(V);
      m->forward(input_of(meta, rows), lg);
      d.bm.mark_computed(d.seqs[0], 40);
    }
    std::vector<BlockCopy> copies;
    d.seqs.push_back(d.bm.fork(d.seqs[0], 1, copies));
    ASSERT_FALSE(copies.empty()) << "the partial block must be copied";
    m->copy_kv_blocks(copies);
    for (auto& s : d.seqs) {
      s.append_token(17);
      d.bm.append(s);
    }
    // Each alone (a one-sequence decode of the same length splits its keys the same way, so
    // equal KV gives bit-equal logits).
    std::vector<std::vector<float>> lg(2, std::vector<float>(V));
    for (size_t i = 0; i < 2; ++i) {
      const std::vector<ScheduledSequence> one = {{&d.seqs[i], 1}};
      const BatchMetadata& meta = d.builder.build(one);
      ASSERT_EQ(meta.ctx.phase, Phase::kDecode);
      rows = {0};
      m->forward(input_of(meta, rows), lg[i]);
    }
    EXPECT_EQ(std::memcmp(lg[0].data(), lg[1].data(), V * sizeof(float)), 0)
        << "child's logits differ from its parent's (graphs " << graphs << ")";
  }
}

// ---- (e) memory planning ----

TEST(CudaServing, KVCacheBudgetCountsTheWarmUpAndKeepsTheGraphs) {
  auto m = make_model(true);
  EXPECT_THROW(m->kv_cache_budget(0, 0.5), Error);
  EXPECT_THROW(m->kv_cache_budget(1024, 1.5), Error);
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  const int64_t budget = m->kv_cache_budget(2048, 0.3);
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  std::printf("kv_cache_budget(2048, 0.3) = %.2f GiB (free before %.2f GiB, after %.2f GiB)\n",
              budget / 1073741824.0, free0 / 1073741824.0, free1 / 1073741824.0);
  EXPECT_GT(budget, 0);
  EXPECT_LE(budget, static_cast<int64_t>(free1));
  EXPECT_LE(budget, static_cast<int64_t>(0.3 * total));
  const CudaModelStats planned = cuda_model_stats(*m);
  EXPECT_GE(planned.activation_tokens, 2048);
  const int64_t bs = 256;
  const int64_t blocks = std::min<int64_t>(budget / m->kv_block_bytes(bs), 100000);
  ASSERT_GT(blocks, 64);
  m->allocate_kv_cache(blocks, bs);
  const CudaModelStats ready = cuda_model_stats(*m);
  const auto rungs = static_cast<int64_t>(ready.ladder.size());
  EXPECT_EQ(ready.graph_captures - planned.graph_captures, rungs) << "the whole ladder at allocate";
  // Steps within the plan neither grow the buffers nor recapture.
  Driver d(blocks, bs);
  d.add(37, 4, 1, 50, m->config().vocab_size);
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> rows;
    const BatchMetadata& meta = d.build(rows);
    std::vector<int32_t> next(rows.size());
    m->forward_sample(input_of(meta, rows), greedy_rows(rows.size()), next);
    d.advance(meta, next);
  }
  const CudaModelStats after = cuda_model_stats(*m);
  EXPECT_EQ(after.graph_captures, ready.graph_captures);
  EXPECT_EQ(after.graph_drops, 0);
  EXPECT_EQ(after.graph_replays, 3);
  EXPECT_EQ(after.activation_tokens, planned.activation_tokens);
}

// A prefill larger than planned grows the activations and drops the graphs; the next decode
// recaptures and still matches eager mode bit for bit.
TEST(CudaServing, GrowingPastThePlanRecaptures) {
  auto on = make_model(true);
  auto off = make_model(false);
  const int64_t V = on->config().vocab_size;
  for (Model* m : {on.get(), off.get()}) {
    ASSERT_GT(m->kv_cache_budget(256, 0.2), 0);
    m->allocate_kv_cache(1024, 16);
  }
  Driver d(1024, 16);
  d.add(4, 12, 5, 10, V);
  auto step_both = [&]() {
    std::vector<int32_t> rows;
    const BatchMetadata& meta = d.build(rows);
    const ModelInput in = input_of(meta, rows);
    const StepResult a = run_step(*on, in, d.step);
    const StepResult b = run_step(*off, in, d.step);
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0);
    EXPECT_EQ(a.random, b.random);
    d.advance(meta, a.greedy);
  };
  step_both();  // prefill
  step_both();  // decode (graph)
  d.add(2, 13, 600, 700, V);  // a prefill of > 1000 tokens, above the 256 planned
  {
    std::vector<int32_t> rows;
    std::vector<ScheduledSequence> batch;
    for (size_t i = 4; i < d.seqs.size(); ++i) batch.push_back({&d.seqs[i], d.seqs[i].num_uncomputed_tokens()});
    int64_t row = 0;
    for (auto& b : batch) rows.push_back(static_cast<int32_t>((row += b.num_new_tokens) - 1));
    const BatchMetadata& meta = d.builder.build(batch);
    std::vector<float> la(rows.size() * V), lb(rows.size() * V);
    on->forward(input_of(meta, rows), la);
    off->forward(input_of(meta, rows), lb);
    EXPECT_EQ(la, lb);
    for (size_t i = 0; i < batch.size(); ++i) {
      d.bm.mark_computed(d.seqs[4 + i], batch[i].num_new_tokens);
      d.seqs[4 + i].append_token(host_argmax(la, V)[i]);
      d.bm.append(d.seqs[4 + i]);
    }
  }
  EXPECT_GE(cuda_model_stats(*on).graph_drops, 1);
  for (int s = 0; s < 3; ++s) step_both();  // decode, recaptured
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
