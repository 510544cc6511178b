// Tensor-parallel sharding (engine/parallel/sharding.h): the shards are exact pieces of the
// full weights, and the partial results the ranks compute add up (row-parallel layers,
// embedding) or concatenate (column-parallel layers, lm_head) to the full model's, checked
// in float64 on random weights and inputs.
#include "engine/parallel/sharding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

ModelConfig small_config(int64_t vocab, bool tied) {
  ModelConfig c;
  c.architecture = "qwen3";
  c.vocab_size = vocab;
  c.hidden_size = 24;
  c.intermediate_size = 40;
  c.num_layers = 2;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 6;
  c.qk_norm = true;
  c.tie_word_embeddings = tied;
  return c;
}

Tensor random_tensor(std::vector<int64_t> shape, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(rng);
  return t;
}

ModelWeights random_weights(const ModelConfig& c, std::mt19937_64& rng) {
  ModelWeights w;
  w.config = c;
  const int64_t h = c.hidden_size, d = c.head_dim;
  w.tensors["model.embed_tokens.weight"] = random_tensor({c.vocab_size, h}, rng);
  w.tensors["model.norm.weight"] = random_tensor({h}, rng);
  if (!c.tie_word_embeddings) w.tensors["lm_head.weight"] = random_tensor({c.vocab_size, h}, rng);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w.tensors[p + "input_layernorm.weight"] = random_tensor({h}, rng);
    w.tensors[p + "post_attention_layernorm.weight"] = random_tensor({h}, rng);
    w.tensors[p + "self_attn.q_norm.weight"] = random_tensor({d}, rng);
    w.tensors[p + "self_attn.k_norm.weight"] = random_tensor({d}, rng);
    w.tensors[p + "self_attn.q_proj.weight"] = random_tensor({c.num_heads * d, h}, rng);
    w.tensors[p + "self_attn.k_proj.weight"] = random_tensor({c.num_kv_heads * d, h}, rng);
    w.tensors[p + "self_attn.v_proj.weight"] = random_tensor({c.num_kv_heads * d, h}, rng);
    w.tensors[p + "self_attn.o_proj.weight"] = random_tensor({h, c.num_heads * d}, rng);
    w.tensors[p + "mlp.gate_proj.weight"] = random_tensor({c.intermediate_size, h}, rng);
    w.tensors[p + "mlp.up_proj.weight"] = random_tensor({c.intermediate_size, h}, rng);
    w.tensors[p + "mlp.down_proj.weight"] = random_tensor({h, c.intermediate_size}, rng);
  }
  validate_weights(w, "test");
  return w;
}

// y[t, o] = sum_i x[t, i] * w[o, i], in float64.
std::vector<double> matmul_t(const std::vector<double>& x, int64_t rows, const Tensor& w) {
  const int64_t out = w.size(0), in = w.size(1);
  std::vector<double> y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double s = 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[t * in + i] * w.ptr<const float>()[o * in + i];
      y[t * out + o] = s;
    }
  }
  return y;
}

std::vector<double> random_input(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  return x;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  const double tol = 1e-12 * std::max(1.0, max_abs(want));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "at " << i;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

TEST(Sharding, SizeOneIsTheFullModel) {
  std::mt19937_64 rng(11);
  const ModelWeights full = random_weights(small_config(50, false), rng);
  const ModelWeights s = shard_weights(full, {0, 1});
  ASSERT_EQ(s.tensors.size(), full.tensors.size());
  for (const auto& [name, t] : full.tensors) {
    ASSERT_EQ(s.tensors.count(name), 1u) << name;
    EXPECT_TRUE(same_bits(s.tensors.at(name), t)) << name;
  }
  EXPECT_EQ(s.config.num_heads, 8);
  EXPECT_EQ(s.config.vocab_size, 50);
}

// Column-parallel pieces concatenate to the full matrix; row-parallel ones are column blocks.
TEST(Sharding, ShardsArePiecesOfTheFullWeights) {
  for (int n : {2, 4}) {
    std::mt19937_64 rng(100 + n);
    const ModelConfig c = small_config(50, false);
    const ModelWeights full = random_weights(c, rng);
    const std::string p = "model.layers.1.";
    for (int r = 0; r < n; ++r) {
      const ModelWeights s = shard_weights(full, {r, n});
      validate_weights(s, "shard");  // shapes agree with the shard's config
      EXPECT_EQ(s.config.num_heads, c.num_heads / n);
      EXPECT_EQ(s.config.num_kv_heads, c.num_kv_heads / n);
      EXPECT_EQ(s.config.intermediate_size, c.intermediate_size / n);
      const int64_t qrows = c.num_heads / n * c.head_dim, kvrows = c.num_kv_heads / n * c.head_dim;
      const int64_t h = c.hidden_size, inter = c.intermediate_size / n;
      const float* fq = full.tensors.at(p + "self_attn.q_proj.weight").ptr<const float>();
      const float* sq = s.tensors.at(p + "self_attn.q_proj.weight").ptr<const float>();
      EXPECT_EQ(std::memcmp(sq, fq + r * qrows * h, qrows * h * sizeof(float)), 0);
      const float* fv = full.tensors.at(p + "self_attn.v_proj.weight").ptr<const float>();
      const float* sv = s.tensors.at(p + "self_attn.v_proj.weight").ptr<const float>();
      EXPECT_EQ(std::memcmp(sv, fv + r * kvrows * h, kvrows * h * sizeof(float)), 0);
      const Tensor& fd = full.tensors.at(p + "mlp.down_proj.weight");
      const Tensor& sd = s.tensors.at(p + "mlp.down_proj.weight");
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t j = 0; j < inter; ++j) {
          ASSERT_EQ(sd.ptr<const float>()[i * inter + j],
                    fd.ptr<const float>()[i * c.intermediate_size + r * inter + j]);
        }
      }
      EXPECT_TRUE(same_bits(s.tensors.at(p + "self_attn.k_norm.weight"),
                            full.tensors.at(p + "self_attn.k_norm.weight")));
    }
  }
}

// The MLP and o_proj: each rank's row-parallel partial sums add up to the full result (the
// all-reduce), and column-parallel q/k/v rows are the full projection's rows of its heads.
TEST(Sharding, PartialResultsAddUpToTheFullLayer) {
  std::mt19937_64 rng(7);
  const ModelConfig c = small_config(50, false);
  const ModelWeights full = random_weights(c, rng);
  const int64_t T = 5, h = c.hidden_size, d = c.head_dim;
  const std::string p = "model.layers.0.";
  const auto x = random_input(T * h, rng);
  const auto attn = random_input(T * c.num_heads * d, rng);
  auto silu_mul = [](const std::vector<double>& g, const std::vector<double>& u) {
    std::vector<double> a(g.size());
    for (size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return a;
  };
  const auto full_mlp = matmul_t(silu_mul(matmul_t(x, T, full.tensors.at(p + "mlp.gate_proj.weight")),
                                          matmul_t(x, T, full.tensors.at(p + "mlp.up_proj.weight"))),
                                 T, full.tensors.at(p + "mlp.down_proj.weight"));
  const auto full_o = matmul_t(attn, T, full.tensors.at(p + "self_attn.o_proj.weight"));
  const auto full_q = matmul_t(x, T, full.tensors.at(p + "self_attn.q_proj.weight"));
  for (int n : {2, 4}) {
    std::vector<double> mlp(full_mlp.size(), 0.0), o(full_o.size(), 0.0);
    const int64_t hd = c.num_heads / n * d;
    for (int r = 0; r < n; ++r) {
      const ModelWeights s = shard_weights(full, {r, n});
      const auto part = matmul_t(silu_mul(matmul_t(x, T, s.tensors.at(p + "mlp.gate_proj.weight")),
                                          matmul_t(x, T, s.tensors.at(p + "mlp.up_proj.weight"))),
                                 T, s.tensors.at(p + "mlp.down_proj.weight"));
      for (size_t i = 0; i < mlp.size(); ++i) mlp[i] += part[i];
      // This rank's heads of the attention output.
      std::vector<double> a(static_cast<size_t>(T * hd));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < hd; ++j) a[t * hd + j] = attn[t * c.num_heads * d + r * hd + j];
      }
      const auto po = matmul_t(a, T, s.tensors.at(p + "self_attn.o_proj.weight"));
      for (size_t i = 0; i < o.size(); ++i) o[i] += po[i];
      const auto q = matmul_t(x, T, s.tensors.at(p + "self_attn.q_proj.weight"));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < hd; ++j) {
          ASSERT_EQ(q[t * hd + j], full_q[t * c.num_heads * d + r * hd + j]);
        }
      }
    }
    expect_close(mlp, full_mlp);
    expect_close(o, full_o);
  }
}

// Vocab-parallel embedding and lm_head with a vocab that does not divide evenly: padded rows
// are zero, masked lookups add up to the full row, gathered logits cut to V are the full ones.
TEST(Sharding, VocabParallelEmbeddingAndHead) {
  for (bool tied : {false, true}) {
    std::mt19937_64 rng(tied ? 21 : 22);
    const ModelConfig c = small_config(51, tied);  // 51 = 13 + 13 + 13 + 12
    const ModelWeights full = random_weights(c, rng);
    const int n = 4;
    const int64_t vs = vocab_shard_rows(c.vocab_size, n), h = c.hidden_size;
    ASSERT_EQ(vs, 13);
    const Tensor& fe = full.tensors.at("model.embed_tokens.weight");
    const Tensor& fh = tied ? fe : full.tensors.at("lm_head.weight");
    const auto x = random_input(3 * h, rng);
    const auto full_logits = matmul_t(x, 3, fh);
    std::vector<double> gathered;
    std::vector<std::vector<double>> gathered_rows(3);
    std::vector<double> emb(static_cast<size_t>(c.vocab_size * h), 0.0);
    for (int r = 0; r < n; ++r) {
      const ModelWeights s = shard_weights(full, {r, n});
      EXPECT_EQ(s.config.vocab_size, vs);
      EXPECT_EQ(s.tensors.count("lm_head.weight"), tied ? 0u : 1u);
      const Tensor& se = s.tensors.at("model.embed_tokens.weight");
      for (int64_t id = 0; id < c.vocab_size; ++id) {
        const int64_t local = id - r * vs;
        if (local < 0 || local >= vs) continue;  // another rank's id: this rank adds zeros
        for (int64_t j = 0; j < h; ++j) emb[id * h + j] += se.ptr<const float>()[local * h + j];
      }
      for (int64_t row = r * vs; row < (r + 1) * vs; ++row) {
        if (row < c.vocab_size) continue;
        for (int64_t j = 0; j < h; ++j) ASSERT_EQ(se.ptr<const float>()[(row - r * vs) * h + j], 0.0f);
      }
      const auto logits = matmul_t(x, 3, tied ? se : s.tensors.at("lm_head.weight"));
      for (int t = 0; t < 3; ++t) {
        gathered_rows[t].insert(gathered_rows[t].end(), logits.begin() + t * vs,
                                logits.begin() + (t + 1) * vs);
      }
    }
    for (int64_t i = 0; i < c.vocab_size * h; ++i) ASSERT_EQ(emb[i], fe.ptr<const float>()[i]);
    for (int t = 0; t < 3; ++t) {
      ASSERT_EQ(static_cast<int64_t>(gathered_rows[t].size()), n * vs);
      gathered_rows[t].resize(static_cast<size_t>(c.vocab_size));
      gathered.insert(gathered.end(), gathered_rows[t].begin(), gathered_rows[t].end());
    }
    expect_close(gathered, full_logits);
  }
}

TEST(Sharding, RejectsSizesThatDoNotDivideTheHeads) {
  std::mt19937_64 rng(5);
  const ModelWeights full = random_weights(small_config(50, false), rng);
  auto message = [&](TensorParallel tp) {
    try {
      shard_weights(full, tp);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({0, 3}).find("must divide num_heads (8)"), std::string::npos);
  EXPECT_NE(message({0, 8}).find("must divide num_kv_heads (4)"), std::string::npos);
  EXPECT_NE(message({2, 2}).find("rank must be in [0, 2) but is 2"), std::string::npos);
  EXPECT_NE(message({0, 0}).find("size must be >= 1 but is 0"), std::string::npos);
  ModelConfig odd = small_config(50, false);
  odd.intermediate_size = 42;
  EXPECT_NE(std::string([&] {
              try {
                check_tensor_parallel(odd, {0, 4});
              } catch (const Error& e) {
                return std::string(e.what());
              }
              return std::string("no error");
            }())
                .find("must divide intermediate_size (42)"),
            std::string::npos);
}

}  // namespace
}  // namespace kvattn
