// The CPU model: float32 activations, weights stored as ModelOptions::weight_format (see
// weight_matrix.h). Q/K/V and gate/up are fused at load into one weight each, so a layer is
// four GEMMs; o_proj and down_proj accumulate straight into the residual stream (beta = 1), or,
// with Gemma's sandwich norms, are normalized first. Step buffers grow to the largest step seen
// and are reused, so decode allocates nothing.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/cpu_ops.h"
#include "engine/model/factories.h"
#include "engine/model/kv_scales.h"
#include "engine/model/rope.h"
#include "engine/model/team_tuner.h"
#include "engine/model/weight_matrix.h"
#include "engine/parallel/collective.h"
#include "kvattn/attention/attention.h"
#include "kvattn/cache/kv_pool.h"

namespace kvattn {
namespace {

using cpu_model::WeightMatrix;

// OpenMP's team size before any model changed it (OMP_NUM_THREADS, else the cores).
int default_threads() {
  static const int n = omp_get_max_threads();
  return n;
}

Tensor take(ModelWeights& w, const std::string& name) {
  auto it = w.tensors.find(name);
  KVATTN_CHECK(it != w.tensors.end(), "Model: tensor '", name, "' is missing");
  Tensor t = std::move(it->second);
  w.tensors.erase(it);
  return t;
}

// Model::set_phase_timing on the CPU: lap(phase) charges the time since the previous lap to
// `phase`, so the laps of one forward add up to its wall time. OpenMP regions have joined
// before each lap, so the calling thread's clock is the step's.
class PhaseClock {
 public:
  bool on = false;
  void start() {
    times = {};
    if (on) last_ = std::chrono::steady_clock::now();
  }
  void lap(double PhaseTimes::*phase) {
    if (!on) return;
    const auto now = std::chrono::steady_clock::now();
    times.*phase += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  PhaseTimes times;

 private:
  std::chrono::steady_clock::time_point last_;
};
constexpr double PhaseTimes::*kAttention = &PhaseTimes::attention_s;
constexpr double PhaseTimes::*kGemm = &PhaseTimes::gemm_s;
constexpr double PhaseTimes::*kOther = &PhaseTimes::other_s;

struct Layer {
  Tensor input_norm, post_norm;  // post_norm: the MLP's input norm
  Tensor attn_out_norm, ffn_out_norm;  // Gemma's sandwich norms, undefined otherwise
  bool local_rope = false;             // Gemma 3's sliding layers: the local RoPE tables
  WeightMatrix wqkv;      // [(H + 2 KVH) * D, hidden]
  Tensor q_norm, k_norm;  // [D], qwen3 only
  std::vector<float> qkv_bias;  // [(H + 2 KVH) * D] (q, k, v biases), empty when none
  std::vector<float> o_bias;    // [hidden], empty when none
  WeightMatrix wo;        // [hidden, H * D]
  WeightMatrix wgate_up;  // [2 * inter, hidden]
  WeightMatrix wdown;     // [hidden, inter]
  std::unique_ptr<Attention> attn;
};

class CpuModel final : public Model {
 public:
  CpuModel(ModelWeights w, const ModelOptions& options, const RankContext& rank)
      : cfg_(w.config),
        rank_(rank),
        kv_dtype_(cpu_kv_dtype(options.kv_cache_dtype)),
        kv_scales_(w.config.num_layers, w.config.num_kv_heads),
        tuner_(default_threads(), options.num_threads) {
    if (rank_.full_vocab == 0) rank_.full_vocab = cfg_.vocab_size;
    KVATTN_CHECK(rank_.size == 1 || rank_.comm != nullptr,
                 "Model: a tensor-parallel rank needs a collective");
    // One thread pool (OpenMP's): BLAS runs single-threaded inside it.
    openblas_set_num_threads(1);
    const WeightFormat wt = options.weight_format;
    embed_ = WeightMatrix(w, {"model.embed_tokens.weight"}, wt);
    final_norm_ = take(w, "model.norm.weight");
    tied_ = cfg_.tie_word_embeddings && !w.tensors.count("lm_head.weight") &&
            !w.quantized.count("lm_head.weight");
    if (!tied_) lm_head_ = WeightMatrix(w, {"lm_head.weight"}, wt);
    inv_freq_ = rope::inv_freq(cfg_);
    inv_freq_local_ = rope::local_inv_freq(cfg_);
    rope_scale_ = rope::attention_factor(cfg_);
    embed_scale_ = static_cast<float>(cfg_.embedding_scale);  // HF: rounded to the model's dtype
    final_softcap_ = static_cast<float>(cfg_.final_logit_softcap);
    final_norm_ = norm_weight(std::move(final_norm_));
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      Layer l;
      l.input_norm = norm_weight(take(w, p + "input_layernorm.weight"));
      if (cfg_.sandwich_norms) {
        l.attn_out_norm = norm_weight(take(w, p + "post_attention_layernorm.weight"));
        l.post_norm = norm_weight(take(w, p + "pre_feedforward_layernorm.weight"));
        l.ffn_out_norm = norm_weight(take(w, p + "post_feedforward_layernorm.weight"));
      } else {  // Llama's MLP input norm (Gemma 1's too: 1 + w)
        l.post_norm = norm_weight(take(w, p + "post_attention_layernorm.weight"));
      }
      l.local_rope = !inv_freq_local_.empty() && cfg_.window_left(i) >= 0;
      l.wqkv = WeightMatrix(w, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                p + "self_attn.v_proj.weight"}, wt);
      l.wo = WeightMatrix(w, {p + "self_attn.o_proj.weight"}, wt);
      if (cfg_.qkv_bias) {
        for (const char* b : {"q_proj.bias", "k_proj.bias", "v_proj.bias"}) {
          const Tensor t = take(w, p + "self_attn." + b);
          l.qkv_bias.insert(l.qkv_bias.end(), t.ptr<const float>(),
                            t.ptr<const float>() + t.numel());
        }
      }
      if (cfg_.o_bias) {
        const Tensor t = take(w, p + "self_attn.o_proj.bias");
        l.o_bias.assign(t.ptr<const float>(), t.ptr<const float>() + t.numel());
      }
      if (cfg_.qk_norm) {
        l.q_norm = norm_weight(take(w, p + "self_attn.q_norm.weight"));
        l.k_norm = norm_weight(take(w, p + "self_attn.k_norm.weight"));
      }
      l.wgate_up = WeightMatrix(w, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, wt);
      l.wdown = WeightMatrix(w, {p + "mlp.down_proj.weight"}, wt);
      l.attn = std::make_unique<Attention>(
          cfg_.num_heads, cfg_.head_dim, static_cast<float>(cfg_.attention_scale),
          cfg_.num_kv_heads,
          AttentionMask{cfg_.window_left(i), static_cast<float>(cfg_.attn_logit_softcap)});
      layers_.push_back(std::move(l));
    }
  }

  const ModelConfig& config() const override { return cfg_; }
  Device device() const override { return Device::cpu(); }
  DType kv_dtype() const override { return kv_dtype_; }

  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override {
    for (auto& l : layers_) l.attn->bind_cache(TensorView(), TensorView());
    pool_.reset();
    KVCacheSpec spec{cfg_.num_layers, cfg_.num_kv_heads, cfg_.head_dim, kv_dtype_, block_size};
    pool_ = std::make_unique<KVPool>(spec, num_blocks, Device::cpu());
    const bool fp8 = kv_dtype_ == DType::kF8E4M3;
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      layers_[i].attn->bind_cache(pool_->k_cache(i), pool_->v_cache(i),
                                  fp8 ? kv_scales_.k_scale(i) : TensorView(),
                                  fp8 ? kv_scales_.v_scale(i) : TensorView());
    }
  }
  void set_kv_scales(std::span<const float> k, std::span<const float> v) override {
    KVATTN_CHECK(kv_dtype_ == DType::kF8E4M3, "Model::set_kv_scales: the KV cache is ",
                 kv_dtype_, ", not float8_e4m3");
    kv_scales_.set(k, v);
  }
  void track_kv_amax(bool on) override { kv_scales_.track(on); }
  void kv_amax(std::span<float> k, std::span<float> v) const override { kv_scales_.amax(k, v); }
  int64_t num_kv_blocks() const override { return pool_ ? pool_->num_blocks() : 0; }
  int64_t kv_block_size() const override { return pool_ ? pool_->spec().block_size : 0; }
  void copy_kv_blocks(std::span<const BlockCopy> copies) override {
    KVATTN_CHECK(pool_ != nullptr || copies.empty(),
                 "Model::copy_kv_blocks: no KV cache is allocated");
    if (!copies.empty()) pool_->copy_blocks(copies);
  }

  void forward(const ModelInput& in, std::span<float> logits) override;
  bool set_phase_timing(bool on) override {
    clock_.on = on;
    return true;
  }
  PhaseTimes last_phase_times() const override { return clock_.times; }

 private:
  void reserve(int64_t tokens, int64_t logit_rows);
  // cos_/sin_ for the step's tokens (dynamic NTK: per sequence, from its length so far).
  void rope_tables(const ModelInput& in);
  // x += w(in) + bias, or x += rms_norm(w(in) + bias) with `out_norm` (Gemma): row-parallel
  // layers (o_proj, down_proj) all-reduce their partial sums first. bias may be null,
  // out_norm undefined.
  void add_row_parallel(const cpu_model::WeightMatrix& w, const float* in, int64_t in_dim,
                        int64_t tokens, const float* bias, const Tensor& out_norm);
  // Gemma's HF norms hold w and scale by (1 + w): added once here, in float32 as HF does.
  Tensor norm_weight(Tensor t) const {
    if (cfg_.norm_weight_offset) {
      float* p = t.ptr<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = 1.0f + p[i];
    }
    return t;
  }

  static DType cpu_kv_dtype(KVCacheDType d) {
    switch (d) {
      case KVCacheDType::kAuto: return DType::kF32;
      case KVCacheDType::kBF16: return DType::kBF16;
      case KVCacheDType::kFP8: return DType::kF8E4M3;
    }
    return DType::kF32;
  }

  ModelConfig cfg_;  // this rank's shard (sizes divided by the tensor-parallel size)
  RankContext rank_;
  DType kv_dtype_;
  cpu_model::KvScales kv_scales_;  // fp8 caches only
  WeightMatrix embed_, lm_head_;  // lm_head_ unset when tied to embed_
  Tensor final_norm_;
  bool tied_ = false;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;  // RoPE's, [head_dim / 2] (engine/model/rope.h)
  std::vector<float> inv_freq_local_;  // Gemma 3's sliding layers; empty otherwise
  float rope_scale_ = 1.0f;      // YaRN's cos/sin multiplier
  float embed_scale_ = 0.0f;     // 0 => none
  float final_softcap_ = 0.0f;   // 0 => none
  std::unique_ptr<KVPool> pool_;
  cpu_model::TeamTuner tuner_;
  PhaseClock clock_;
  // Step buffers, grown on demand.
  int64_t cap_tokens_ = 0;
  std::vector<float> x_, h_, qkv_, attn_, gate_up_, act_, cos_, sin_, final_;
  std::vector<float> cos_local_, sin_local_;  // Gemma 3 only
  std::vector<float> part_, shard_logits_, gathered_;  // tensor parallel only
};

void CpuModel::add_row_parallel(const WeightMatrix& w, const float* in, int64_t in_dim,
                                int64_t tokens, const float* bias, const Tensor& out_norm) {
  const int64_t H = cfg_.hidden_size;
  const bool normed = out_norm.defined();
  if (rank_.size == 1 && !normed) {  // straight into the residual stream
    w.apply(in, in_dim, tokens, x_.data(), H, 1.0f);
    if (bias != nullptr) cpu_model::add_bias(x_.data(), H, tokens, bias);
    return;
  }
  // h_ is free here (its normed input was consumed by the layer's first GEMM).
  float* y = rank_.size == 1 ? h_.data() : part_.data();
  w.apply(in, in_dim, tokens, y, H);
  // A partial sum of the output over this rank's inputs: the ranks' parts add up to it.
  if (rank_.size > 1) rank_.comm->all_reduce_sum(y, tokens * H);
  if (!normed) {
    for (int64_t i = 0; i < tokens * H; ++i) x_[i] += y[i];
    if (bias != nullptr) cpu_model::add_bias(x_.data(), H, tokens, bias);
    return;
  }
  if (bias != nullptr) cpu_model::add_bias(y, H, tokens, bias);
  cpu_model::rms_norm(y, H, tokens, H, out_norm.ptr<float>(),
                      static_cast<float>(cfg_.rms_norm_eps), y, H);
  for (int64_t i = 0; i < tokens * H; ++i) x_[i] += y[i];
}

void CpuModel::rope_tables(const ModelInput& in) {
  if (!inv_freq_local_.empty()) {
    cpu_model::rope_tables(in.positions, inv_freq_local_, 1.0f, cos_local_.data(),
                           sin_local_.data());
  }
  if (!rope::depends_on_length(cfg_)) {
    cpu_model::rope_tables(in.positions, inv_freq_, rope_scale_, cos_.data(), sin_.data());
    return;
  }
  // Dynamic NTK as HF's dynamic_rope_update in a one-sequence generate: each step's tokens
  // use the frequencies of the sequence's length after the step (its last position + 1).
  const TensorView& cu = in.ctx->cu_seqlens_q;
  KVATTN_CHECK(cu.defined() && cu.device.is_cpu() && cu.dtype == DType::kI32 &&
                   cu.ndim == 1 && cu.shape[0] >= 1,
               "Model::forward: dynamic RoPE scaling needs ctx.cu_seqlens_q (int32, on the host)");
  const auto* b = static_cast<const int32_t*>(cu.data);
  const int64_t half = cfg_.rope_dim() / 2, T = static_cast<int64_t>(in.positions.size());
  for (int64_t s = 0; s + 1 < cu.shape[0]; ++s) {
    const int64_t begin = b[s], end = b[s + 1];
    KVATTN_CHECK(begin >= 0 && begin <= end && end <= T, "Model::forward: cu_seqlens_q[", s,
                 "..", s + 1, "] = [", begin, ", ", end, ") is outside the step's ", T, " tokens");
    if (begin == end) continue;
    const std::vector<float> f = rope::inv_freq(cfg_, int64_t{in.positions[end - 1]} + 1);
    cpu_model::rope_tables(in.positions.subspan(begin, end - begin), f, rope_scale_,
                           cos_.data() + begin * half, sin_.data() + begin * half);
  }
}

void CpuModel::reserve(int64_t tokens, int64_t rows) {
  if (static_cast<int64_t>(final_.size()) < rows * cfg_.hidden_size) {
    final_.resize(rows * cfg_.hidden_size);
  }
  if (tokens <= cap_tokens_) return;
  const int64_t hd = cfg_.head_dim;
  const int64_t qkv = (cfg_.num_heads + 2 * cfg_.num_kv_heads) * hd;
  x_.resize(tokens * cfg_.hidden_size);
  if (rank_.size > 1) part_.resize(tokens * cfg_.hidden_size);
  h_.resize(tokens * cfg_.hidden_size);
  qkv_.resize(tokens * qkv);
  attn_.resize(tokens * cfg_.num_heads * hd);
  gate_up_.resize(tokens * 2 * cfg_.intermediate_size);
  act_.resize(tokens * cfg_.intermediate_size);
  cos_.resize(tokens * hd / 2);
  sin_.resize(tokens * hd / 2);
  if (!inv_freq_local_.empty()) {
    cos_local_.resize(tokens * hd / 2);
    sin_local_.resize(tokens * hd / 2);
  }
  cap_tokens_ = tokens;
}

void CpuModel::forward(const ModelInput& in, std::span<float> logits) {
  const auto T = static_cast<int64_t>(in.token_ids.size());
  const auto R = static_cast<int64_t>(in.logit_rows.size());
  const int64_t H = cfg_.hidden_size, V = rank_.full_vocab, D = cfg_.head_dim;
  const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads, inter = cfg_.intermediate_size;
  const int64_t qkv_dim = (nh + 2 * nkv) * D;
  const int64_t vs = cfg_.vocab_size, v0 = rank_.rank * vs;  // this rank's vocab slice
  const bool tp = rank_.size > 1;
  KVATTN_CHECK(in.ctx != nullptr, "Model::forward: input.ctx must be given");
  KVATTN_CHECK(T > 0, "Model::forward: a step needs at least one token");
  KVATTN_CHECK(static_cast<int64_t>(in.positions.size()) == T, "Model::forward: positions has ",
               in.positions.size(), " entries but token_ids has ", T);
  KVATTN_CHECK(static_cast<int64_t>(logits.size()) == R * V, "Model::forward: logits must hold ",
               R, " x ", V, " floats but holds ", logits.size());
  reserve(T, R);
  omp_set_num_threads(tuner_.begin(T));
  const auto t0 = std::chrono::steady_clock::now();
  clock_.start();

  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = in.token_ids[t];
    KVATTN_CHECK(id >= 0 && id < V, "Model::forward: token id ", id, " at row ", t,
                 " is outside the vocabulary [0, ", V, ")");
    KVATTN_CHECK(in.positions[t] >= 0, "Model::forward: position ", in.positions[t],
                 " at row ", t, " is negative");
    if (id >= v0 && id < v0 + vs) {
      embed_.row(id - v0, &x_[t * H]);
    } else {  // another rank's row: the all-reduce below brings it
      std::fill_n(&x_[t * H], H, 0.0f);
    }
  }
  if (tp) rank_.comm->all_reduce_sum(x_.data(), T * H);
  if (embed_scale_ != 0.0f) {
    for (int64_t i = 0; i < T * H; ++i) x_[i] *= embed_scale_;
  }
  rope_tables(in);
  const auto eps = static_cast<float>(cfg_.rms_norm_eps);
  clock_.lap(kOther);

  for (auto& l : layers_) {
    cpu_model::rms_norm(x_.data(), H, T, H, l.input_norm.ptr<float>(), eps, h_.data(), H);
    clock_.lap(kOther);
    l.wqkv.apply(h_.data(), H, T, qkv_.data(), qkv_dim);
    clock_.lap(kGemm);
    if (!l.qkv_bias.empty()) cpu_model::add_bias(qkv_.data(), qkv_dim, T, l.qkv_bias.data());
    float* q = qkv_.data();
    float* k = q + nh * D;
    float* v = k + nkv * D;
    if (cfg_.qk_norm) {
      // Rows of few heads: the team shares the tokens (rms_norm's own loop then runs serial).
#pragma omp parallel for schedule(static) if (T >= 64)
      for (int64_t t = 0; t < T; ++t) {
        cpu_model::rms_norm(q + t * qkv_dim, D, nh, D, l.q_norm.ptr<float>(), eps,
                            q + t * qkv_dim, D);
        cpu_model::rms_norm(k + t * qkv_dim, D, nkv, D, l.k_norm.ptr<float>(), eps,
                            k + t * qkv_dim, D);
      }
    }
    const float* cos_t = l.local_rope ? cos_local_.data() : cos_.data();
    const float* sin_t = l.local_rope ? sin_local_.data() : sin_.data();
    const int64_t R = cfg_.rope_dim();
    cpu_model::apply_rope(q, qkv_dim, T, nh, D, R, cfg_.rope_style, cos_t, sin_t);
    cpu_model::apply_rope(k, qkv_dim, T, nkv, D, R, cfg_.rope_style, cos_t, sin_t);
    const Device cpu = Device::cpu();
    if (kv_scales_.tracking()) {
      kv_scales_.record(&l - layers_.data(), k, v, T, qkv_dim, D);
    }
    clock_.lap(kOther);
    l.attn->forward(TensorView(q, DType::kF32, cpu, {T, nh * D}, {qkv_dim, 1}),
                    TensorView(k, DType::kF32, cpu, {T, nkv * D}, {qkv_dim, 1}),
                    TensorView(v, DType::kF32, cpu, {T, nkv * D}, {qkv_dim, 1}), *in.ctx,
                    TensorView(attn_.data(), DType::kF32, cpu, {T, nh * D}));
    clock_.lap(kAttention);
    add_row_parallel(l.wo, attn_.data(), nh * D, T, l.o_bias.empty() ? nullptr : l.o_bias.data(),
                     l.attn_out_norm);
    clock_.lap(kGemm);

    cpu_model::rms_norm(x_.data(), H, T, H, l.post_norm.ptr<float>(), eps, h_.data(), H);
    clock_.lap(kOther);
    l.wgate_up.apply(h_.data(), H, T, gate_up_.data(), 2 * inter);
    clock_.lap(kGemm);
    if (cfg_.activation == ModelConfig::Activation::kGeluTanh) {
      cpu_model::gelu_tanh_mul(gate_up_.data(), T, inter, act_.data());
    } else {
      cpu_model::silu_mul(gate_up_.data(), T, inter, act_.data());
    }
    clock_.lap(kOther);
    add_row_parallel(l.wdown, act_.data(), inter, T, nullptr, l.ffn_out_norm);
    clock_.lap(kGemm);
  }

  for (int64_t r = 0; r < R; ++r) {
    const int32_t row = in.logit_rows[r];
    KVATTN_CHECK(row >= 0 && row < T, "Model::forward: logit row ", row,
                 " is outside the step's tokens [0, ", T, ")");
    cpu_model::rms_norm(&x_[row * H], H, 1, H, final_norm_.ptr<float>(), eps, &final_[r * H], H);
  }
  const WeightMatrix& head = tied_ ? embed_ : lm_head_;
  clock_.lap(kOther);
  if (!tp) {
    head.apply(final_.data(), H, R, logits.data(), V);
  } else {
    // This rank's vocab slice of every row, gathered as [rank, row, slice] and laid out
    // as [row, vocab], cut to the real vocabulary (the last slice may be padded).
    shard_logits_.resize(R * vs);
    gathered_.resize(rank_.size * R * vs);
    if (R > 0) head.apply(final_.data(), H, R, shard_logits_.data(), vs);
    rank_.comm->all_gather(shard_logits_.data(), gathered_.data(), R * vs);
    for (int64_t r = 0; r < R; ++r) {
      for (int k = 0; k < rank_.size; ++k) {
        const int64_t begin = k * vs, n = std::min(vs, V - begin);
        if (n > 0) std::memcpy(&logits[r * V + begin], &gathered_[(k * R + r) * vs], n * sizeof(float));
      }
    }
  }
  if (final_softcap_ > 0.0f) cpu_model::softcap(logits.data(), R * V, final_softcap_);
  clock_.lap(kGemm);
  tuner_.end(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

std::unique_ptr<Model> make_cpu_model(ModelWeights weights, const ModelOptions& options,
                                      const RankContext& rank) {
  widen_to_f32(weights);  // bf16/f16 kept from the file (HfLoadOptions::keep_16bit)
  return std::make_unique<CpuModel>(std::move(weights), options, rank);
}

}  // namespace kvattn
