// The GPU model: bf16 weights and activations, cuBLASLt GEMMs, fused add+RMSNorm, q/k-norm+RoPE
// and SiLU*up kernels, attention through kvattn's Attention layer over a bf16 KVPool. Each step
// uploads its token ids, positions and BatchContext tensors in one copy from pinned memory,
// and downloads the bf16 logits of the requested rows in one copy.
//
// Not yet: CUDA-graph capture of decode steps (the Attention layer and these kernels are
// capture-safe; the engine would need padded, fixed-size batches).
#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/cuda_gemm.h"
#include "engine/model/cuda_kernels.h"
#include "engine/model/factories.h"
#include "kernels/cuda/cuda_check.h"
#include "kvattn/attention/attention.h"
#include "kvattn/cache/kv_pool.h"
#include "kvattn/kernels/decode_attention.h"

namespace kvattn {
namespace {

namespace k = cuda_model;

// float32 host tensors (stacked by rows) as one bf16 tensor on `device`; the sources are freed.
Tensor to_device_bf16(std::vector<Tensor> parts, Device device) {
  int64_t rows = 0;
  const int64_t cols = parts.front().view().ndim == 2 ? parts.front().size(1) : 1;
  for (const auto& p : parts) rows += p.view().ndim == 2 ? p.size(0) : p.numel();
  Tensor host = Tensor::empty(parts.front().view().ndim == 2 ? std::vector<int64_t>{rows, cols}
                                                             : std::vector<int64_t>{rows},
                              DType::kBF16);
  auto* dst = host.ptr<bf16_t>();
  for (auto& p : parts) {
    const float* src = p.ptr<float>();
    for (int64_t i = 0; i < p.numel(); ++i) *dst++ = float_to_bf16(src[i]);
    p = Tensor();
  }
  return host.to(device);
}

Tensor take(ModelWeights& w, const std::string& name) {
  auto it = w.tensors.find(name);
  KVATTN_CHECK(it != w.tensors.end(), "Model: tensor '", name, "' is missing");
  Tensor t = std::move(it->second);
  w.tensors.erase(it);
  return t;
}

struct Layer {
  Tensor input_norm, post_norm, wqkv, q_norm, k_norm, wo, wgate_up, wdown;  // bf16, device
  std::unique_ptr<Attention> attn;
};

// A device buffer that only grows.
struct Buffer {
  Tensor t;
  void* ensure(int64_t bytes, Device d) {
    if (!t.defined() || t.nbytes() < bytes) t = Tensor::empty({std::max<int64_t>(bytes, 256)}, DType::kU8, d);
    return t.data();
  }
};

class CudaModel final : public Model {
 public:
  CudaModel(ModelWeights w, Device device) : cfg_(w.config), device_(device), gemm_(device.index) {
    cuda::DeviceGuard guard(device.index);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    embed_ = to_device_bf16({take(w, "model.embed_tokens.weight")}, device);
    final_norm_ = to_device_bf16({take(w, "model.norm.weight")}, device);
    const bool tied = cfg_.tie_word_embeddings && !w.tensors.count("lm_head.weight");
    lm_head_ = tied ? embed_ : to_device_bf16({take(w, "lm_head.weight")}, device);
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      Layer l;
      l.input_norm = to_device_bf16({take(w, p + "input_layernorm.weight")}, device);
      l.post_norm = to_device_bf16({take(w, p + "post_attention_layernorm.weight")}, device);
      l.wqkv = to_device_bf16({take(w, p + "self_attn.q_proj.weight"),
                               take(w, p + "self_attn.k_proj.weight"),
                               take(w, p + "self_attn.v_proj.weight")},
                              device);
      if (cfg_.qk_norm) {
        l.q_norm = to_device_bf16({take(w, p + "self_attn.q_norm.weight")}, device);
        l.k_norm = to_device_bf16({take(w, p + "self_attn.k_norm.weight")}, device);
      }
      l.wo = to_device_bf16({take(w, p + "self_attn.o_proj.weight")}, device);
      l.wgate_up = to_device_bf16(
          {take(w, p + "mlp.gate_proj.weight"), take(w, p + "mlp.up_proj.weight")}, device);
      l.wdown = to_device_bf16({take(w, p + "mlp.down_proj.weight")}, device);
      l.attn = std::make_unique<Attention>(cfg_.num_heads, cfg_.head_dim, 0.0f,
                                           cfg_.num_kv_heads);
      layers_.push_back(std::move(l));
    }
  }

  ~CudaModel() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
  }

  const ModelConfig& config() const override { return cfg_; }
  Device device() const override { return device_; }
  DType kv_dtype() const override { return DType::kBF16; }
  int64_t num_kv_blocks() const override { return pool_ ? pool_->num_blocks() : 0; }
  int64_t kv_block_size() const override { return pool_ ? pool_->spec().block_size : 0; }
  void copy_kv_blocks(std::span<const BlockCopy> copies) override {
    KVATTN_CHECK(pool_ != nullptr || copies.empty(),
                 "Model::copy_kv_blocks: no KV cache is allocated");
    if (!copies.empty()) pool_->copy_blocks(copies);
  }

  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override {
    for (auto& l : layers_) l.attn->bind_cache(TensorView(), TensorView());
    pool_.reset();
    KVCacheSpec spec{cfg_.num_layers, cfg_.num_kv_heads, cfg_.head_dim, DType::kBF16, block_size};
    pool_ = std::make_unique<KVPool>(spec, num_blocks, device_);
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      layers_[i].attn->bind_cache(pool_->k_cache(i), pool_->v_cache(i));
    }
  }

  void forward(const ModelInput& in, std::span<float> logits) override;

 private:
  // Copies every int32 the step needs into one pinned block, then to the device in one copy.
  // Returns device pointers in the same order as `parts`.
  std::vector<const int32_t*> upload(const std::vector<std::span<const int32_t>>& parts);
  TensorView device_i32(const int32_t* p, const TensorView& host) const;

  ModelConfig cfg_;
  Device device_;
  cudaStream_t stream_ = nullptr;
  k::Gemm gemm_;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  std::unique_ptr<KVPool> pool_;
  Buffer x_, h_, qkv_, attn_, o_, gate_up_, act_, final_, logits_, meta_, workspace_;
  int32_t* pinned_ = nullptr;
  int64_t pinned_count_ = 0;
  std::vector<bf16_t> host_logits_;
};

std::vector<const int32_t*> CudaModel::upload(const std::vector<std::span<const int32_t>>& parts) {
  int64_t total = 0;
  for (const auto& p : parts) total += static_cast<int64_t>(p.size());
  if (total > pinned_count_) {
    if (pinned_ != nullptr) CUDA_CHECK(cudaFreeHost(pinned_));
    pinned_count_ = std::max<int64_t>(total, 4096);
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, pinned_count_ * sizeof(int32_t)));
    pinned_ = static_cast<int32_t*>(p);
  }
  auto* dev = static_cast<int32_t*>(meta_.ensure(pinned_count_ * sizeof(int32_t), device_));
  std::vector<const int32_t*> out;
  int64_t off = 0;
  for (const auto& p : parts) {
    if (!p.empty()) std::memcpy(pinned_ + off, p.data(), p.size() * sizeof(int32_t));
    out.push_back(dev + off);
    off += static_cast<int64_t>(p.size());
  }
  // The previous step's copy has completed: forward() synchronizes before returning.
  CUDA_CHECK(cudaMemcpyAsync(dev, pinned_, total * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  return out;
}

TensorView CudaModel::device_i32(const int32_t* p, const TensorView& host) const {
  if (!host.defined()) return TensorView();
  std::vector<int64_t> shape(host.shape.begin(), host.shape.begin() + host.ndim);
  return TensorView(const_cast<int32_t*>(p), DType::kI32, device_, shape);
}

std::span<const int32_t> host_span(const TensorView& t) {
  if (!t.defined()) return {};
  KVATTN_CHECK(t.dtype == DType::kI32 && t.device.is_cpu() && t.is_contiguous(),
               "cuda model: BatchContext tensors must be contiguous int32 host tensors but one is ",
               t.dtype, " on ", t.device);
  return {t.ptr<const int32_t>(), static_cast<size_t>(t.numel())};
}

void CudaModel::forward(const ModelInput& in, std::span<float> logits) {
  const auto T = static_cast<int64_t>(in.token_ids.size());
  const auto R = static_cast<int64_t>(in.logit_rows.size());
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size, D = cfg_.head_dim;
  const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads, inter = cfg_.intermediate_size;
  const int64_t qkv_dim = (nh + 2 * nkv) * D;
  KVATTN_CHECK(in.ctx != nullptr && T > 0, "Model::forward: a step needs a ctx and >= 1 token");
  KVATTN_CHECK(static_cast<int64_t>(in.positions.size()) == T &&
                   static_cast<int64_t>(logits.size()) == R * V,
               "Model::forward: positions/logits sizes do not match the step");
  for (int64_t t = 0; t < T; ++t) {
    KVATTN_CHECK(in.token_ids[t] >= 0 && in.token_ids[t] < V, "Model::forward: token id ",
                 in.token_ids[t], " at row ", t, " is outside the vocabulary [0, ", V, ")");
  }
  for (int64_t r = 0; r < R; ++r) {
    KVATTN_CHECK(in.logit_rows[r] >= 0 && in.logit_rows[r] < T, "Model::forward: logit row ",
                 in.logit_rows[r], " is outside the step's tokens [0, ", T, ")");
  }
  cuda::DeviceGuard guard(device_.index);
  const BatchContext& hc = *in.ctx;
  auto dp = upload({in.token_ids, in.positions, in.logit_rows, host_span(hc.slot_mapping),
                    host_span(hc.cu_seqlens_q), host_span(hc.cu_seqlens_k),
                    host_span(hc.context_lens), host_span(hc.block_tables)});
  BatchContext ctx;
  ctx.phase = hc.phase;
  ctx.slot_mapping = device_i32(dp[3], hc.slot_mapping);
  ctx.cu_seqlens_q = device_i32(dp[4], hc.cu_seqlens_q);
  ctx.cu_seqlens_k = device_i32(dp[5], hc.cu_seqlens_k);
  ctx.context_lens = device_i32(dp[6], hc.context_lens);
  ctx.block_tables = device_i32(dp[7], hc.block_tables);
  ctx.max_seqlen_q = hc.max_seqlen_q;
  ctx.max_seqlen_k = hc.max_seqlen_k;
  ctx.stream = Stream{stream_};
  if (ctx.phase == Phase::kDecode) {
    const auto lens = host_span(hc.context_lens);
    int64_t max_k = hc.max_seqlen_k;
    for (int32_t len : lens) max_k = std::max<int64_t>(max_k, len);
    const auto num_seqs = static_cast<int64_t>(lens.size());
    KVATTN_CHECK(num_seqs > 0 && T % num_seqs == 0,
                 "Model::forward: a decode step needs context_lens for its ", T, " tokens");
    ctx.decode_plan = plan_decode(num_seqs, nh, nkv, D, T / num_seqs, max_k, device_);
    void* ws = workspace_.ensure(ctx.decode_plan.workspace_bytes, device_);
    ctx.decode_workspace = TensorView(ws, DType::kU8, device_, {ctx.decode_plan.workspace_bytes});
  }

  const size_t bf = sizeof(bf16_t);
  void* x = x_.ensure(T * H * bf, device_);
  void* h = h_.ensure(T * H * bf, device_);
  auto* qkv = static_cast<bf16_t*>(qkv_.ensure(T * qkv_dim * bf, device_));
  void* attn = attn_.ensure(T * nh * D * bf, device_);
  void* o = o_.ensure(T * H * bf, device_);
  void* gate_up = gate_up_.ensure(T * 2 * inter * bf, device_);
  void* act = act_.ensure(T * inter * bf, device_);
  void* fin = final_.ensure(std::max<int64_t>(R, 1) * H * bf, device_);
  void* lg = logits_.ensure(std::max<int64_t>(R, 1) * V * bf, device_);
  const auto eps = static_cast<float>(cfg_.rms_norm_eps);

  k::embed(embed_.data(), dp[0], T, H, x, stream_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    k::add_rmsnorm(x, i == 0 ? nullptr : o, l.input_norm.data(), eps, h, nullptr, T, H, stream_);
    gemm_.run(h, H, T, l.wqkv.data(), qkv_dim, H, qkv, qkv_dim, stream_);
    k::qk_norm_rope(qkv, qkv_dim, T, nh, nkv, D, cfg_.qk_norm ? l.q_norm.data() : nullptr,
                    cfg_.qk_norm ? l.k_norm.data() : nullptr, eps, dp[1],
                    static_cast<float>(cfg_.rope_theta),
                    cfg_.rope_style == ModelConfig::RopeStyle::kInterleaved, stream_);
    l.attn->forward(TensorView(qkv, DType::kBF16, device_, {T, nh * D}, {qkv_dim, 1}),
                    TensorView(qkv + nh * D, DType::kBF16, device_, {T, nkv * D}, {qkv_dim, 1}),
                    TensorView(qkv + (nh + nkv) * D, DType::kBF16, device_, {T, nkv * D},
                               {qkv_dim, 1}),
                    ctx, TensorView(attn, DType::kBF16, device_, {T, nh * D}));
    gemm_.run(attn, nh * D, T, l.wo.data(), H, nh * D, o, H, stream_);
    k::add_rmsnorm(x, o, l.post_norm.data(), eps, h, nullptr, T, H, stream_);
    gemm_.run(h, H, T, l.wgate_up.data(), 2 * inter, H, gate_up, 2 * inter, stream_);
    k::silu_mul(gate_up, T, inter, act, stream_);
    gemm_.run(act, inter, T, l.wdown.data(), H, inter, o, H, stream_);
  }
  k::add_rmsnorm(x, o, final_norm_.data(), eps, fin, dp[2], R, H, stream_);
  gemm_.run(fin, H, R, lm_head_.data(), V, H, lg, V, stream_);
  host_logits_.resize(R * V);
  CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), lg, R * V * bf, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (int64_t i = 0; i < R * V; ++i) logits[i] = bf16_to_float(host_logits_[i]);
}

}  // namespace

std::unique_ptr<Model> make_cuda_model(ModelWeights weights, Device device,
                                       const ModelOptions& /*options*/) {
  KVATTN_CHECK(cuda_available(), "Model::create: device ", device,
               " requested but no CUDA device is visible");
  return std::make_unique<CudaModel>(std::move(weights), device);
}

int64_t cuda_free_bytes(Device device) {
  cuda::DeviceGuard guard(device.index);
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

}  // namespace kvattn

#endif  // KVATTN_WITH_CUDA
