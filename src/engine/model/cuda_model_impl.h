// The GPU model's class (cuda_model.cpp says what it does and how) and what its two source
// files share: cuda_model.cpp (construction, buffers, graphs, memory planning, the
// factory) and cuda_model_step.cpp (the steps: forward, the fixed and general paths, the
// layers). Internal to them.
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/cuda_gemm.h"
#include "engine/model/cuda_gemma.h"
#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_kv_amax.h"
#include "engine/model/cuda_model.h"
#include "engine/model/cuda_phase_events.h"
#include "engine/model/cuda_rope_kv.h"
#include "engine/model/cuda_sampling.h"
#include "engine/model/cuda_step_events.h"
#include "engine/model/factories.h"
#include "engine/model/kv_copy.h"
#include "engine/model/kv_scales.h"
#include "engine/model/rope.h"
#include "engine/model/token_layers/token_runner.h"
#include "engine/parallel/nccl_comm.h"
#include "kernels/cuda/cuda_check.h"
#include "kvattn/attention/attention.h"
#include "kvattn/cache/kv_pool.h"
#include "kvattn/kernels/decode_attention.h"

namespace kvattn::cuda_model_detail {

namespace k = cuda_model;
using k::SampleParams;

struct Layer {
  // bf16 on the device; with Gemma's sandwich norms the four norms (input_norm, post_norm =
  // pre_feedforward_layernorm, attn_out_norm = post_attention_layernorm, ffn_out_norm =
  // post_feedforward_layernorm) are float32 (cuda_gemma.h), otherwise attn/ffn_out_norm are
  // undefined and post_norm is post_attention_layernorm (Gemma 1: float32 too, its two norms
  // run in the Gemma kernels with no sandwich norm: a null w_add).
  Tensor input_norm, post_norm, wqkv, q_norm, k_norm, wo, wgate_up, wdown;
  Tensor attn_out_norm, ffn_out_norm;
  Tensor qkv_bias, o_bias;  // bf16 [(H + 2 KVH) * D] and [hidden], or undefined (no biases)
  bool local_rope = false;  // Gemma 3's sliding layers: inv_freq_local_
  std::unique_ptr<Attention> attn;
  k::KVWrite kv;  // the caches attn is bound to (and their scales); slot_mapping set per step
};

// A device buffer that only grows (not used by graphs).
struct Buffer {
  Tensor t;
  void* ensure(int64_t bytes, Device d) {
    if (!t.defined() || t.nbytes() < bytes) {
      t = Tensor();
      t = Tensor::empty({std::max<int64_t>(bytes, 256)}, DType::kU8, d);
    }
    return t.data();
  }
};

// Page-locked host memory that only grows (contents are not kept).
class Pinned {
 public:
  Pinned() = default;
  ~Pinned() {
    if (p_ != nullptr) cudaFreeHost(p_);
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  void* ensure(size_t bytes) {
    if (bytes > bytes_) {
      if (p_ != nullptr) CUDA_CHECK(cudaFreeHost(p_));
      p_ = nullptr;
      bytes_ = 0;
      CUDA_CHECK(cudaMallocHost(&p_, std::max<size_t>(bytes, 4096)));
      bytes_ = std::max<size_t>(bytes, 4096);
    }
    return p_;
  }
  void* data() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

inline size_t align16(size_t x) { return (x + 15) / 16 * 16; }

// An opt-out switch of the environment: `name` set to exactly "0".
inline bool env_switch_off(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, "0") == 0;
}

// KVATTN_SAMPLE_SPLIT=0 keeps the sampler at one CTA per row (bench comparisons); the
// tokens are the same either way.
inline int sample_max_slices() {
  static const int v =
      env_switch_off("KVATTN_SAMPLE_SPLIT") ? 1 : static_cast<int>(k::kSampleMaxSlices);
  return v;
}

// KVATTN_TP_SKIP_COMM=1 (timing experiments only: the outputs are then wrong) leaves out every
// collective, so a run with and without it gives the share of step time spent in NCCL.
inline bool skip_collectives() {
  static const bool skip = [] {
    const char* e = std::getenv("KVATTN_TP_SKIP_COMM");
    return e != nullptr && e[0] == '1';
  }();
  return skip;
}

inline std::span<const int32_t> host_span(const TensorView& t) {
  if (!t.defined()) return {};
  KVATTN_CHECK(t.dtype == DType::kI32 && t.device.is_cpu() && t.is_contiguous(),
               "cuda model: BatchContext tensors must be contiguous int32 host tensors but one is ",
               t.dtype, " on ", t.device);
  return {t.ptr<const int32_t>(), static_cast<size_t>(t.numel())};
}

class CudaModel final : public Model {
 public:
  CudaModel(ModelWeights w, Device device, const ModelOptions& options, const RankContext& rank);
  ~CudaModel() override;

  const ModelConfig& config() const override { return cfg_; }
  Device device() const override { return device_; }
  DType kv_dtype() const override { return kv_dtype_; }
  int64_t num_kv_blocks() const override { return pool_ ? pool_->num_blocks() : 0; }
  int64_t kv_block_size() const override { return pool_ ? pool_->spec().block_size : 0; }

  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override;
  void forward(const ModelInput& in, std::span<float> logits) override;
  bool samples_on_device() const override { return true; }
  void forward_sample(const ModelInput& in, std::span<const RowSampling> rows,
                      std::span<int32_t> tokens, std::span<const int32_t> copy_rows,
                      std::span<float> logits) override;
  void copy_kv_blocks(std::span<const BlockCopy> copies) override;
  int64_t kv_cache_budget(int64_t max_num_batched_tokens, double memory_fraction) override;
  void set_kv_scales(std::span<const float> k, std::span<const float> v) override;
  // fp8 calibration (Model::track_kv_amax): while on, every step runs the general (eager) path
  // and each layer folds its rows' |k| and |v| into per-head maxima on the device
  // (cuda_kv_amax.h); kv_amax() copies them out. One rank only.
  void track_kv_amax(bool on) override;
  void kv_amax(std::span<float> k, std::span<float> v) const override;
  // Per-phase times (cuda_phase_events.h): while on, decode steps run eagerly (no graph
  // capture or replay); the figures are eager steps'. Not yet run on a GPU.
  bool set_phase_timing(bool on) override {
    phase_.on = on;
    return true;
  }
  PhaseTimes last_phase_times() const override { return phase_.times(); }
  // Step timeline (cuda_step_events.h): two events a step, graphs staying on.
  bool set_step_timeline(bool on) override {
    timeline_.on = on;
    timeline_.clear();
    return true;
  }
  StepTimeline step_timeline() override {
    cuda::DeviceGuard guard(device_.index);
    return timeline_.summary();
  }
  void clear_step_timeline() override { timeline_.clear(); }

  CudaModelStats stats() const;

 private:
  struct Out {
    std::span<float> logits;           // forward(): every row; forward_sample(): copy_rows'
    std::span<const RowSampling> rows;  // forward_sample()
    std::span<int32_t> tokens;
    std::span<const int32_t> copy_rows;  // forward_sample()
    bool sample = false;
  };
  struct Activations {
    Tensor x, h, qkv, attn, o, gate_up, act, fin, logits;
    // The fused GEMV path's second residual buffer [Gemv::kMaxRows, hidden] (run_layers), or
    // undefined when that path is off.
    Tensor x2;
    // Tensor parallel: every rank's vocab slice of the logit rows [size, rows, slice], and the
    // rows laid out whole [rows, size * slice] (the first full_vocab entries are real).
    Tensor gathered, full_logits;
    int64_t tokens = 0, rows = 0;
  };
  // The fixed decode path (valid for one pool).
  struct Fixed {
    bool ready = false;
    int64_t max_batch = 0, width = 0, block_size = 0;
    std::vector<int64_t> ladder;
    std::vector<DecodePlan> plans;
    Tensor dev;        // header | out | table
    Tensor workspace;  // decode split-KV workspace, the largest over the ladder
    Pinned host;       // header mirror | out | compact table staging
    size_t off_tokens = 0, off_pos = 0, off_slots = 0, off_lens = 0, off_rows = 0,
           off_params = 0, off_meta = 0, off_compact = 0, off_out = 0, off_table = 0, total = 0;
    std::vector<cudaGraphExec_t> graphs;  // per rung; null until captured
    // Rung 1 without the token kernel (one sequence longer than it takes: token_fits).
    cudaGraphExec_t graph_one_layered = nullptr;
    std::vector<bool> graph_takes_token;  // per rung: its graph holds the token kernel
  };

  void step(const ModelInput& in, const Out& out);
  void check_input(const ModelInput& in, const Out& out) const;
  int64_t pool_table_width() const;
  bool fixed_eligible(const ModelInput& in) const;
  void step_fixed(const ModelInput& in, const Out& out);
  void step_general(const ModelInput& in, const Out& out);
  void finish(int64_t R, const Out& out, const int32_t* dev_tokens);
  // rope_lens: dynamic NTK's sequence length per token, or null (position + 1).
  void run_layers(int64_t T, int64_t R, const int32_t* ids, const int32_t* pos,
                  const int32_t* rows, const int32_t* rope_lens, const BatchContext& ctx);
  // Dynamic NTK: each token's sequence length after this step (rope.h), from cu_seqlens_q.
  void rope_lengths(const ModelInput& in, std::vector<int32_t>& lens) const;
  // Tensor parallel: sums a row-parallel partial result over the ranks (in place).
  void all_reduce(void* buf, int64_t count);
  // The logits of every vocab id for the step's rows, and their row stride (elements).
  const void* full_logits() const;
  int64_t full_logits_ld() const;
  bool tensor_parallel() const { return rank_.nccl != nullptr; }
  void run_fixed_body(size_t rung);
  // Typed views of the pinned header mirror (layout in the file comment).
  struct HostHeader {
    int32_t *tok, *pos, *slot, *len, *row, *meta;
    SampleParams* prm;
    char* compact;
    // Rows [from, to) become pad rows: token 0, position 0, slot -1, context length 0.
    void pad_rows(int64_t from, int64_t to) const;
  };
  HostHeader host_header();
  void write_pad_header();
  void upload_header(size_t table_bytes);
  // Captures rung's fixed body into slot (fx_.graphs[rung], or fx_.graph_one_layered).
  void capture(size_t rung, cudaGraphExec_t& slot);
  void setup_fixed(int64_t width, int64_t block_size);
  void release_fixed();
  void drop_graphs();
  void ensure_activations(int64_t tokens, int64_t rows);
  void reset_pool(std::unique_ptr<KVPool> pool);
  // The token kernel's layer table for the bound pool (none for an fp8 cache).
  void bind_token_layers();
  // Whether this run_layers call goes through the token kernel (token_runner.h).
  bool token_step(int64_t T, int64_t R, const BatchContext& ctx) const;
  // Whether one sequence of len keys (this step's token included) takes the token kernel:
  // every attention piece then fits one round (TokenLayersPlan::max_context; longer single
  // contexts ran slower in it than on the layered path: session 34 call 9).
  bool token_fits(int64_t len) const { return len <= token_.max_context(); }
  // Set around a step (cleared where it must keep the layered path: token_fits), restored
  // after.
  struct TokenAllowed {
    TokenAllowed(bool& flag, bool value) : flag_(flag), before_(flag) { flag_ = value; }
    ~TokenAllowed() { flag_ = before_; }
    TokenAllowed(const TokenAllowed&) = delete;
    TokenAllowed& operator=(const TokenAllowed&) = delete;
    bool& flag_;
    const bool before_;
  };
  size_t rung_for(int64_t n) const;

  ModelConfig cfg_;  // this rank's shard (vocab_size: its slice) when tensor parallel
  Device device_;
  ModelOptions options_;
  RankContext rank_;
  int64_t full_vocab_ = 0;  // the model's vocabulary (cfg_.vocab_size unless sharded)
  cudaStream_t stream_ = nullptr;
  k::Gemm gemm_;
  Tensor embed_, final_norm_, lm_head_;
  Tensor inv_freq_;  // RoPE's frequencies with their scaling, float32 [head_dim / 2] (rope.h)
  Tensor inv_freq_local_;  // Gemma 3's sliding layers (rope::local_inv_freq), or undefined
  bool gemma_ = false;  // sandwich norms or an embedding scale: the Gemma layer (cuda_gemma.h)
  float embed_scale_ = 0.0f;   // bf16(embedding_scale) as a float; 0 => none
  float final_softcap_ = 0.0f;  // 0 => none
  std::vector<Layer> layers_;
  std::unique_ptr<KVPool> pool_;
  // float8_e4m3 caches: the scales, float32 [2][num_layers][num_kv_heads] on the device (K then
  // V; 1.0 until set_kv_scales), bound by each layer's Attention as views, so new values need no
  // rebinding and the captured graphs keep their pointers. kv_scales_host_ validates them.
  DType kv_dtype_ = DType::kBF16;
  cpu_model::KvScales kv_scales_host_;
  Tensor kv_scales_dev_;
  // track_kv_amax: the running maxima, float32 [2][num_layers][num_kv_heads] (K then V), and
  // whether the layers record into them.
  Tensor kv_amax_dev_;
  bool track_amax_ = false;
  k::KVBlockCopier copier_;
  Activations act_;
  Fixed fx_;
  Buffer meta_, workspace_, gen_tokens_, cascade_ws_;
  Tensor sample_scratch_;  // k::kSampleScratchBytes: the sampler's split form (small batches)
  Pinned pinned_meta_, pinned_logits_, pinned_tokens_;
  std::vector<SampleParams> params_;
  std::vector<int32_t> rope_lens_;  // dynamic NTK only
  bool planned_ = false;  // kv_cache_budget ran: capture the whole ladder at allocate_kv_cache
  bool fused_ = true;     // options_.fused_kernels && !KVATTN_UNFUSED (read at construction)
  // Our kernels launched with programmatic dependent launch (cuda_launch.h): options_.pdl or
  // KVATTN_PDL (pdl_wanted), and the device and toolkit support it (read at construction).
  bool pdl_ = false;
  // The decode attention launched with PDL too (BatchContext::decode_pdl): pdl_, unless
  // KVATTN_DECODE_PDL=0 (H200, session 17: single stream +3.9%, 927 -> 965 tok/s). Sound: the
  // step's lengths and block tables are written by copies and the block-table scatter at the
  // start of the step, which have completed by the time a layer's attention is launched (the
  // kernel before it, the q/k norm + RoPE or the qkv GEMV running it as its epilogue, waited for
  // its own predecessor's completion).
  bool decode_pdl_ = false;
  // Decode steps of <= Gemv::kFusedPreferredRows rows through the fused GEMV entries (ModelOptions::fused_gemv or
  // KVATTN_FUSED_GEMV; one rank, not Gemma, SiLU): read at construction.
  bool fused_gemv_ = false;
  // The fused GEMV path's qkv projection runs the q/k norm + RoPE + KV write as its epilogue
  // (Gemv::run_rmsnorm_rope_kv) with KVATTN_FUSED_ROPE=1; off by default: bit-equal but slower
  // on the H200 (session 18: single stream -4.7%; docs/notes/single-stream-decode.md).
  bool fused_rope_ = false;
  // The same epilogue by rotation pairs (Gemv::run_rmsnorm_rope_pairs: heads without q/k
  // norms, rotated whole, no qkv bias; no clusters) with KVATTN_FUSED_ROPE_PAIRS=1 on models it
  // covers; off by default: bit-equal but no faster (H100, session 33: SmolLM2's single stream
  // 1,335-1,357 tok/s with it against 1,359-1,367 without, alternating).
  bool fused_rope_pairs_ = false;
  // One decode token of one sequence through every layer in one persistent kernel
  // (token_layers/token_runner.h; on unless KVATTN_TOKEN_KERNEL=0) where the sequence's
  // context fits it (token_fits).
  k::TokenRunner token_;
  bool token_allowed_ = true;  // TokenAllowed
  bool took_token_ = false;    // the last run_layers call went through the token kernel
  CudaModelStats stats_;
  k::PhaseEvents phase_;
  k::StepEvents timeline_;
};

}  // namespace kvattn::cuda_model_detail

#endif  // KVATTN_WITH_CUDA
