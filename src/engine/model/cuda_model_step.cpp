// The GPU model's steps (cuda_model.cpp describes the two kinds): forward and
// forward_sample, the checks, the fixed (graph) and general paths, the layers, sampling and
// the tensor-parallel gathers.
#ifdef KVATTN_WITH_CUDA

#include "engine/model/cuda_model_impl.h"

namespace kvattn::cuda_model_detail {

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
      // Gemma: x += post_attention_norm(o); h = pre_feedforward_norm(x). Gemma 1 has no
      // sandwich norms: attn_out_norm / ffn_out_norm are undefined, their null pointers make
      // the kernel add o as it is.
      if (gemma_) {
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

}  // namespace kvattn::cuda_model_detail

#endif  // KVATTN_WITH_CUDA
