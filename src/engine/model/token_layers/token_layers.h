// One decode token of one sequence through every decoder layer in a single persistent kernel
// (issue 20: the single stream's fixed cost per kernel; docs/notes/single-stream-decode.md,
// option 3). The kernel runs one CTA per SM, co-resident by a cooperative launch, and the
// phases of a layer meet at grid barriers instead of kernel boundaries:
//   A  input norm (every CTA, redundantly) + the qkv GEMV rows the CTA owns
//   B  attention: q/k norm + RoPE of the token, the KV write, and (KV head, key range) pieces
//   C  the pieces merged (every CTA, redundantly) + the o_proj GEMV rows
//   D  residual add + post-attention norm + the gate_up GEMV with SiLU * up
//   E  the down GEMV rows
// What a kernel boundary cannot do, the barriers allow: each GEMV phase's weight rows are
// copied into shared memory (bulk copies on an mbarrier) one phase ahead, and the cached K/V
// rows a CTA attends first are copied in during the previous layer's phase E (the cache below
// the token does not change in the launch); after a barrier a phase computes from shared
// memory and reads only the small activations from L2.
//
// A three-phase form (token_flow.cu, TokenLayersPlan::flow) removes two of the four barriers:
// o_proj and down are split over the CTAs by columns (split-K) and summed in fixed point, and
// each CTA waits for its o_proj share's KV head on an arrival counter instead of a grid barrier,
// then merges that query head's pieces itself. Measured slower than the five-phase form
// (token_runner.h), so opt-in.
//
// Arithmetic follows the unfused path where its bits are cheap to keep: the norms are
// norm_stage's (cuda_gemv.cu) and the q/k norm + RoPE + cache bytes are cuda_rope_math.cuh's,
// so the caches hold what qk_norm_rope_store_kv writes. The projections sum in another order
// than the GEMV (fp32, rounded to bf16 once) and the attention is fp32 throughout (the decode
// kernel rounds P to bf16), so logits differ from the layered path at rounding level.
//
// Eligible models (token_layers_plan says why not): no biases, SiLU, no sliding window,
// soft-cap or dynamic RoPE, head_dim 64 or 128, GQA group <= 8, dims multiples of 8, a bf16
// KV cache, and every phase's shared memory within the device's opt-in limit (small models:
// SmolLM2-135M, Qwen3-0.6B). sm_90 only (bulk copies).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/model/token_layers/token_split.h"

namespace kvattn::cuda_model {

// A layer's device pointers (bf16 unless said). q_norm / k_norm: both or neither.
struct TokenLayer {
  const void* input_norm;
  const void* post_norm;
  const void* wqkv;  // [(nh + 2 nkv) * D, hidden]
  const void* q_norm;
  const void* k_norm;
  const void* wo;        // [hidden, nh * D]
  const void* wgate_up;  // [2 * inter, hidden]: gate rows, then up rows
  const void* wdown;     // [hidden, inter]
  void* k_cache;         // [num_blocks, block_size, nkv, D]: bf16, or float8_e4m3 codes
  void* v_cache;
  int64_t k_block_stride, v_block_stride;  // elements
  // float8_e4m3 caches: the layer's scales [nkv] (a key reads as code x k_scale[head]; store_kv's
  // convention). Null for bf16 caches.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};

// A layer's TMA descriptors for the three-phase kernel (plain, unswizzled boxes): o_proj
// [hidden, nh * D] in boxes of (D columns, o_box_rows rows), down [hidden, inter] in boxes of
// (rows_gate_up columns, down_box_rows rows) (token_layers_tensor_maps).
struct TokenMaps {
  CUtensorMap o;
  CUtensorMap down;
};

// Whether (and how) `shape` runs on `device` (no allocation, no launch), as the five-phase
// kernel, or with `flow` as the three-phase one (token_flow.cu).
TokenLayersPlan token_layers_plan(const TokenShape& shape, int device, bool flow = false);

// The three-phase kernel's tensor maps of one layer (host; the plan's boxes).
TokenMaps token_layers_tensor_maps(const TokenShape& shape, const TokenLayersPlan& plan,
                                   const TokenLayer& layer);

// One step's inputs and buffers (device pointers).
struct TokenLayersArgs {
  const TokenLayer* layers;  // [num_layers], device memory
  const int32_t* position;   // [1]
  const int32_t* slot;       // [1]; < 0: nothing written to the caches
  const int32_t* context_len;  // [1], keys including this token; 0: a pad row
  const int32_t* block_table;  // [table_width]
  int64_t table_width = 0, block_size = 0, num_blocks = 0;
  void* x;    // the residual after the embedding [hidden]; also the first of the two buffers
  void* x2;   // the other residual buffer [hidden]: holds the final residual on return
  void* o;    // [hidden]: holds the last down projection on return
  void* qkv;  // [(nh + 2 nkv) * D] scratch
  void* act;  // [inter] scratch
  float* workspace;        // plan.workspace_bytes
  unsigned* barrier;       // one word, zero before the first launch (self-resetting after)
  uint32_t* fault_word;
  // The three-phase kernel only: its layers' tensor maps [num_layers] (host memory: they
  // travel in the kernel's parameters) and its state (device memory, plan.flow_state_bytes,
  // zeroed once when allocated; the kernel leaves it reusable).
  const TokenMaps* maps = nullptr;
  void* flow_state = nullptr;
  // When the CTA's first K/V round is copied in: 0 in phase B, 1 in phase A after the input
  // norm, 2 in the previous layer's phase E (the default: copies still in flight at a grid
  // barrier hold the CTA's arrival back, ~3 us at phase A's; session 34 call 5:
  // KVATTN_TOKEN_PREFETCH=0 / 1 / 2 gave SmolLM2's single stream 1,486 / 1,433 / 1,531 tok/s).
  int prefetch = 2;
  // Diagnostics, normally null: [ctas][num_layers][20] clock64 stamps (TokenStamp) and [2]
  // globaltimer ns at CTA 0's start and end (the clock's rate).
  unsigned long long* stamps = nullptr;
  unsigned long long* wall = nullptr;
};

// The stamps' order within a layer (each phase: start after its barrier, inputs staged, weight
// slab landed, done before the next barrier; B: start, the first item's token prepared, done).
enum TokenStamp : int {
  kStampA0, kStampA1, kStampA2, kStampA3, kStampB0, kStampB1, kStampB2, kStampC0, kStampC1,
  kStampC2, kStampC3, kStampD0, kStampD1, kStampD2, kStampD3, kStampE0, kStampE1, kStampE2,
  kStampE3, kStampEnd
};

// Launches the kernel (cooperative, graph-capturable). The final residual is in args.x2 and
// the last layer's down projection in args.o (add_rmsnorm(x2, o) gives the final norm's input).
void token_layers(const TokenShape& shape, const TokenLayersPlan& plan,
                  const TokenLayersArgs& args, cudaStream_t stream);

}  // namespace kvattn::cuda_model
