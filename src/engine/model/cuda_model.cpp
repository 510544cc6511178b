// The GPU model: bf16 weights and activations, cuBLASLt GEMMs, fused add+RMSNorm, q/k-norm+RoPE
// and SiLU*up kernels, attention through kvattn's Attention layer over a bf16 KVPool, token
// sampling on the device (cuda_sampling.h). The families' features as the CPU model has them:
// RoPE from rope.h's frequency table (scaling, YaRN's multiplier, dynamic NTK per token:
// cuda_rope_kv.h), q/k/v biases added after the QKV GEMM and the o_proj bias after o_proj's
// all-reduce (add_bias), each layer's sliding window handed to its Attention.
//
// Gemma 2 / Gemma 3 (ModelConfig::sandwich_norms; kernels in cuda_gemma.h) as the CPU model
// runs them: the embedding rows times bf16(sqrt(hidden)) (HF's bf16 normalizer), Gemma's
// RMSNorm (float32 math, float32 weights with the (1 + w) fold done at load as the CPU model
// does; rounded once), the sandwich norms fused with the residual add and the next norm,
// GeGLU, q/k norms (Gemma 3, the q/k-norm + RoPE kernel with (1 + w) folded into its bf16
// weights), the local RoPE table on Gemma 3's sliding layers (plain RoPE at
// rope_local_theta: no scaling, no YaRN factor, no dynamic NTK), the attention scale and
// logit soft-cap in each layer's Attention, and the final logit soft-cap on the logit rows
// before sampling (after the tensor-parallel gather), so graphs replay it too.
//
// Fused kernels (ModelOptions::fused_kernels, on unless KVATTN_UNFUSED=1): once a pool is
// bound, each layer's q/k norm + RoPE kernel also writes the step's K and V into the paged
// cache (cuda_rope_kv.h) and the Attention layer is told so (BatchContext::kv_stored), so it
// does not launch store_kv; and the embedding gather also computes the first layer's input
// norm (one rank only). The unfused path (embed, add_rmsnorm; qk_norm_rope, then Attention's
// store_kv) writes the same bytes: greedy tokens are equal either way.
//
// Programmatic dependent launch (ModelOptions::pdl, on by default; KVATTN_PDL=0 turns it off;
// sm_90+ and CUDA 12.3+ only): every kernel of ours (norms, embedding, q/k norm + RoPE, SiLU/GeLU, biases,
// the GEMV, sampling, the block-table scatter) goes through cuda_launch.h's launch_kernel with
// the programmatic-stream-serialization attribute, in graphs and eagerly; each waits for its
// predecessor's completion before touching memory, so the results are the same bytes. cuBLASLt,
// attention and NCCL keep their plain launches (cuda_launch.h says why that stays correct);
// the decode attention takes the attribute too (decode_pdl_; KVATTN_DECODE_PDL=0 keeps it plain).
//
// Fused decode GEMVs (ModelOptions::fused_gemv, on by default; KVATTN_FUSED_GEMV=0 turns them
// off; one rank, not Gemma, SiLU MLPs): a step of at most 4 rows runs each layer's
// input norm inside the qkv GEMV, and the post-attention norm and SiLU * up inside the gate_up
// GEMV (cuda_gemv.h run_rmsnorm / run_rmsnorm_silu), 6 kernels a layer instead of 9. They are
// bit-identical to add_rmsnorm + the GEMV (+ silu_mul), so with KVATTN_GEMV=all the logits
// equal the unfused path's; by default the unfused qkv/gate_up go to cuBLASLt, which sums in
// another order. The residual alternates between two buffers (run_layers says why).
// docs/notes/decode-fused-gemv.md has the design and the predictions.
//
// Two kinds of step:
// - Fixed decode steps: phase decode, one token per sequence, at most max_decode_batch
//   sequences, a block table no wider than the fixed width W. The batch is padded to the next
//   rung of the ladder (1, 2, 4, 8, then every 16; decode_graph_ladder) with pad rows (token
//   0, position 0, slot -1, context length 0: they write nothing and attend to nothing), and
//   every per-step input lives in one fixed device allocation:
//     header  tokens | positions | slots | context_lens | logit_rows | SampleParams   [Bmax each]
//             | (n, w) | the step's block table packed, n rows of w entries
//     out     sampled token ids                                                     [Bmax]
//     table   block table, Bmax rows of W = ceil(min(max_position_embeddings (32768 when
//             unknown), num_blocks * block_size) / block_size) entries
//   A step fills a pinned mirror of the header and copies it, up to the end of its packed
//   table, in one cudaMemcpyAsync. Then it replays the CUDA graph captured for its rung
//   (spread the packed table into the fixed one -> embed -> layers -> final norm -> lm_head
//   -> sampling), or, with cuda_graphs off, launches the same kernels on the same buffers
//   eagerly. Both modes run
//   the same kernels on the same shapes, so their logits and tokens are bit-identical. The
//   decode plan of each rung is made for the capacity W * block_size (graph-safe) and its
//   workspace is allocated before any capture.
// - General steps (prefill, mixed, q_len > 1, or outside the ladder): unpadded, eager; every
//   int32 input (and the sampling parameters) goes up in one copy from pinned memory.
// Either way only the sampled ids (forward_sample) or the logit rows (forward) come back,
// followed by one stream sync.
//
// Buffers: the activations are sized for the largest step seen (kv_cache_budget sizes them
// for max_num_batched_tokens up front). Graphs hold their pointers, so when a later step
// needs larger activations they are reallocated and every graph is dropped (recaptured on
// first use). allocate_kv_cache drops the graphs and the fixed buffers (they depend on the
// pool); after kv_cache_budget it recaptures the whole ladder at once, otherwise each rung is
// captured on first use.
#include "engine/model/cuda_model.h"

#include <algorithm>
#include <utility>

namespace kvattn {

std::vector<int64_t> decode_graph_ladder(int64_t max_decode_batch) {
  std::vector<int64_t> ladder;
  if (max_decode_batch <= 0) return ladder;
  for (int64_t b : {1, 2, 4, 8}) {
    if (b < max_decode_batch) ladder.push_back(b);
  }
  for (int64_t b = 16; b < max_decode_batch; b += 16) ladder.push_back(b);
  ladder.push_back(max_decode_batch);
  return ladder;
}

}  // namespace kvattn

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/cuda_gemm.h"
#include "engine/model/cuda_gemma.h"
#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_kv_amax.h"
#include "engine/model/cuda_phase_events.h"
#include "engine/model/cuda_step_events.h"
#include "engine/model/cuda_rope_kv.h"
#include "engine/model/cuda_sampling.h"
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

namespace kvattn {
namespace {

namespace k = cuda_model;
using k::SampleParams;

// Host weights (float32, or bf16/f16 read in place from the file: HfLoadOptions::keep_16bit)
// go up as bf16 through two pinned staging buffers: while one buffer copies to the device on
// `stream`, the next chunk fills the other (a memcpy from bf16 sources, float_to_bf16 from
// float32 ones, f16 through float32). bf16 -> float32 -> bf16 is exact, so the device weights
// are bit-identical whichever way the file was loaded. The sources are released as they go.
class WeightUploader {
 public:
  WeightUploader(Device device, cudaStream_t stream) : device_(device), stream_(stream) {
    try {
      for (int i = 0; i < 2; ++i) {
        void* p = nullptr;
        CUDA_CHECK(cudaMallocHost(&p, kStageElems * sizeof(bf16_t)));
        stage_[i] = static_cast<bf16_t*>(p);
        CUDA_CHECK(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~WeightUploader() { release(); }
  WeightUploader(const WeightUploader&) = delete;
  WeightUploader& operator=(const WeightUploader&) = delete;

  // `parts` stacked by rows (2-D [rows_i, cols], or 1-D) as one bf16 tensor on the device.
  Tensor bf16(std::vector<Tensor> parts) {
    int64_t rows = 0;
    const bool two_d = parts.front().view().ndim == 2;
    const int64_t cols = two_d ? parts.front().size(1) : 1;
    for (const auto& p : parts) rows += two_d ? p.size(0) : p.numel();
    Tensor out = Tensor::empty(two_d ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows},
                               DType::kBF16, device_);
    auto* dst = static_cast<bf16_t*>(out.data());
    for (auto& p : parts) {
      KVATTN_CHECK(p.device().is_cpu() && p.view().is_contiguous() &&
                       (p.dtype() == DType::kF32 || p.dtype() == DType::kBF16 ||
                        p.dtype() == DType::kF16),
                   "Model: weights must be contiguous float32, bf16 or f16 host tensors but one "
                   "is ", p.dtype(), " on ", p.device());
      const int64_t n = p.numel();
      for (int64_t b = 0; b < n;) {
        if (fill_ == kStageElems) flush();
        if (fill_ == 0) pending_ = dst;
        const int64_t m = std::min(n - b, kStageElems - fill_);
        convert(p, b, m, stage_[cur_] + fill_);
        fill_ += m;
        dst += m;
        b += m;
      }
      p = Tensor();
    }
    flush();
    bytes_ += out.nbytes();
    return out;
  }

  // Waits for the last copy.
  void finish() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  int64_t bytes() const { return bytes_; }

 private:
  static constexpr int64_t kStageElems = int64_t{32} << 20;  // 64 MiB of bf16 per buffer
  static constexpr int64_t kPiece = int64_t{1} << 18;        // elements per OpenMP piece

  // Elements [begin, begin + count) of `src` as bf16 into `out`.
  static void convert(const Tensor& src, int64_t begin, int64_t count, bf16_t* out) {
    const DType dt = src.dtype();
    const auto* base = static_cast<const uint8_t*>(src.data());
    const int64_t pieces = (count + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (int64_t c = 0; c < pieces; ++c) {
      const int64_t b = c * kPiece, m = std::min(count, b + kPiece) - b;
      bf16_t* o = out + b;
      if (dt == DType::kBF16) {
        std::memcpy(o, base + (begin + b) * 2, static_cast<size_t>(m) * 2);
      } else if (dt == DType::kF32) {
        const float* f = reinterpret_cast<const float*>(base) + begin + b;
        for (int64_t i = 0; i < m; ++i) o[i] = float_to_bf16(f[i]);
      } else {  // f16: through float32, as the float32 loader converts it
        float tmp[1024];
        for (int64_t i = 0; i < m; i += 1024) {
          const int64_t k = std::min<int64_t>(1024, m - i);
          dequantize_row(GgmlType::kF16, base + (begin + b + i) * 2, tmp, k);
          for (int64_t j = 0; j < k; ++j) o[i + j] = float_to_bf16(tmp[j]);
        }
      }
    }
  }

  void release() noexcept {
    cudaStreamSynchronize(stream_);
    for (int i = 0; i < 2; ++i) {
      if (stage_[i] != nullptr) cudaFreeHost(stage_[i]);
      if (done_[i] != nullptr) cudaEventDestroy(done_[i]);
      stage_[i] = nullptr;
      done_[i] = nullptr;
    }
  }

  // Sends the filled buffer, then waits until the other one's last copy is done.
  void flush() {
    if (fill_ == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(pending_, stage_[cur_], static_cast<size_t>(fill_) * 2,
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaEventRecord(done_[cur_], stream_));
    cur_ ^= 1;
    fill_ = 0;
    CUDA_CHECK(cudaEventSynchronize(done_[cur_]));
  }

  Device device_;
  cudaStream_t stream_;
  bf16_t* stage_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  int cur_ = 0;
  int64_t fill_ = 0;           // elements in stage_[cur_]
  bf16_t* pending_ = nullptr;  // where stage_[cur_] goes on the device
  int64_t bytes_ = 0;
};

Tensor take(ModelWeights& w, const std::string& name) {
  auto it = w.tensors.find(name);
  KVATTN_CHECK(it != w.tensors.end(), "Model: tensor '", name, "' is missing");
  Tensor t = std::move(it->second);
  w.tensors.erase(it);
  return t;
}

// A norm weight as float32 on the host (widened from bf16/f16 when the file's dtype was kept:
// never written in place, it may be the read-only file mapping) with Gemma's (1 + w) added in
// float32 when `offset` (HF's Gemma checkpoints; GGUF files hold 1 + w already), as the CPU
// model does.
Tensor with_offset(Tensor t, bool offset) {
  t = widen_to_f32(t);
  if (offset) {
    float* p = t.ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = 1.0f + p[i];
  }
  return t;
}

struct Layer {
  // bf16 on the device; with Gemma's sandwich norms the four norms (input_norm, post_norm =
  // pre_feedforward_layernorm, attn_out_norm = post_attention_layernorm, ffn_out_norm =
  // post_feedforward_layernorm) are float32 (cuda_gemma.h), otherwise attn/ffn_out_norm are
  // undefined and post_norm is post_attention_layernorm.
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

size_t align16(size_t x) { return (x + 15) / 16 * 16; }

// An opt-in switch of the environment: `name` set to a value starting with '1'.
bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && e[0] == '1';
}

// KVATTN_UNFUSED=1 turns ModelOptions::fused_kernels off (bench and tests compare the paths).
bool unfused_by_env() { return env_switch_on("KVATTN_UNFUSED"); }

// An opt-out switch of the environment: `name` set to exactly "0".
bool env_switch_off(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, "0") == 0;
}

// KVATTN_DECODE_PDL=0: the decode attention without programmatic dependent launch
// (CudaModel::decode_pdl_; bench comparisons).
bool decode_pdl_off_by_env() { return env_switch_off("KVATTN_DECODE_PDL"); }

// KVATTN_SAMPLE_SPLIT=0 keeps the sampler at one CTA per row (bench comparisons); the
// tokens are the same either way.
int sample_max_slices() {
  static const int v =
      env_switch_off("KVATTN_SAMPLE_SPLIT") ? 1 : static_cast<int>(k::kSampleMaxSlices);
  return v;
}

// KVATTN_FUSED_GEMV=1 / =0 overrides ModelOptions::fused_gemv either way.
bool fused_gemv_wanted(bool option) {
  const char* e = std::getenv("KVATTN_FUSED_GEMV");
  if (e != nullptr && std::strcmp(e, "1") == 0) return true;
  if (e != nullptr && std::strcmp(e, "0") == 0) return false;
  return option;
}

// KVATTN_TP_SKIP_COMM=1 (timing experiments only: the outputs are then wrong) leaves out every
// collective, so a run with and without it gives the share of step time spent in NCCL.
bool skip_collectives() {
  static const bool skip = [] {
    const char* e = std::getenv("KVATTN_TP_SKIP_COMM");
    return e != nullptr && e[0] == '1';
  }();
  return skip;
}


std::span<const int32_t> host_span(const TensorView& t) {
  if (!t.defined()) return {};
  KVATTN_CHECK(t.dtype == DType::kI32 && t.device.is_cpu() && t.is_contiguous(),
               "cuda model: BatchContext tensors must be contiguous int32 host tensors but one is ",
               t.dtype, " on ", t.device);
  return {t.ptr<const int32_t>(), static_cast<size_t>(t.numel())};
}

// Planning constants for kv_cache_budget: the block size of the warm-up pool (the smallest
// common one, so its fixed block table is the widest), the capacity assumed when the config
// has no max_position_embeddings, and the logit rows planned for a prefill step.
constexpr int64_t kPlanBlockSize = 16;
constexpr int64_t kPlanCapacity = 32768;
constexpr int64_t kPlanLogitRows = 512;

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
  bool gemma_ = false;         // cfg_.sandwich_norms: the Gemma layer (cuda_gemma.h)
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

CudaModel::CudaModel(ModelWeights w, Device device, const ModelOptions& options,
                     const RankContext& rank)
    : cfg_(w.config), device_(device), options_(options), rank_(rank),
      full_vocab_(rank.full_vocab > 0 ? rank.full_vocab : w.config.vocab_size),
      gemm_(device.index),
      kv_dtype_(options.kv_cache_dtype == KVCacheDType::kFP8 ? DType::kF8E4M3 : DType::kBF16),
      kv_scales_host_(w.config.num_layers, w.config.num_kv_heads),
      fused_(options.fused_kernels && !unfused_by_env()),
      pdl_(k::pdl_wanted(options.pdl) && k::pdl_supported(device.index)),
      decode_pdl_(pdl_ && !decode_pdl_off_by_env()),
      fused_gemv_(fused_gemv_wanted(options.fused_gemv) && rank.size == 1 &&
                  !w.config.sandwich_norms &&
                  w.config.activation == ModelConfig::Activation::kSilu),
      fused_rope_(env_switch_on("KVATTN_FUSED_ROPE")),
      fused_rope_pairs_(env_switch_on("KVATTN_FUSED_ROPE_PAIRS") && !w.config.qk_norm &&
                        !w.config.qkv_bias && w.config.rope_dim() == w.config.head_dim) {
  KVATTN_CHECK(rank_.size == 1 || rank_.nccl != nullptr,
               "Model: a CUDA tensor-parallel rank needs an NCCL communicator");
  cuda::DeviceGuard guard(device.index);
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (kv_dtype_ == DType::kF8E4M3) {
    Tensor ones = Tensor::empty({2, cfg_.num_layers, cfg_.num_kv_heads}, DType::kF32);
    std::fill_n(ones.ptr<float>(), ones.numel(), 1.0f);
    kv_scales_dev_ = ones.to(device);
  }
  sample_scratch_ = Tensor::empty({k::kSampleScratchBytes}, DType::kU8, device_);
  gemma_ = cfg_.sandwich_norms;
  // HF's bf16 Gemma multiplies by torch.tensor(sqrt(hidden), dtype=bfloat16) (55.5 for 3072;
  // the CPU model and HF's float32 model use float32(sqrt(hidden))).
  embed_scale_ = cfg_.embedding_scale != 0
                     ? bf16_to_float(float_to_bf16(static_cast<float>(cfg_.embedding_scale)))
                     : 0.0f;
  final_softcap_ = static_cast<float>(cfg_.final_logit_softcap);
  const bool offset = cfg_.norm_weight_offset;
  // Every bf16 weight goes up through `up` (pinned, chunked, overlapped; see WeightUploader).
  WeightUploader up(device, stream_);
  auto to_device_bf16 = [&](std::vector<Tensor> parts, Device) {
    return up.bf16(std::move(parts));
  };
  // A layer or final norm: float32 for the Gemma kernels, bf16 for add_rmsnorm.
  auto norm = [&](const std::string& name) {
    Tensor t = with_offset(take(w, name), offset);
    return gemma_ ? t.to(device) : to_device_bf16({std::move(t)}, device);
  };
  embed_ = to_device_bf16({take(w, "model.embed_tokens.weight")}, device);
  final_norm_ = norm("model.norm.weight");
  const bool tied = cfg_.tie_word_embeddings && !w.tensors.count("lm_head.weight");
  lm_head_ = tied ? embed_ : to_device_bf16({take(w, "lm_head.weight")}, device);
  {
    const std::vector<float> f = rope::inv_freq(cfg_);  // the CPU model's float32 values
    Tensor host = Tensor::empty({static_cast<int64_t>(f.size())}, DType::kF32);
    std::copy(f.begin(), f.end(), host.ptr<float>());
    inv_freq_ = host.to(device);
    token_ = k::TokenRunner(cfg_, k::token_kernel_wanted(), rank_.size > 1,
                            inv_freq_.ptr<const float>(), rope::attention_factor(cfg_), device);
    const std::vector<float> lf = rope::local_inv_freq(cfg_);  // empty unless Gemma 3
    if (!lf.empty()) {
      Tensor lh = Tensor::empty({static_cast<int64_t>(lf.size())}, DType::kF32);
      std::copy(lf.begin(), lf.end(), lh.ptr<float>());
      inv_freq_local_ = lh.to(device);
    }
  }
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer l;
    l.input_norm = norm(p + "input_layernorm.weight");
    if (gemma_) {
      l.attn_out_norm = norm(p + "post_attention_layernorm.weight");
      l.post_norm = norm(p + "pre_feedforward_layernorm.weight");
      l.ffn_out_norm = norm(p + "post_feedforward_layernorm.weight");
    } else {
      l.post_norm = norm(p + "post_attention_layernorm.weight");
    }
    l.local_rope = inv_freq_local_.defined() && cfg_.window_left(i) >= 0;
    l.wqkv = to_device_bf16({take(w, p + "self_attn.q_proj.weight"),
                             take(w, p + "self_attn.k_proj.weight"),
                             take(w, p + "self_attn.v_proj.weight")},
                            device);
    if (cfg_.qk_norm) {
      // The q/k-norm + RoPE kernel's bf16 weights; Gemma 3's (1 + w) folded in first.
      l.q_norm = to_device_bf16({with_offset(take(w, p + "self_attn.q_norm.weight"), offset)},
                                device);
      l.k_norm = to_device_bf16({with_offset(take(w, p + "self_attn.k_norm.weight"), offset)},
                                device);
    }
    l.wo = to_device_bf16({take(w, p + "self_attn.o_proj.weight")}, device);
    if (cfg_.qkv_bias) {  // sharded with their heads on a tensor-parallel rank (sharding.cpp)
      l.qkv_bias = to_device_bf16({take(w, p + "self_attn.q_proj.bias"),
                                   take(w, p + "self_attn.k_proj.bias"),
                                   take(w, p + "self_attn.v_proj.bias")},
                                  device);
    }
    if (cfg_.o_bias) {  // replicated: added once after the all-reduce
      l.o_bias = to_device_bf16({take(w, p + "self_attn.o_proj.bias")}, device);
    }
    l.wgate_up = to_device_bf16(
        {take(w, p + "mlp.gate_proj.weight"), take(w, p + "mlp.up_proj.weight")}, device);
    l.wdown = to_device_bf16({take(w, p + "mlp.down_proj.weight")}, device);
    // The layer's mask as the CPU model builds it: its sliding window (Mistral, Qwen2's
    // use_sliding_window layers, Gemma's local layers); Gemma's attention scale
    // (query_pre_attn_scalar ** -0.5; 0 => 1/sqrt(head_dim)) and attention logit soft-cap.
    l.attn = std::make_unique<Attention>(
        cfg_.num_heads, cfg_.head_dim, static_cast<float>(cfg_.attention_scale),
        cfg_.num_kv_heads,
        AttentionMask{cfg_.window_left(i), static_cast<float>(cfg_.attn_logit_softcap)});
    layers_.push_back(std::move(l));
  }
  up.finish();
  stats_.ladder = decode_graph_ladder(options_.max_decode_batch);
}

CudaModel::~CudaModel() {
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_.index &&
                        cudaSetDevice(device_.index) == cudaSuccess;
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (auto& g : fx_.graphs) {
    if (g != nullptr) cudaGraphExecDestroy(g);
  }
  fx_.graphs.clear();
  if (fx_.graph_one_layered != nullptr) cudaGraphExecDestroy(fx_.graph_one_layered);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (switched) cudaSetDevice(previous);
}

CudaModelStats CudaModel::stats() const {
  CudaModelStats s = stats_;
  s.activation_tokens = act_.tokens;
  s.activation_rows = act_.rows;
  s.decode_table_width = fx_.ready ? fx_.width : 0;
  s.fused_kernels = fused_;
  s.pdl = pdl_;
  s.fused_gemv = fused_gemv_;
  s.fused_rope = fused_gemv_ && (fused_rope_ || fused_rope_pairs_);
  s.token_kernel = token_.ready();
  s.token_kernel_max_context = token_.ready() ? token_.max_context() : 0;
  s.token_kernel_flow = token_.ready() && token_.flow();
  return s;
}

// ---- buffers, pool, graphs ----

void CudaModel::drop_graphs() {
  if (stream_ != nullptr) CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (auto& g : fx_.graphs) {
    if (g != nullptr) CUDA_CHECK(cudaGraphExecDestroy(g));
    g = nullptr;
  }
  if (fx_.graph_one_layered != nullptr) CUDA_CHECK(cudaGraphExecDestroy(fx_.graph_one_layered));
  fx_.graph_one_layered = nullptr;
}

void CudaModel::release_fixed() {
  drop_graphs();
  fx_.graphs.clear();
  fx_.graph_takes_token.clear();
  fx_.ready = false;
  fx_.dev = Tensor();
  fx_.workspace = Tensor();
  fx_.plans.clear();
  fx_.width = 0;
}

void CudaModel::ensure_activations(int64_t tokens, int64_t rows) {
  if (tokens <= act_.tokens && rows <= act_.rows) return;
  bool had_graphs = false;
  for (auto g : fx_.graphs) had_graphs |= g != nullptr;
  drop_graphs();  // they hold the old pointers; also syncs, so nothing reads the old buffers
  if (had_graphs) ++stats_.graph_drops;
  auto grow = [](int64_t need, int64_t have) {
    const int64_t n = have > 0 ? std::max(need, have + have / 2) : need;
    return (n + 63) / 64 * 64;
  };
  const int64_t T = tokens > act_.tokens ? grow(tokens, act_.tokens) : act_.tokens;
  const int64_t R = rows > act_.rows ? grow(rows, act_.rows) : act_.rows;
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size, D = cfg_.head_dim;
  const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads, inter = cfg_.intermediate_size;
  act_ = Activations();  // free first: the peak is the new size, not old + new
  auto bf16 = [&](int64_t n) { return Tensor::empty({n}, DType::kBF16, device_); };
  act_.x = bf16(T * H);
  act_.h = bf16(T * H);
  act_.qkv = bf16(T * (nh + 2 * nkv) * D);
  act_.attn = bf16(T * nh * D);
  act_.o = bf16(T * H);
  act_.gate_up = bf16(T * 2 * inter);
  act_.act = bf16(T * inter);
  act_.fin = bf16(R * H);
  if (fused_gemv_) act_.x2 = bf16(k::Gemv::kMaxRows * H);
  act_.logits = bf16(R * V);
  if (tensor_parallel()) {
    act_.gathered = bf16(rank_.size * R * V);
    act_.full_logits = bf16(R * rank_.size * V);
  }
  act_.tokens = T;
  act_.rows = R;
}

void CudaModel::reset_pool(std::unique_ptr<KVPool> pool) {
  release_fixed();  // graphs and the fixed table are tied to the old pool
  for (auto& l : layers_) {
    l.attn->bind_cache(TensorView(), TensorView());
    l.kv = k::KVWrite{};
  }
  pool_ = std::move(pool);
  if (pool_ == nullptr) return;
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    k::KVWrite& kv = layers_[i].kv;
    kv.k_cache = pool_->k_cache(i);
    kv.v_cache = pool_->v_cache(i);
    if (kv_dtype_ == DType::kF8E4M3) {
      const int64_t H = cfg_.num_kv_heads;
      float* scales = kv_scales_dev_.ptr<float>();
      kv.k_scale = TensorView(scales + i * H, DType::kF32, device_, {H});
      kv.v_scale = TensorView(scales + (cfg_.num_layers + i) * H, DType::kF32, device_, {H});
    }
    layers_[i].attn->bind_cache(kv.k_cache, kv.v_cache, kv.k_scale, kv.v_scale);
  }
  bind_token_layers();
}

void CudaModel::bind_token_layers() {
  std::vector<k::TokenLayer> t;
  // bf16 and float8_e4m3 caches (the token kernel reads either: token_attention.cuh).
  if (token_.planned() && fused_gemv_) {
    for (const Layer& l : layers_) {
      k::TokenLayer tl{};
      tl.input_norm = l.input_norm.data();
      tl.post_norm = l.post_norm.data();
      tl.wqkv = l.wqkv.data();
      tl.q_norm = cfg_.qk_norm ? l.q_norm.data() : nullptr;
      tl.k_norm = cfg_.qk_norm ? l.k_norm.data() : nullptr;
      tl.wo = l.wo.data();
      tl.wgate_up = l.wgate_up.data();
      tl.wdown = l.wdown.data();
      tl.k_cache = l.kv.k_cache.data;
      tl.v_cache = l.kv.v_cache.data;
      tl.k_block_stride = l.kv.k_cache.stride(0);
      tl.v_block_stride = l.kv.v_cache.stride(0);
      if (kv_dtype_ == DType::kF8E4M3) {
        tl.k_scale = static_cast<const float*>(l.kv.k_scale.data);
        tl.v_scale = static_cast<const float*>(l.kv.v_scale.data);
      }
      t.push_back(tl);
    }
  }
  token_.bind(t, pool_->spec().block_size, pool_->num_blocks());
}

void CudaModel::track_kv_amax(bool on) {
  KVATTN_CHECK(!tensor_parallel(), "Model::track_kv_amax: a tensor-parallel rank cannot ",
               "calibrate fp8 KV scales (not yet)");
  cuda::DeviceGuard guard(device_.index);
  if (on) {
    if (!kv_amax_dev_.defined()) {
      kv_amax_dev_ = Tensor::empty({2, cfg_.num_layers, cfg_.num_kv_heads}, DType::kF32, device_);
    }
    CUDA_CHECK(cudaMemsetAsync(kv_amax_dev_.data(), 0, kv_amax_dev_.nbytes(), stream_));
  }
  track_amax_ = on;
}

void CudaModel::kv_amax(std::span<float> k, std::span<float> v) const {
  const auto n = static_cast<size_t>(cfg_.num_layers * cfg_.num_kv_heads);
  KVATTN_CHECK(k.size() == n && v.size() == n, "Model::kv_amax: k_amax and v_amax must have ", n,
               " entries but have ", k.size(), " and ", v.size());
  if (!kv_amax_dev_.defined()) {  // never tracked: nothing recorded
    std::fill(k.begin(), k.end(), 0.0f);
    std::fill(v.begin(), v.end(), 0.0f);
    return;
  }
  cuda::DeviceGuard guard(device_.index);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUDA_CHECK(cudaMemcpy(k.data(), kv_amax_dev_.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(v.data(), kv_amax_dev_.ptr<float>() + n, n * sizeof(float),
                        cudaMemcpyDeviceToHost));
}

void CudaModel::set_kv_scales(std::span<const float> k, std::span<const float> v) {
  KVATTN_CHECK(kv_dtype_ == DType::kF8E4M3, "Model::set_kv_scales: the KV cache is ", kv_dtype_,
               ", not float8_e4m3");
  kv_scales_host_.set(k, v);  // validates (sizes, finite, > 0) before anything changes
  cuda::DeviceGuard guard(device_.index);
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // no step in flight reads the old values
  const size_t bytes = static_cast<size_t>(cfg_.num_layers * cfg_.num_kv_heads) * sizeof(float);
  CUDA_CHECK(cudaMemcpy(kv_scales_dev_.data(), k.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(kv_scales_dev_.ptr<float>() + cfg_.num_layers * cfg_.num_kv_heads,
                        v.data(), bytes, cudaMemcpyHostToDevice));
}

int64_t CudaModel::pool_table_width() const {
  if (pool_ == nullptr) return 0;
  const int64_t bs = pool_->spec().block_size;
  // Without max_position_embeddings, sequences longer than kPlanCapacity take the general
  // path (their tables are wider than the fixed one).
  const int64_t limit =
      cfg_.max_position_embeddings > 0 ? cfg_.max_position_embeddings : kPlanCapacity;
  const int64_t cap = std::min(pool_->num_blocks() * bs, limit);
  return (cap + bs - 1) / bs;
}

void CudaModel::setup_fixed(int64_t width, int64_t block_size) {
  release_fixed();
  const int64_t B = options_.max_decode_batch;
  if (B <= 0) return;
  fx_.max_batch = B;
  fx_.width = width;
  fx_.block_size = block_size;
  fx_.ladder = decode_graph_ladder(B);
  int64_t ws = 0;
  for (int64_t b : fx_.ladder) {
    fx_.plans.push_back(plan_decode(b, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_dim, 1,
                                    width * block_size, device_));
    ws = std::max(ws, fx_.plans.back().workspace_bytes);
  }
  const auto Bs = static_cast<size_t>(B);
  size_t off = 0;
  auto take_bytes = [&](size_t bytes) {
    const size_t at = off;
    off = align16(off + bytes);
    return at;
  };
  fx_.off_tokens = take_bytes(Bs * 4);
  fx_.off_pos = take_bytes(Bs * 4);
  fx_.off_slots = take_bytes(Bs * 4);
  fx_.off_lens = take_bytes(Bs * 4);
  fx_.off_rows = take_bytes(Bs * 4);
  fx_.off_params = take_bytes(Bs * sizeof(SampleParams));
  fx_.off_meta = take_bytes(4 * sizeof(int32_t));
  fx_.off_compact = take_bytes(Bs * static_cast<size_t>(width) * 4);
  fx_.off_out = take_bytes(Bs * 4);
  fx_.off_table = take_bytes(Bs * static_cast<size_t>(width) * 4);
  fx_.total = off;
  fx_.dev = Tensor::empty({static_cast<int64_t>(fx_.total)}, DType::kU8, device_);
  fx_.host.ensure(fx_.off_out);
  fx_.workspace = Tensor::empty({std::max<int64_t>(ws, 256)}, DType::kU8, device_);
  // The table starts all -1; afterwards rows past a step's batch or columns past its widest
  // row keep stale ids, which nothing reads (context length 0, or past the sequence's blocks).
  // The host mirror needs only the header and the packed table.
  CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(fx_.dev.data()) + fx_.off_table, 0xFF,
                             Bs * static_cast<size_t>(width) * 4, stream_));
  fx_.graphs.assign(fx_.ladder.size(), nullptr);
  fx_.graph_takes_token.assign(fx_.ladder.size(), false);
  ensure_activations(B, B);
  write_pad_header();
  upload_header(0);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  fx_.ready = true;
}

size_t CudaModel::rung_for(int64_t n) const {
  return static_cast<size_t>(std::lower_bound(fx_.ladder.begin(), fx_.ladder.end(), n) -
                             fx_.ladder.begin());
}

CudaModel::HostHeader CudaModel::host_header() {
  char* h = static_cast<char*>(fx_.host.data());
  HostHeader hh;
  hh.tok = reinterpret_cast<int32_t*>(h + fx_.off_tokens);
  hh.pos = reinterpret_cast<int32_t*>(h + fx_.off_pos);
  hh.slot = reinterpret_cast<int32_t*>(h + fx_.off_slots);
  hh.len = reinterpret_cast<int32_t*>(h + fx_.off_lens);
  hh.row = reinterpret_cast<int32_t*>(h + fx_.off_rows);
  hh.prm = reinterpret_cast<SampleParams*>(h + fx_.off_params);
  hh.meta = reinterpret_cast<int32_t*>(h + fx_.off_meta);
  hh.compact = h + fx_.off_compact;
  return hh;
}

void CudaModel::HostHeader::pad_rows(int64_t from, int64_t to) const {
  for (int64_t i = from; i < to; ++i) {
    tok[i] = 0;
    pos[i] = 0;
    slot[i] = -1;
    len[i] = 0;
  }
}

void CudaModel::write_pad_header() {
  const HostHeader hh = host_header();
  hh.meta[0] = hh.meta[1] = 0;  // no table rows to spread
  hh.pad_rows(0, fx_.max_batch);
  for (int64_t i = 0; i < fx_.max_batch; ++i) {
    hh.row[i] = static_cast<int32_t>(i);
    hh.prm[i] = SampleParams{};
  }
}

// The header and the first table_bytes of the packed table, in one copy.
void CudaModel::upload_header(size_t table_bytes) {
  CUDA_CHECK(cudaMemcpyAsync(fx_.dev.data(), fx_.host.data(), fx_.off_compact + table_bytes,
                             cudaMemcpyHostToDevice, stream_));
}

void CudaModel::run_fixed_body(size_t rung) {
  const int64_t b = fx_.ladder[rung];
  char* d = static_cast<char*>(fx_.dev.data());
  BatchContext ctx;
  ctx.phase = Phase::kDecode;
  ctx.slot_mapping = TensorView(d + fx_.off_slots, DType::kI32, device_, {b});
  ctx.context_lens = TensorView(d + fx_.off_lens, DType::kI32, device_, {b});
  ctx.block_tables = TensorView(d + fx_.off_table, DType::kI32, device_, {b, fx_.width});
  ctx.max_seqlen_q = 1;
  ctx.max_seqlen_k = fx_.width * fx_.block_size;
  ctx.decode_plan = fx_.plans[rung];
  if (ctx.decode_plan.workspace_bytes > 0) ctx.decode_workspace = fx_.workspace.view();
  ctx.stream = Stream{stream_};
  ctx.decode_pdl = decode_pdl_;
  k::scatter_block_table(reinterpret_cast<const int32_t*>(d + fx_.off_compact),
                         reinterpret_cast<const int32_t*>(d + fx_.off_meta),
                         reinterpret_cast<int32_t*>(d + fx_.off_table), fx_.width, b,
                         k::Launch{stream_, pdl_});
  // One token per sequence: dynamic NTK's length is the position + 1 (rope_lens null).
  run_layers(b, b, reinterpret_cast<const int32_t*>(d + fx_.off_tokens),
             reinterpret_cast<const int32_t*>(d + fx_.off_pos),
             reinterpret_cast<const int32_t*>(d + fx_.off_rows), nullptr, ctx);
  k::sample_rows(full_logits(), full_logits_ld(), b, full_vocab_,
                 reinterpret_cast<const SampleParams*>(d + fx_.off_params),
                 reinterpret_cast<int32_t*>(d + fx_.off_out), sample_scratch_.data(),
                 k::Launch{stream_, pdl_}, sample_max_slices());
}

void CudaModel::capture(size_t rung, cudaGraphExec_t& slot) {
  phase_.cancel();  // no event may be recorded into the capture
  // Warm-up on pad rows (writes nothing): first-use work (GEMM plans, kernel attributes,
  // occupancy queries) happens here, outside the capture.
  write_pad_header();
  upload_header(0);
  run_fixed_body(rung);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    run_fixed_body(rung);
  } catch (...) {
    (void)cudaStreamEndCapture(stream_, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(e);
  slot = exec;
  CUDA_CHECK(cudaGraphUpload(exec, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (&slot == &fx_.graph_one_layered) {
    ++stats_.layered_one_captures;
  } else {
    ++stats_.graph_captures;
    fx_.graph_takes_token[rung] = took_token_;  // run_layers' choice while captured
  }
}

void CudaModel::allocate_kv_cache(int64_t num_blocks, int64_t block_size) {
  cuda::DeviceGuard guard(device_.index);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  reset_pool(nullptr);
  KVCacheSpec spec{cfg_.num_layers, cfg_.num_kv_heads, cfg_.head_dim, kv_dtype_, block_size};
  reset_pool(std::make_unique<KVPool>(spec, num_blocks, device_));
  if (planned_ && options_.max_decode_batch > 0) {
    setup_fixed(pool_table_width(), block_size);
    if (options_.cuda_graphs) {
      for (size_t r = 0; r < fx_.ladder.size(); ++r) capture(r, fx_.graphs[r]);
      if (token_.ready() && !fx_.ladder.empty() && fx_.ladder[0] == 1) {
        const TokenAllowed layered(token_allowed_, false);  // rung 1 for long single contexts
        capture(0, fx_.graph_one_layered);
      }
    }
  }
}

void CudaModel::copy_kv_blocks(std::span<const BlockCopy> copies) {
  if (copies.empty()) return;
  KVATTN_CHECK(pool_ != nullptr, "Model::copy_kv_blocks: no KV cache is allocated");
  cuda::DeviceGuard guard(device_.index);
  copier_.run(*pool_, copies, stream_);
}

// ---- memory planning ----

int64_t CudaModel::kv_cache_budget(int64_t max_num_batched_tokens, double memory_fraction) {
  KVATTN_CHECK(max_num_batched_tokens >= 1, "Model::kv_cache_budget: max_num_batched_tokens ",
               "must be >= 1 but is ", max_num_batched_tokens);
  KVATTN_CHECK(memory_fraction > 0.0 && memory_fraction <= 1.0,
               "Model::kv_cache_budget: memory_fraction must be in (0, 1] but is ",
               memory_fraction);
  cuda::DeviceGuard guard(device_.index);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  reset_pool(nullptr);
  const int64_t B = std::max<int64_t>(options_.max_decode_batch, 0);
  const int64_t T = max_num_batched_tokens;
  const int64_t R = std::min(T, kPlanLogitRows);
  ensure_activations(std::max(T, B), std::max({R, B, int64_t{1}}));

  // 1. The largest prefill: one sequence of T tokens over the packed K/V (no pool bound, so
  //    nothing is stored), R logit rows sampled greedily.
  {
    std::vector<int32_t> ids(T), pos(T), slots(T, -1), rows(R), cu = {0, static_cast<int32_t>(T)};
    for (int64_t i = 0; i < T; ++i) {
      ids[i] = static_cast<int32_t>(i % cfg_.vocab_size);
      pos[i] = static_cast<int32_t>(i);
    }
    for (int64_t r = 0; r < R; ++r) rows[r] = static_cast<int32_t>(T - R + r);
    BatchContext hc;
    hc.phase = Phase::kPrefill;
    hc.slot_mapping = TensorView(slots.data(), DType::kI32, Device::cpu(), {T});
    hc.cu_seqlens_q = TensorView(cu.data(), DType::kI32, Device::cpu(), {2});
    hc.cu_seqlens_k = TensorView(cu.data(), DType::kI32, Device::cpu(), {2});
    hc.max_seqlen_q = hc.max_seqlen_k = T;
    ModelInput in{ids, pos, rows, &hc};
    std::vector<RowSampling> rs(R);
    std::vector<int32_t> toks(R);
    step_general(in, Out{{}, rs, toks, {}, true});
  }

  // 2. The largest decode step on a one-block pool, with the fixed buffers at the widest
  //    table any pool can need (block size kPlanBlockSize) and the graph for B captured and
  //    replayed, so its workspace and graph memory are counted. The other rungs' graphs are
  //    reserved at the measured size of this one.
  int64_t graph_bytes = 0, pool_bytes = 0;
  if (B > 0) {
    KVCacheSpec spec{cfg_.num_layers, cfg_.num_kv_heads, cfg_.head_dim, kv_dtype_,
                     kPlanBlockSize};
    reset_pool(std::make_unique<KVPool>(spec, 1, device_));
    pool_bytes = pool_->storage().nbytes();
    const int64_t cap = cfg_.max_position_embeddings > 0 ? cfg_.max_position_embeddings : kPlanCapacity;
    setup_fixed((cap + kPlanBlockSize - 1) / kPlanBlockSize, kPlanBlockSize);
    const size_t top = fx_.ladder.size() - 1;
    write_pad_header();
    upload_header(0);
    run_fixed_body(top);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    size_t free0 = 0, total0 = 0;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total0));
    if (options_.cuda_graphs) {
      capture(top, fx_.graphs[top]);
      CUDA_CHECK(cudaGraphLaunch(fx_.graphs[top], stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      size_t free1 = 0, total1 = 0;
      CUDA_CHECK(cudaMemGetInfo(&free1, &total1));
      // One graph is in use now (counted below); reserve as much for each other rung.
      const int64_t one = std::max<int64_t>(0, static_cast<int64_t>(free0) - static_cast<int64_t>(free1));
      graph_bytes = one * static_cast<int64_t>(fx_.ladder.size() - 1);
    }
  }
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const int64_t in_use = static_cast<int64_t>(total) - static_cast<int64_t>(free) - pool_bytes;
  const auto budget = static_cast<int64_t>(memory_fraction * static_cast<double>(total)) -
                      in_use - graph_bytes;
  reset_pool(nullptr);  // also drops the fixed buffers and the graph
  planned_ = true;
  return std::max<int64_t>(budget, 0);
}

// ---- steps ----

void CudaModel::forward(const ModelInput& in, std::span<float> logits) {
  Out out;
  out.logits = logits;
  step(in, out);
}

void CudaModel::forward_sample(const ModelInput& in, std::span<const RowSampling> rows,
                               std::span<int32_t> tokens, std::span<const int32_t> copy_rows,
                               std::span<float> logits) {
  Out out;
  out.rows = rows;
  out.tokens = tokens;
  out.copy_rows = copy_rows;  // rows the host needs (logprobs, penalties), usually none
  out.logits = logits;
  out.sample = true;
  step(in, out);
}

void CudaModel::check_input(const ModelInput& in, const Out& out) const {
  const auto T = static_cast<int64_t>(in.token_ids.size());
  const auto R = static_cast<int64_t>(in.logit_rows.size());
  const int64_t V = full_vocab_;
  KVATTN_CHECK(in.ctx != nullptr && T > 0, "Model::forward: a step needs a ctx and >= 1 token");
  KVATTN_CHECK(static_cast<int64_t>(in.positions.size()) == T,
               "Model::forward: positions has ", in.positions.size(), " entries for ", T,
               " tokens");
  if (out.sample) {
    KVATTN_CHECK(static_cast<int64_t>(out.rows.size()) == R &&
                     static_cast<int64_t>(out.tokens.size()) == R,
                 "Model::forward_sample: rows (", out.rows.size(), ") and tokens (",
                 out.tokens.size(), ") must have one entry per logit row (", R, ")");
    const auto C = static_cast<int64_t>(out.copy_rows.size());
    KVATTN_CHECK(static_cast<int64_t>(out.logits.size()) == C * V,
                 "Model::forward_sample: logits has ", out.logits.size(), " entries but ", C,
                 " copied rows of ", V, " are needed");
    for (int64_t i = 0; i < C; ++i) {
      KVATTN_CHECK(out.copy_rows[i] >= 0 && out.copy_rows[i] < R &&
                       (i == 0 || out.copy_rows[i] > out.copy_rows[i - 1]),
                   "Model::forward_sample: copy_rows must increase within [0, ", R,
                   ") but entry ", i, " is ", out.copy_rows[i]);
    }
  } else {
    KVATTN_CHECK(static_cast<int64_t>(out.logits.size()) == R * V, "Model::forward: logits has ",
                 out.logits.size(), " entries but ", R, " rows of ", V, " are needed");
  }
  for (int64_t t = 0; t < T; ++t) {
    KVATTN_CHECK(in.token_ids[t] >= 0 && in.token_ids[t] < V, "Model::forward: token id ",
                 in.token_ids[t], " at row ", t, " is outside the vocabulary [0, ", V, ")");
  }
  for (int64_t r = 0; r < R; ++r) {
    KVATTN_CHECK(in.logit_rows[r] >= 0 && in.logit_rows[r] < T, "Model::forward: logit row ",
                 in.logit_rows[r], " is outside the step's tokens [0, ", T, ")");
  }
}

bool CudaModel::fixed_eligible(const ModelInput& in) const {
  if (pool_ == nullptr || options_.max_decode_batch <= 0) return false;
  if (track_amax_) return false;  // calibrating: eager steps, each layer records (no graphs)
  const BatchContext& hc = *in.ctx;
  if (hc.phase != Phase::kDecode) return false;
  if (hc.cascade_prefix_len > 0) return false;  // cascade decode: the general (eager) path
  const auto n = static_cast<int64_t>(in.token_ids.size());
  if (n > options_.max_decode_batch) return false;
  if (!hc.context_lens.defined() || hc.context_lens.ndim != 1 || hc.context_lens.size(0) != n) {
    return false;  // q_len > 1, or malformed (the general path reports it)
  }
  if (!hc.slot_mapping.defined() || hc.slot_mapping.numel() != n ||
      hc.slot_mapping.dtype != DType::kI32) {
    return false;
  }
  if (!hc.block_tables.defined() || hc.block_tables.ndim != 2 || hc.block_tables.size(0) != n ||
      hc.block_tables.size(1) > pool_table_width()) {
    return false;
  }
  // R <= n <= the rung.
  return static_cast<int64_t>(in.logit_rows.size()) <= n;
}

void CudaModel::step(const ModelInput& in, const Out& out) {
  phase_.cancel();  // a step that threw may have left one open
  check_input(in, out);
  cuda::DeviceGuard guard(device_.index);
  if (fixed_eligible(in)) {
    if (!fx_.ready || fx_.width != pool_table_width()) {
      setup_fixed(pool_table_width(), pool_->spec().block_size);
    }
    step_fixed(in, out);
  } else {
    step_general(in, out);
  }
  phase_.end();  // both paths have synchronised the stream
}

void CudaModel::step_fixed(const ModelInput& in, const Out& out) {
  const auto n = static_cast<int64_t>(in.token_ids.size());
  const auto R = static_cast<int64_t>(in.logit_rows.size());
  const size_t rung = rung_for(n);
  const int64_t b = fx_.ladder[rung];
  const bool graphs = options_.cuda_graphs && !phase_.on;  // phase timing runs eagerly
  const BatchContext& hc = *in.ctx;
  const auto slots = host_span(hc.slot_mapping);
  const auto lens = host_span(hc.context_lens);
  // One sequence too long for the token kernel: rung 1's layered twin (graph and eager).
  const bool layered_one = b == 1 && token_.ready() && !token_fits(lens[0]);
  const TokenAllowed allowed(token_allowed_, !layered_one);
  cudaGraphExec_t& graph = layered_one ? fx_.graph_one_layered : fx_.graphs[rung];
  if (graphs && graph == nullptr) capture(rung, graph);

  const auto table = host_span(hc.block_tables);
  const int64_t w = hc.block_tables.size(1);
  const HostHeader hh = host_header();
  std::memcpy(hh.tok, in.token_ids.data(), n * sizeof(int32_t));
  std::memcpy(hh.pos, in.positions.data(), n * sizeof(int32_t));
  std::memcpy(hh.slot, slots.data(), n * sizeof(int32_t));
  std::memcpy(hh.len, lens.data(), n * sizeof(int32_t));
  hh.pad_rows(n, b);
  if (R > 0) std::memcpy(hh.row, in.logit_rows.data(), R * sizeof(int32_t));
  for (int64_t r = R; r < b; ++r) hh.row[r] = static_cast<int32_t>(r);
  for (int64_t r = 0; r < R; ++r) {
    hh.prm[r] = out.sample ? k::make_sample_params(out.rows[r], static_cast<size_t>(r)) : SampleParams{};
  }
  for (int64_t r = R; r < b; ++r) hh.prm[r] = SampleParams{};
  hh.meta[0] = static_cast<int32_t>(n);
  hh.meta[1] = static_cast<int32_t>(w);
  const size_t table_bytes = static_cast<size_t>(n * w) * sizeof(int32_t);
  if (table_bytes > 0) std::memcpy(hh.compact, table.data(), table_bytes);
  timeline_.begin(stream_);  // after any capture: the step's first device operation follows
  upload_header(table_bytes);
  if (graphs) {
    CUDA_CHECK(cudaGraphLaunch(graph, stream_));
    ++stats_.graph_replays;
    if (!layered_one && fx_.graph_takes_token[rung]) ++stats_.token_kernel_steps;
  } else {
    phase_.begin(stream_);
    run_fixed_body(rung);
    ++stats_.fixed_eager_steps;
    if (took_token_) ++stats_.token_kernel_steps;
  }
  finish(R, out, reinterpret_cast<const int32_t*>(static_cast<char*>(fx_.dev.data()) + fx_.off_out));
}

void CudaModel::step_general(const ModelInput& in, const Out& out) {
  const auto T = static_cast<int64_t>(in.token_ids.size());
  const auto R = static_cast<int64_t>(in.logit_rows.size());
  const BatchContext& hc = *in.ctx;
  params_.resize(out.sample ? R : 0);
  for (int64_t r = 0; r < static_cast<int64_t>(params_.size()); ++r) {
    params_[r] = k::make_sample_params(out.rows[r], static_cast<size_t>(r));
  }
  ensure_activations(T, std::max<int64_t>(R, 1));
  rope_lengths(in, rope_lens_);

  // Every input in one pinned block, 16-byte aligned parts, one copy.
  // (indices 9..11: the cascade decode's shared-prefix table, cu_seqlens and leftpad)
  const bool cascade = hc.phase == Phase::kDecode && hc.cascade_prefix_len > 0;
  const std::array<std::span<const int32_t>, 12> ints = {
      in.token_ids, in.positions, in.logit_rows, host_span(hc.slot_mapping),
      host_span(hc.cu_seqlens_q), host_span(hc.cu_seqlens_k), host_span(hc.context_lens),
      host_span(hc.block_tables), rope_lens_,
      cascade ? host_span(hc.cascade_block_table) : std::span<const int32_t>{},
      cascade ? host_span(hc.cascade_cu_seqlens) : std::span<const int32_t>{},
      cascade ? host_span(hc.cascade_leftpad) : std::span<const int32_t>{}};
  constexpr size_t kParams = ints.size();  // off[kParams]: the sampling parameters
  std::array<size_t, ints.size() + 1> off{};
  size_t total = 0;
  for (size_t i = 0; i < ints.size(); ++i) {
    off[i] = total;
    total = align16(total + ints[i].size() * sizeof(int32_t));
  }
  off[kParams] = total;
  total = align16(total + params_.size() * sizeof(SampleParams));
  char* hp = static_cast<char*>(pinned_meta_.ensure(total));  // the last step has synced
  char* dp = static_cast<char*>(meta_.ensure(static_cast<int64_t>(total), device_));
  for (size_t i = 0; i < ints.size(); ++i) {
    if (!ints[i].empty()) std::memcpy(hp + off[i], ints[i].data(), ints[i].size() * sizeof(int32_t));
  }
  if (!params_.empty()) {
    std::memcpy(hp + off[kParams], params_.data(), params_.size() * sizeof(SampleParams));
  }
  timeline_.begin(stream_);
  CUDA_CHECK(cudaMemcpyAsync(dp, hp, total, cudaMemcpyHostToDevice, stream_));
  auto dev_i32 = [&](size_t i, const TensorView& host) {
    if (!host.defined()) return TensorView();
    KVATTN_CHECK(host.ndim == 1 || host.ndim == 2, "cuda model: BatchContext tensors must have ",
                 "rank 1 or 2 but one has rank ", host.ndim);
    return host.ndim == 1
               ? TensorView(dp + off[i], DType::kI32, device_, {host.size(0)})
               : TensorView(dp + off[i], DType::kI32, device_, {host.size(0), host.size(1)});
  };

  BatchContext ctx;
  ctx.phase = hc.phase;
  ctx.slot_mapping = dev_i32(3, hc.slot_mapping);
  ctx.cu_seqlens_q = dev_i32(4, hc.cu_seqlens_q);
  ctx.cu_seqlens_k = dev_i32(5, hc.cu_seqlens_k);
  ctx.context_lens = dev_i32(6, hc.context_lens);
  ctx.block_tables = dev_i32(7, hc.block_tables);
  ctx.max_seqlen_q = hc.max_seqlen_q;
  ctx.max_seqlen_k = hc.max_seqlen_k;
  ctx.stream = Stream{stream_};
  ctx.decode_pdl = decode_pdl_;
  if (ctx.phase == Phase::kDecode) {
    const auto lens = host_span(hc.context_lens);
    int64_t max_k = hc.max_seqlen_k;
    for (int32_t len : lens) max_k = std::max<int64_t>(max_k, len);
    const auto num_seqs = static_cast<int64_t>(lens.size());
    KVATTN_CHECK(num_seqs > 0 && T % num_seqs == 0,
                 "Model::forward: a decode step needs context_lens for its ", T, " tokens");
    // An eager step knows its lengths: equal ones let the plan promise uniform lengths
    // (DecodePlan::uniform_lengths). A graph's plan is for the table's width instead.
    const bool uniform =
        std::all_of(lens.begin(), lens.end(), [&](int32_t len) { return len == max_k; });
    ctx.decode_plan = plan_decode(num_seqs, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_dim,
                                  T / num_seqs, max_k, device_, uniform);
    void* ws = workspace_.ensure(ctx.decode_plan.workspace_bytes, device_);
    ctx.decode_workspace = TensorView(ws, DType::kU8, device_, {ctx.decode_plan.workspace_bytes});
    if (cascade) {
      ctx.cascade_prefix_len = hc.cascade_prefix_len;
      ctx.cascade_first_row = hc.cascade_first_row;
      ctx.cascade_num_rows = hc.cascade_num_rows;
      ctx.cascade_block_table = dev_i32(9, hc.cascade_block_table);
      ctx.cascade_cu_seqlens = dev_i32(10, hc.cascade_cu_seqlens);
      ctx.cascade_leftpad = dev_i32(11, hc.cascade_leftpad);
      // An fp8 cache: room for the prefix dequantized (Attention::forward_cascade).
      const bool fp8 = kv_dtype_ == DType::kF8E4M3;
      const int64_t bytes = cascade_workspace_bytes(
          T, cfg_.num_heads, cfg_.head_dim, DType::kBF16, fp8 ? hc.cascade_prefix_len : 0,
          fp8 ? cfg_.num_kv_heads : 0);
      ctx.cascade_workspace =
          TensorView(cascade_ws_.ensure(bytes, device_), DType::kU8, device_, {bytes});
    }
  }
  phase_.begin(stream_);
  const auto lens = host_span(hc.context_lens);
  const TokenAllowed allowed(token_allowed_, lens.size() == 1 && token_fits(lens[0]));
  run_layers(T, R, reinterpret_cast<const int32_t*>(dp + off[0]),
             reinterpret_cast<const int32_t*>(dp + off[1]),
             reinterpret_cast<const int32_t*>(dp + off[2]),
             rope_lens_.empty() ? nullptr : reinterpret_cast<const int32_t*>(dp + off[8]), ctx);
  int32_t* dev_tokens = nullptr;
  if (out.sample && R > 0) {
    dev_tokens = static_cast<int32_t*>(gen_tokens_.ensure(R * static_cast<int64_t>(sizeof(int32_t)), device_));
    k::sample_rows(full_logits(), full_logits_ld(), R, full_vocab_,
                   reinterpret_cast<const SampleParams*>(dp + off[kParams]), dev_tokens,
                   sample_scratch_.data(), k::Launch{stream_, pdl_}, sample_max_slices());
  }
  ++stats_.general_steps;
  if (took_token_) ++stats_.token_kernel_steps;
  finish(R, out, dev_tokens);
}

void CudaModel::finish(int64_t R, const Out& out, const int32_t* dev_tokens) {
  const int64_t V = full_vocab_;
  if (R == 0) {
    timeline_.end(stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  // The logit rows the host gets (forward(): all R; forward_sample(): copy_rows, for logprobs
  // and penalties): row r is row r of the logits buffer, in both the general and the fixed
  // (graph) step; sampling only reads it.
  const int64_t copies = out.sample ? static_cast<int64_t>(out.copy_rows.size()) : R;
  bf16_t* host_logits = nullptr;
  if (copies > 0) {
    host_logits = static_cast<bf16_t*>(
        pinned_logits_.ensure(static_cast<size_t>(copies * V) * sizeof(bf16_t)));
    const auto* dev = static_cast<const bf16_t*>(full_logits());
    const size_t row_bytes = static_cast<size_t>(V) * sizeof(bf16_t);
    if (!out.sample) {
      CUDA_CHECK(cudaMemcpy2DAsync(host_logits, row_bytes, dev, full_logits_ld() * sizeof(bf16_t),
                                   row_bytes, R, cudaMemcpyDeviceToHost, stream_));
    } else {
      for (int64_t i = 0; i < copies; ++i) {
        CUDA_CHECK(cudaMemcpyAsync(host_logits + i * V, dev + out.copy_rows[i] * full_logits_ld(),
                                   row_bytes, cudaMemcpyDeviceToHost, stream_));
      }
    }
  }
  int32_t* host_tokens = nullptr;
  if (out.sample) {
    host_tokens = static_cast<int32_t*>(pinned_tokens_.ensure(R * sizeof(int32_t)));
    CUDA_CHECK(cudaMemcpyAsync(host_tokens, dev_tokens, R * sizeof(int32_t),
                               cudaMemcpyDeviceToHost, stream_));
  }
  timeline_.end(stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (host_tokens != nullptr) std::memcpy(out.tokens.data(), host_tokens, R * sizeof(int32_t));
  if (host_logits != nullptr) {
    for (int64_t i = 0; i < copies * V; ++i) out.logits[i] = bf16_to_float(host_logits[i]);
  }
}

void CudaModel::rope_lengths(const ModelInput& in, std::vector<int32_t>& lens) const {
  lens.clear();
  if (!rope::depends_on_length(cfg_)) return;
  const auto T = static_cast<int64_t>(in.token_ids.size());
  const TensorView& cu = in.ctx->cu_seqlens_q;
  if (!cu.defined()) {
    // Without cu_seqlens_q only one token per sequence is unambiguous (position + 1).
    const TensorView& cl = in.ctx->context_lens;
    KVATTN_CHECK(in.ctx->phase == Phase::kDecode && cl.defined() && cl.numel() == T,
                 "Model::forward: dynamic RoPE scaling needs ctx.cu_seqlens_q (int32, on the "
                 "host) unless every sequence has one token");
    return;
  }
  const auto b = host_span(cu);
  KVATTN_CHECK(!b.empty(), "Model::forward: dynamic RoPE scaling needs a non-empty ",
               "ctx.cu_seqlens_q");
  lens.assign(static_cast<size_t>(T), 0);
  for (size_t s = 0; s + 1 < b.size(); ++s) {
    const int64_t begin = b[s], end = b[s + 1];
    KVATTN_CHECK(begin >= 0 && begin <= end && end <= T, "Model::forward: cu_seqlens_q[", s,
                 "..", s + 1, "] = [", begin, ", ", end, ") is outside the step's ", T,
                 " tokens");
    if (begin == end) continue;
    // As the CPU model: every token of the step uses its sequence's length after the step.
    const int32_t len = in.positions[end - 1] + 1;
    std::fill(lens.begin() + begin, lens.begin() + end, len);
  }
}

void CudaModel::run_layers(int64_t T, int64_t R, const int32_t* ids, const int32_t* pos,
                           const int32_t* rows, const int32_t* rope_lens,
                           const BatchContext& step_ctx) {
  const k::Launch on{stream_, pdl_};  // our kernels (cuda_launch.h)
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size, D = cfg_.head_dim;
  const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads, inter = cfg_.intermediate_size;
  const int64_t qkv_dim = (nh + 2 * nkv) * D;
  const auto eps = static_cast<float>(cfg_.rms_norm_eps);
  void* x = act_.x.data();
  void* h = act_.h.data();
  auto* qkv = static_cast<bf16_t*>(act_.qkv.data());
  void* attn = act_.attn.data();
  void* o = act_.o.data();
  void* gate_up = act_.gate_up.data();
  void* act = act_.act.data();
  void* fin = act_.fin.data();
  void* lg = act_.logits.data();
  // Fused KV write once a pool is bound (before, e.g. in kv_cache_budget's warm-up prefill,
  // there is no cache and Attention stores nothing either).
  const bool fuse_kv = fused_ && pool_ != nullptr && pool_->num_blocks() > 0;
  BatchContext ctx = step_ctx;
  ctx.kv_stored = fuse_kv;
  k::QkNormRope rope;
  rope.qkv = qkv;
  rope.ld = qkv_dim;
  rope.tokens = T;
  rope.num_heads = nh;
  rope.num_kv_heads = nkv;
  rope.head_dim = D;
  rope.rotary_dim = cfg_.rope_dim();
  rope.eps = eps;
  rope.positions = pos;
  rope.inv_freq = inv_freq_.ptr<const float>();
  rope.theta = static_cast<float>(cfg_.rope_theta);
  rope.attention_factor = rope::attention_factor(cfg_);
  if (rope::depends_on_length(cfg_)) {  // rope.cpp's dynamic NTK, per token on the device
    const RopeScaling& sc = cfg_.rope_scaling;
    rope.dynamic.factor = static_cast<float>(sc.factor);
    rope.dynamic.factor_minus_one = static_cast<float>(sc.factor - 1);
    const double R = static_cast<double>(cfg_.rope_dim());  // rope.cpp's dim
    rope.dynamic.exponent = static_cast<float>(R / (R - 2));
    rope.dynamic.max_position = cfg_.max_position_embeddings;
    rope.seq_lens = rope_lens;
  }
  rope.interleaved = cfg_.rope_style == ModelConfig::RopeStyle::kInterleaved;
  const k::QkNormRope global_rope = rope;
  // Gemma 3's sliding layers: plain RoPE from the local table (rope.cpp's local_inv_freq).
  k::QkNormRope local_rope = rope;
  local_rope.inv_freq = inv_freq_local_.defined() ? inv_freq_local_.ptr<const float>() : nullptr;
  local_rope.attention_factor = 1.0f;
  local_rope.dynamic = {};
  local_rope.seq_lens = nullptr;
  // Layer l's RoPE (Gemma 3's sliding layers: the local one) with its q/k norm weights.
  const auto layer_rope = [&](const Layer& l) {
    k::QkNormRope r = l.local_rope ? local_rope : global_rope;
    r.q_norm = cfg_.qk_norm ? l.q_norm.data() : nullptr;
    r.k_norm = cfg_.qk_norm ? l.k_norm.data() : nullptr;
    return r;
  };
  bool rope_done = false;  // this layer's q/k norm + RoPE + KV write already ran

  // Phase boundaries (PhaseEvents; no-ops unless this eager step is timed): as the CPU model's.
  const auto lap = [this](double PhaseTimes::*phase) { phase_.lap(phase, stream_); };
  constexpr double PhaseTimes::*kAttention = &PhaseTimes::attention_s;
  constexpr double PhaseTimes::*kGemm = &PhaseTimes::gemm_s;
  constexpr double PhaseTimes::*kOther = &PhaseTimes::other_s;
  took_token_ = false;
  if (token_step(T, R, step_ctx)) {
    // Every layer in one kernel (token_runner.h): it takes the embedding row in x and leaves
    // the final residual in x2 and the last down projection in o. Its time counts as GEMM
    // time in the phase split (mostly the weights' bytes).
    k::embed(embed_.data(), ids, T, H, 0, V, x, on);
    lap(kOther);
    token_.run(pos, step_ctx.slot_mapping.ptr<const int32_t>(),
               step_ctx.context_lens.ptr<const int32_t>(),
               step_ctx.block_tables.ptr<const int32_t>(), step_ctx.block_tables.size(1), x,
               act_.x2.data(), o, qkv, act, stream_);
    took_token_ = true;
    lap(kGemm);
    k::add_rmsnorm(act_.x2.data(), o, final_norm_.data(), eps, fin, rows, R, H, on);
    lap(kOther);
    gemm_.run(fin, H, R, lm_head_.data(), V, H, lg, V, on);
    lap(kGemm);
    return;
  }
  // Fused: the embedding rows and the first input norm in one launch (one rank only: a
  // tensor-parallel rank's rows are complete only after the all-reduce).
  // Gemma: the embedding scale and the first input norm (Gemma's) after the gather.
  const bool fuse_embed = fused_ && !tensor_parallel() && !layers_.empty() && !gemma_;
  if (fuse_embed) {
    k::embed_rmsnorm(embed_.data(), ids, T, H, 0, V, layers_[0].input_norm.data(), eps, x, h,
                     on);
  } else {
    k::embed(embed_.data(), ids, T, H, rank_.rank * V, V, x, on);
    all_reduce(x, T * H);
  }
  if (gemma_) {
    // embed_scale_ 0 (no scale) multiplies by 1.
    k::gemma_scale_rmsnorm(x, embed_scale_ != 0.0f ? embed_scale_ : 1.0f,
                           layers_[0].input_norm.ptr<const float>(), eps, h, T, H, on);
  }
  // Fused GEMV path (fused_gemv_, decode steps of <= Gemv::kFusedPreferredRows rows): each layer's input norm runs
  // inside the qkv GEMV and the post-attention norm and SiLU * up inside the gate_up GEMV
  // (cuda_gemv.h), bit-identical to add_rmsnorm + Gemv + silu_mul. Their CTAs all read the
  // residual while one writes its update, so the update goes to the other buffer: the residual
  // lives in xc and alternates between x and x2.
  const bool fgemv = fused_gemv_ && !gemma_ && !tensor_parallel() && T >= 1 &&
                     T <= k::Gemv::kFusedPreferredRows && gemm_.gemv().fused_supported(T, H);
  if (fgemv) ++stats_.fused_gemv_steps;
  void* xc = x;
  void* xn = fgemv ? act_.x2.data() : nullptr;
  k::Gemv::NormInput nin;
  nin.eps = eps;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    if (fgemv && (i > 0 || !fuse_embed)) {  // layer 0 after embed_rmsnorm: h is ready
      nin.x = xc;
      nin.add = i == 0 ? nullptr : o;
      nin.weight = l.input_norm.data();
      nin.x_out = i == 0 ? nullptr : xn;
      lap(kOther);
      // With the KV write fused (and no qkv bias), the q/k norm + RoPE + KV write run as the
      // GEMV's epilogue where it applies (cuda_gemv.h run_rmsnorm_rope_pairs, else
      // run_rmsnorm_rope_kv), one launch fewer. Both leave in qkv what the unfused kernels
      // leave (kv_amax_record's calibration reads it).
      rope_done = false;
      if (fuse_kv && !l.qkv_bias.defined()) {
        l.kv.slot_mapping = ctx.slot_mapping;
        if (fused_rope_pairs_) {
          rope_done = gemm_.gemv().run_rmsnorm_rope_pairs(nin, T, H, l.wqkv.data(), qkv_dim, qkv,
                                                          qkv_dim, layer_rope(l), l.kv, on);
        }
        if (!rope_done && fused_rope_) {
          rope_done = gemm_.gemv().run_rmsnorm_rope_kv(nin, T, H, l.wqkv.data(), qkv_dim, qkv,
                                                       qkv_dim, layer_rope(l), l.kv, on);
        }
        if (rope_done) ++stats_.fused_rope_layers;
      }
      if (!rope_done) gemm_.gemv().run_rmsnorm(nin, T, H, l.wqkv.data(), qkv_dim, qkv, qkv_dim, on);
      if (i > 0) std::swap(xc, xn);
    } else {
      rope_done = false;
      // Gemma: the previous layer's MLP output was added (and this norm applied) at its end.
      if (!gemma_ && (i > 0 || !fuse_embed)) {
        k::add_rmsnorm(x, i == 0 ? nullptr : o, l.input_norm.data(), eps, h, nullptr, T, H,
                       on);
      }
      lap(kOther);
      gemm_.run(h, H, T, l.wqkv.data(), qkv_dim, H, qkv, qkv_dim, on);
    }
    lap(kGemm);
    if (l.qkv_bias.defined()) k::add_bias(qkv, qkv_dim, T, qkv_dim, l.qkv_bias.data(), on);
    rope = layer_rope(l);
    if (rope_done) {
      // the GEMV's epilogue normed, rotated and stored them
    } else if (fuse_kv) {
      l.kv.slot_mapping = ctx.slot_mapping;
      k::qk_norm_rope_store_kv(rope, l.kv, on);  // fused: the KV write counts as other
    } else {
      k::qk_norm_rope(rope, on);
    }
    if (track_amax_) {  // calibration: K after its norm and RoPE, V as projected (what is stored)
      float* amax = kv_amax_dev_.ptr<float>() + static_cast<int64_t>(i) * nkv;
      k::kv_amax_record(qkv + nh * D, qkv + (nh + nkv) * D, qkv_dim, T, nkv, D, amax,
                        amax + cfg_.num_layers * nkv, on);
    }
    lap(kOther);
    l.attn->forward(TensorView(qkv, DType::kBF16, device_, {T, nh * D}, {qkv_dim, 1}),
                    TensorView(qkv + nh * D, DType::kBF16, device_, {T, nkv * D}, {qkv_dim, 1}),
                    TensorView(qkv + (nh + nkv) * D, DType::kBF16, device_, {T, nkv * D},
                               {qkv_dim, 1}),
                    ctx, TensorView(attn, DType::kBF16, device_, {T, nh * D}));
    lap(kAttention);
    gemm_.run(attn, nh * D, T, l.wo.data(), H, nh * D, o, H, on);
    all_reduce(o, T * H);
    lap(kGemm);
    if (l.o_bias.defined()) k::add_bias(o, H, T, H, l.o_bias.data(), on);
    if (fgemv) {  // x += o, act = silu(gate) * up of norm(x) w_gate_up^T, in one launch
      nin.x = xc;
      nin.add = o;
      nin.weight = l.post_norm.data();
      nin.x_out = xn;
      lap(kOther);
      gemm_.gemv().run_rmsnorm_silu(nin, T, H, l.wgate_up.data(), inter, act, inter, on);
      std::swap(xc, xn);
      lap(kGemm);
    } else {
      if (gemma_) {  // x += post_attention_norm(o); h = pre_feedforward_norm(x)
        k::gemma_norm_add_rmsnorm(x, o, l.attn_out_norm.ptr<const float>(),
                                  l.post_norm.ptr<const float>(), eps, h, nullptr, T, H, on);
      } else {
        k::add_rmsnorm(x, o, l.post_norm.data(), eps, h, nullptr, T, H, on);
      }
      lap(kOther);
      gemm_.run(h, H, T, l.wgate_up.data(), 2 * inter, H, gate_up, 2 * inter, on);
      lap(kGemm);
      if (cfg_.activation == ModelConfig::Activation::kGeluTanh) {
        k::gelu_tanh_mul(gate_up, T, inter, act, on);
      } else {
        k::silu_mul(gate_up, T, inter, act, on);
      }
      lap(kOther);
    }
    gemm_.run(act, inter, T, l.wdown.data(), H, inter, o, H, on);
    all_reduce(o, T * H);
    lap(kGemm);
    if (gemma_ && i + 1 < layers_.size()) {
      // x += post_feedforward_norm(o); h = the next layer's input norm of x.
      k::gemma_norm_add_rmsnorm(x, o, l.ffn_out_norm.ptr<const float>(),
                                layers_[i + 1].input_norm.ptr<const float>(), eps, h, nullptr,
                                T, H, on);
    }
  }
  if (gemma_) {  // the last MLP output and the final norm, on the logit rows only
    k::gemma_norm_add_rmsnorm(x, o, layers_.back().ffn_out_norm.ptr<const float>(),
                              final_norm_.ptr<const float>(), eps, fin, rows, R, H, on);
  } else {
    k::add_rmsnorm(xc, o, final_norm_.data(), eps, fin, rows, R, H, on);
  }
  lap(kOther);
  gemm_.run(fin, H, R, lm_head_.data(), V, H, lg, V, on);
  lap(kGemm);
  if (tensor_parallel() && R > 0 && !skip_collectives()) {
#ifdef KVATTN_WITH_NCCL
    // Every rank's slice [size, R, V], then each slice into its columns of [R, size * V].
    const int n = rank_.size;
    rank_.nccl->all_gather(lg, act_.gathered.data(), R * V, DType::kBF16, stream_);
    const size_t row_bytes = V * sizeof(bf16_t);
    for (int s = 0; s < n; ++s) {
      CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(act_.full_logits.data()) + s * row_bytes,
                                   n * row_bytes,
                                   static_cast<const char*>(act_.gathered.data()) + s * R * row_bytes,
                                   row_bytes, row_bytes, R, cudaMemcpyDeviceToDevice, stream_));
    }
#endif
  }
  // Gemma's final logit soft-cap on every vocab id of the rows, before sampling or the copy
  // to the host (the fixed decode path's pad rows too: harmless).
  if (final_softcap_ > 0.0f) {
    void* full = tensor_parallel() ? act_.full_logits.data() : act_.logits.data();
    k::softcap_logits(full, full_logits_ld(), R, full_vocab_, final_softcap_, on);
    lap(kOther);
  }
}

bool CudaModel::token_step(int64_t T, int64_t R, const BatchContext& ctx) const {
  if (!token_allowed_ || !token_.ready() || T != 1 || R > 1) return false;
  if (!fused_ || !fused_gemv_ || track_amax_ || gemma_ || tensor_parallel()) return false;
  if (final_softcap_ > 0.0f || pool_ == nullptr || pool_->num_blocks() == 0) return false;
  if (ctx.phase != Phase::kDecode || ctx.cascade_prefix_len > 0) return false;
  const auto i32 = [](const TensorView& t) { return t.defined() && t.dtype == DType::kI32; };
  return i32(ctx.slot_mapping) && ctx.slot_mapping.numel() >= 1 && i32(ctx.context_lens) &&
         ctx.context_lens.numel() == 1 && i32(ctx.block_tables) && ctx.block_tables.ndim == 2 &&
         ctx.block_tables.size(0) == 1 && ctx.block_tables.stride(1) == 1;
}

void CudaModel::all_reduce(void* buf, int64_t count) {
  if (!tensor_parallel() || skip_collectives()) return;
#ifdef KVATTN_WITH_NCCL
  rank_.nccl->all_reduce_sum(buf, count, DType::kBF16, stream_);
#else
  (void)buf;
  (void)count;
#endif
}

const void* CudaModel::full_logits() const {
  return tensor_parallel() ? act_.full_logits.data() : act_.logits.data();
}

int64_t CudaModel::full_logits_ld() const {
  return tensor_parallel() ? rank_.size * cfg_.vocab_size : cfg_.vocab_size;
}

}  // namespace

std::unique_ptr<Model> make_cuda_model(ModelWeights weights, Device device,
                                       const ModelOptions& options, const RankContext& rank) {
  KVATTN_CHECK(cuda_available(), "Model::create: device ", device,
               " requested but no CUDA device is visible");
  return std::make_unique<CudaModel>(std::move(weights), device, options, rank);
}

CudaModelStats cuda_model_stats(const Model& model) {
  const auto* m = dynamic_cast<const CudaModel*>(&model);
  KVATTN_CHECK(m != nullptr, "cuda_model_stats: the model is not the CUDA model");
  return m->stats();
}

int64_t cuda_free_bytes(Device device) {
  cuda::DeviceGuard guard(device.index);
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

}  // namespace kvattn

#endif  // KVATTN_WITH_CUDA
