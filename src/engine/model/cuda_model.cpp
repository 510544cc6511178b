// The GPU model: bf16 weights and activations, cuBLASLt GEMMs, fused add+RMSNorm, q/k-norm+RoPE
// and SiLU*up kernels, attention through kvattn's Attention layer over a bf16 KVPool, token
// sampling on the device (cuda_sampling.h). The families' features as the CPU model has them:
// RoPE from rope.h's frequency table (scaling, YaRN's multiplier, dynamic NTK per token:
// cuda_rope_kv.h), q/k/v biases added after the QKV GEMM and the o_proj bias after o_proj's
// all-reduce (add_bias), each layer's sliding window handed to its Attention.
//
// Gemma 1 / 2 / 3 (ModelConfig::sandwich_norms or embedding_scale; kernels in cuda_gemma.h) as
// the CPU model runs them: the embedding rows times bf16(sqrt(hidden)) (HF's bf16 normalizer),
// Gemma's RMSNorm (float32 math, float32 weights with the (1 + w) fold done at load as the CPU
// model does; rounded once), the sandwich norms fused with the residual add and the next norm
// (Gemma 1 has none: its residual adds go through the same kernel unnormed),
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
//
// Files: the class and the helpers both sources use in cuda_model_impl.h; construction,
// buffers, graphs, memory planning and the factory here; the steps in cuda_model_step.cpp.
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

#include "engine/model/cuda_model_impl.h"

namespace kvattn {
namespace cuda_model_detail {
namespace {

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

// An opt-in switch of the environment: `name` set to a value starting with '1'.
bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && e[0] == '1';
}

// KVATTN_UNFUSED=1 turns ModelOptions::fused_kernels off (bench and tests compare the paths).
bool unfused_by_env() { return env_switch_on("KVATTN_UNFUSED"); }


// KVATTN_DECODE_PDL=0: the decode attention without programmatic dependent launch
// (CudaModel::decode_pdl_; bench comparisons).
bool decode_pdl_off_by_env() { return env_switch_off("KVATTN_DECODE_PDL"); }

// KVATTN_FUSED_GEMV=1 / =0 overrides ModelOptions::fused_gemv either way.
bool fused_gemv_wanted(bool option) {
  const char* e = std::getenv("KVATTN_FUSED_GEMV");
  if (e != nullptr && std::strcmp(e, "1") == 0) return true;
  if (e != nullptr && std::strcmp(e, "0") == 0) return false;
  return option;
}

// Planning constants for kv_cache_budget: the block size of the warm-up pool (the smallest
// common one, so its fixed block table is the widest), the capacity assumed when the config
// has no max_position_embeddings, and the logit rows planned for a prefill step.
constexpr int64_t kPlanBlockSize = 16;
constexpr int64_t kPlanCapacity = 32768;
constexpr int64_t kPlanLogitRows = 512;

}  // namespace

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
  // Gemma 1 has the embedding scale and Gemma's norms but not the sandwich ones.
  gemma_ = cfg_.sandwich_norms || cfg_.embedding_scale != 0;
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
    if (cfg_.sandwich_norms) {  // Gemma 1 (gemma_ without them) has Llama's two norms
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

}  // namespace cuda_model_detail

using cuda_model_detail::CudaModel;


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
