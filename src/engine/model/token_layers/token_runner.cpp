#ifdef KVATTN_WITH_CUDA

#include "engine/model/token_layers/token_runner.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/model/rope.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_faults.cuh"

namespace kvattn::cuda_model {

bool token_kernel_wanted() {
  const char* e = std::getenv("KVATTN_TOKEN_KERNEL");
  return e == nullptr || std::strcmp(e, "0") != 0;
}

bool token_flow_wanted() {
  const char* e = std::getenv("KVATTN_TOKEN_FLOW");
  return e != nullptr && std::strcmp(e, "1") == 0;
}

namespace {

// Why the model's layers are not the kernel's, or "".
std::string model_not_covered(const ModelConfig& c, bool tensor_parallel) {
  if (tensor_parallel) return "tensor parallel";
  if (c.sandwich_norms || c.embedding_scale != 0) return "Gemma's norms";
  if (c.activation != ModelConfig::Activation::kSilu) return "not SiLU";
  if (c.qkv_bias || c.o_bias) return "attention biases";
  if (c.attn_logit_softcap != 0.0) return "attention soft-cap";
  if (c.attention_scale < 0.0) return "attention scale";
  if (rope::depends_on_length(c)) return "dynamic RoPE";
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.window_left(i) >= 0) return "a sliding window";
  }
  return "";
}

}  // namespace

TokenRunner::TokenRunner(const ModelConfig& cfg, bool wanted, bool tensor_parallel,
                         const float* inv_freq, float attention_factor, Device device)
    : device_(device) {
  if (!wanted) {
    why_not_ = "off (KVATTN_TOKEN_KERNEL=0)";
    return;
  }
  why_not_ = model_not_covered(cfg, tensor_parallel);
  if (!why_not_.empty()) return;
  shape_.num_layers = static_cast<int>(cfg.num_layers);
  shape_.hidden = static_cast<int>(cfg.hidden_size);
  shape_.num_heads = static_cast<int>(cfg.num_heads);
  shape_.num_kv_heads = static_cast<int>(cfg.num_kv_heads);
  shape_.head_dim = static_cast<int>(cfg.head_dim);
  shape_.inter = static_cast<int>(cfg.intermediate_size);
  shape_.eps = static_cast<float>(cfg.rms_norm_eps);
  shape_.scale = static_cast<float>(cfg.attention_scale);
  shape_.inv_freq = inv_freq;
  shape_.theta = static_cast<float>(cfg.rope_theta);
  shape_.attention_factor = attention_factor;
  shape_.rotary_dim = static_cast<int>(cfg.rope_dim());
  shape_.interleaved = cfg.rope_style == ModelConfig::RopeStyle::kInterleaved;
  if (token_flow_wanted()) plan_ = token_layers_plan(shape_, device.index, /*flow=*/true);
  if (!plan_.ok) plan_ = token_layers_plan(shape_, device.index);  // the five-phase form
  if (!plan_.ok) {
    why_not_ = plan_.why_not;
    return;
  }
  workspace_ = Tensor::empty({static_cast<int64_t>(plan_.workspace_bytes)}, DType::kU8, device);
  barrier_ = Tensor::empty({16}, DType::kU8, device);
  CUDA_CHECK(cudaMemset(barrier_.data(), 0, 16));
  if (plan_.flow) {
    flow_state_ = Tensor::empty({static_cast<int64_t>(plan_.flow_state_bytes)}, DType::kU8, device);
    CUDA_CHECK(cudaMemset(flow_state_.data(), 0, plan_.flow_state_bytes));
  }
  (void)cuda::fault_word_ptr(device.index);  // created outside any capture
  if (const char* pf = std::getenv("KVATTN_TOKEN_PREFETCH"); pf != nullptr && pf[0] >= '0' && pf[0] <= '2' && pf[1] == 0) {
    prefetch_ = pf[0] - '0';
  }
  const char* prof = std::getenv("KVATTN_TOKEN_PROFILE");
  if (prof != nullptr && std::strcmp(prof, "1") == 0) {
    const int64_t n = int64_t{plan_.ctas} * shape_.num_layers * kStampEnd + plan_.ctas *
                      shape_.num_layers + 2;  // kStampEnd + 1 stamps a layer, then the wall
    stamps_ = Tensor::empty({n * 8}, DType::kU8, device);
    CUDA_CHECK(cudaMemset(stamps_.data(), 0, n * 8));
  }
}

TokenRunner::~TokenRunner() {
  if (stamps_.defined()) print_profile();
}

void TokenRunner::print_profile() const {
  const int per = kStampEnd + 1;
  const size_t n = size_t(plan_.ctas) * shape_.num_layers * per;
  std::vector<unsigned long long> h(n + 2);
  if (cudaMemcpy(h.data(), stamps_.data(), h.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  const unsigned long long wall = h[n + 1] - h[n];
  // CTA 0's cycles from its first stamp to its last: the clock's rate against the wall time.
  const int64_t cycles = static_cast<int64_t>(h[size_t(shape_.num_layers - 1) * per + kStampEnd - 1] - h[0]);
  h.resize(n);
  std::fprintf(stderr, "%s",
               token_profile_summary(h, plan_.ctas, shape_.num_layers, wall, cycles, plan_.flow)
                   .c_str());
}

std::string token_profile_summary(const std::vector<unsigned long long>& st, int ctas,
                                  int layers, unsigned long long wall_ns, int64_t cycles,
                                  bool flow) {
  const int per = kStampEnd + 1;
  const double ns_per_cycle = cycles > 0 ? double(wall_ns) / double(cycles) : 0.0;
  static const char* names[kStampEnd] = {
      "A norm", "A slab wait", "A gemv", "A barrier", "B prepare", "B keys", "B barrier",
      "C merge", "C slab wait", "C gemv", "C barrier", "D norm", "D slab wait", "D gemv",
      "D barrier", "E stage", "E slab wait", "E gemv", "E barrier"};
  // The three-phase kernel's stamps (token_flow.cu) at the same indices.
  static const char* flow_names[kStampEnd] = {
      "A norm", "A slab wait", "A gemv", "A barrier", "B prepare", "B keys", "B arrive/merge",
      "B head wait", "B slab wait", "B o share", "B barrier", "D norm", "D slab wait",
      "D gate_up", "D (none)", "D stage next", "D slab wait", "D down share", "D barrier"};
  std::string out = "token kernel profile (last launch, us per layer, mean / max over CTAs):\n";
  for (int k = 0; k < kStampEnd; ++k) {
    if (flow && k == kStampD3) continue;  // D3 and E0 are one point there
    double sum = 0.0, worst = 0.0;
    int count = 0;
    for (int b = 0; b < ctas; ++b) {
      for (int l = 0; l < layers; ++l) {
        const size_t at = (size_t(b) * layers + l) * per;
        // B's "prepared" stamp exists only on CTAs with an item: B0 -> B2 there.
        int k0 = k, k1 = k + 1;
        if (k == kStampB0 || k == kStampB1) {
          if (st[at + kStampB1] == 0 || st[at + kStampB1] < st[at + kStampB0]) {
            if (k == kStampB1) continue;
            k1 = kStampB2;
          }
        }
        if (k == kStampE3 && l + 1 == layers && !flow) continue;  // no barrier after the last
        if (st[at + k1] < st[at + k0]) continue;
        const double us = double(st[at + k1] - st[at + k0]) * ns_per_cycle * 1e-3;
        sum += us;
        worst = std::max(worst, us);
        ++count;
      }
    }
    const double mean = count > 0 ? sum / count : 0.0;
    char line[160];
    std::snprintf(line, sizeof line, "  %-16s %7.2f / %7.2f\n", flow ? flow_names[k] : names[k],
                  mean, worst);
    out += line;
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "  launch %.1f us (CTA 0's wall clock), %.3f ns a cycle, %d layers, %d CTAs\n",
                double(wall_ns) * 1e-3, ns_per_cycle, layers, ctas);
  out += line;
  return out;
}

void TokenRunner::bind(const std::vector<TokenLayer>& layers, int64_t block_size,
                       int64_t num_blocks) {
  bound_ = false;
  if (!plan_.ok || layers.empty()) return;
  const auto bytes = static_cast<int64_t>(layers.size() * sizeof(TokenLayer));
  if (!layers_.defined() || layers_.nbytes() < bytes) {
    layers_ = Tensor::empty({bytes}, DType::kU8, device_);
  }
  CUDA_CHECK(cudaMemcpy(layers_.data(), layers.data(), bytes, cudaMemcpyHostToDevice));
  maps_.clear();
  if (plan_.flow) {
    for (const TokenLayer& l : layers) maps_.push_back(token_layers_tensor_maps(shape_, plan_, l));
  }
  block_size_ = block_size;
  num_blocks_ = num_blocks;
  bound_ = true;
}

void TokenRunner::run(const int32_t* position, const int32_t* slot, const int32_t* context_len,
                      const int32_t* block_table, int64_t table_width, void* x, void* x2,
                      void* o, void* qkv, void* act, cudaStream_t stream) const {
  TokenLayersArgs a;
  a.layers = static_cast<const TokenLayer*>(layers_.data());
  a.position = position;
  a.slot = slot;
  a.context_len = context_len;
  a.block_table = block_table;
  a.table_width = table_width;
  a.block_size = block_size_;
  a.num_blocks = num_blocks_;
  a.x = x;
  a.x2 = x2;
  a.o = o;
  a.qkv = qkv;
  a.act = act;
  a.workspace = static_cast<float*>(workspace_.data());
  a.barrier = static_cast<unsigned*>(barrier_.data());
  a.fault_word = cuda::fault_word_ptr(device_.index);
  a.prefetch = prefetch_;
  if (plan_.flow) {
    a.maps = maps_.data();
    a.flow_state = flow_state_.data();
  }
  if (stamps_.defined()) {
    auto* st = static_cast<unsigned long long*>(stamps_.data());
    a.stamps = st;
    a.wall = st + int64_t{plan_.ctas} * shape_.num_layers * (kStampEnd + 1);
  }
  token_layers(shape_, plan_, a, stream);
}

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
