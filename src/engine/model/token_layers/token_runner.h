// The CUDA model's side of the token kernel (token_layers.h): which models and steps take it,
// its plan, and the device state it keeps (the layers' pointer table, rebuilt when the model's
// KV pool changes; the attention workspace; the grid barrier's word).
//
// On by default (KVATTN_TOKEN_KERNEL=0 turns it off) since session 35, when the length rule
// (CudaModel::token_fits: single contexts longer than the kernel reads in one round replay rung
// 1's layered twin graph) and every engine GPU test ran with it on a GPU (H100: SmolLM2-135M's
// single stream 1,378 -> 1,590 tok/s, Qwen3-0.6B 964 -> 1,058; at 1,024 and 4,096 prompt tokens
// equal to the layered path, which takes those steps). Tests that compare bit for bit against a
// configuration without it pin it off. A step takes it
// when it decodes one token of one sequence (the batch-1 rung of the decode graphs, or the
// eager step of one row) over a bf16 or fp8 cache, on a model the kernel covers: one rank, the
// Llama / Qwen3 layer (SiLU, no biases, no sandwich norms, no window or soft-cap, RoPE without
// dynamic scaling) and the plan's shape limits. KVATTN_TOKEN_FLOW=1 selects the three-phase
// form (token_flow.cu) where its plan fits, the five-phase one otherwise.
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/token_layers/token_layers.h"
#include "kvattn/core/tensor.h"
#include "kvattn/engine/model_config.h"

namespace kvattn::cuda_model {

class TokenRunner {
 public:
  TokenRunner() = default;
  TokenRunner(TokenRunner&&) = default;
  TokenRunner& operator=(TokenRunner&&) = default;
  ~TokenRunner();
  // `wanted`: the switch (token_kernel_wanted()). inv_freq: the model's RoPE table on the device.
  TokenRunner(const ModelConfig& cfg, bool wanted, bool tensor_parallel, const float* inv_freq,
              float attention_factor, Device device);

  bool planned() const { return plan_.ok; }
  // The three-phase kernel (KVATTN_TOKEN_FLOW=1 and its plan fits), else the five-phase one.
  bool flow() const { return plan_.ok && plan_.flow; }
  const std::string& why_not() const { return why_not_; }
  // The layers' pointers for a bound pool (bf16 or float8_e4m3 caches), or none (unbound: not
  // taken).
  void bind(const std::vector<TokenLayer>& layers, int64_t block_size, int64_t num_blocks);
  bool ready() const { return plan_.ok && bound_; }
  // The longest context (keys, this token's included) whose attention pieces fit one round
  // each (TokenLayersPlan::max_context); 0 when not planned.
  int64_t max_context() const { return plan_.ok ? plan_.max_context : 0; }

  // One token through every layer: x holds the embedding row; on return x2 holds the final
  // residual and o the last down projection (token_layers). Device pointers; graph-safe.
  void run(const int32_t* position, const int32_t* slot, const int32_t* context_len,
           const int32_t* block_table, int64_t table_width, void* x, void* x2, void* o,
           void* qkv, void* act, cudaStream_t stream) const;

 private:
  TokenShape shape_;
  TokenLayersPlan plan_;
  std::string why_not_;
  Device device_;
  Tensor layers_, workspace_, barrier_;
  // The three-phase kernel's (token_layers.h TokenLayersArgs): the layers' tensor maps (host:
  // they travel in the launch's parameters) and its state.
  std::vector<TokenMaps> maps_;
  Tensor flow_state_;
  // KVATTN_TOKEN_PROFILE=1: the last launch's phase stamps (token_layers.h), summarised on
  // stderr when the runner goes (profile_summary).
  Tensor stamps_;
  void print_profile() const;
  bool bound_ = false;
  int prefetch_ = 2;  // TokenLayersArgs::prefetch (KVATTN_TOKEN_PREFETCH=0|1|2)
  int64_t block_size_ = 0, num_blocks_ = 0;
};

bool token_kernel_wanted();  // unless KVATTN_TOKEN_KERNEL=0
// KVATTN_TOKEN_FLOW=1: the three-phase kernel (token_flow.cu) where it fits. Off: measured
// slower than the five-phase one (session 35, H100: SmolLM2-135M 1,540 vs 1,590 tok/s,
// Qwen3-0.6B 1,026 vs 1,056; docs/notes/single-stream-decode.md).
bool token_flow_wanted();

// The phases' mean durations over CTAs and layers from a launch's stamps (token_layers.h),
// in us at the rate the two wall stamps give: a table, one line per interval.
std::string token_profile_summary(const std::vector<unsigned long long>& stamps, int ctas,
                                  int layers, unsigned long long wall_ns, int64_t cycles,
                                  bool flow = false);

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
