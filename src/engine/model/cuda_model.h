// Internal: what the GPU model did, for tests and debugging (the engine only sees Model).
#pragma once

#include <cstdint>
#include <vector>

#include "kvattn/engine/model.h"

namespace kvattn {

struct CudaModelStats {
  int64_t graph_captures = 0;     // decode graphs captured (every rung of every pool)
  // rung 1's twin without the token kernel, for single contexts longer than it takes
  int64_t layered_one_captures = 0;
  int64_t graph_replays = 0;      // decode steps replayed from a graph
  int64_t fixed_eager_steps = 0;  // padded decode steps launched eagerly (cuda_graphs off)
  int64_t general_steps = 0;      // prefill / mixed steps, and decode steps off the ladder
  int64_t graph_drops = 0;        // captured graphs dropped because the activations grew
  int64_t activation_tokens = 0;  // rows the activation buffers hold
  int64_t activation_rows = 0;    // logit rows they hold
  int64_t decode_table_width = 0; // fixed block-table width of the graph path (0: not set up)
  bool fused_kernels = false;     // ModelOptions::fused_kernels after KVATTN_UNFUSED
  bool pdl = false;  // ModelOptions::pdl after KVATTN_PDL=0 and the device's support
  bool fused_gemv = false;  // ModelOptions::fused_gemv after KVATTN_FUSED_GEMV
  int64_t fused_gemv_steps = 0;  // run_layers calls that took the fused GEMV path
  // the qkv GEMV may run the q/k norm + RoPE + KV write (KVATTN_FUSED_ROPE, _PAIRS)
  bool fused_rope = false;
  int64_t fused_rope_layers = 0;  // layers whose qkv GEMV ran the q/k norm + RoPE + KV write
  // The token kernel (token_layers/token_runner.h; on unless KVATTN_TOKEN_KERNEL=0) is planned and bound
  // to the pool, and the steps that took it.
  bool token_kernel = false;
  int64_t token_kernel_steps = 0;
  int64_t token_kernel_max_context = 0;  // longer single contexts keep the layered path
  bool token_kernel_flow = false;  // the three-phase form (KVATTN_TOKEN_FLOW=1, token_flow.cu)
  std::vector<int64_t> ladder;    // padded decode batch sizes
};

// Throws kvattn::Error unless `model` is the CUDA model.
CudaModelStats cuda_model_stats(const Model& model);

// The padded decode batch sizes: 1, 2, 4, 8, then every multiple of 16 below
// max_decode_batch, then max_decode_batch itself (empty when it is <= 0).
std::vector<int64_t> decode_graph_ladder(int64_t max_decode_batch);

}  // namespace kvattn
