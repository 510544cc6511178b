#include "kvattn/engine/llm.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "engine/llm/engine.h"
#include "engine/model/factories.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/gguf.h"

namespace kvattn {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<LLMEngine> load(LLMOptions options) {
  const fs::path path(options.model);
  KVATTN_CHECK(!options.model.empty(), "LLM: options.model (a .gguf file or an HF directory) ",
               "must be given");
  KVATTN_CHECK(fs::exists(path), "LLM: model path '", options.model, "' does not exist");
  if (fs::is_directory(path)) {
    // The CUDA model uploads bf16 tensors as the file has them (no float32 round trip);
    // KVATTN_LOAD_F32=1 loads float32 as before (timing comparisons: scripts/gpu_load_time.sh).
    HfLoadOptions hf;
    const char* f32 = std::getenv("KVATTN_LOAD_F32");
    hf.keep_16bit = options.device.is_cuda() && !(f32 != nullptr && f32[0] == '1');
    ModelWeights w = load_hf_model(options.model, options.on_load_progress, hf);
    std::optional<Tokenizer> tok;
    if (fs::exists(path / "tokenizer.json")) {
      const fs::path cfg = path / "tokenizer_config.json";
      tok = Tokenizer::from_hf_json((path / "tokenizer.json").string(),
                                    fs::exists(cfg) ? cfg.string() : std::string());
    }
    return std::make_unique<LLMEngine>(std::move(w), std::move(tok), options);
  }
  if (!options.weight_format) options.weight_format = WeightFormat::kGguf;
  // Only a single-rank CPU model computes on the file's blocks; the others start from float32.
  GgufLoadOptions load;
  load.keep_quantized = options.weight_format == WeightFormat::kGguf &&
                        options.device.is_cpu() && options.tensor_parallel == 1;
  ModelWeights w = load_gguf_model(options.model, options.on_load_progress, load);
  // A GGUF without tokenizer keys has no tokenizer (token-id prompts only), as an HF directory
  // without tokenizer.json; keys of a kind kvattn does not read are an error.
  const GgufFile g = GgufFile::open(options.model);
  std::optional<Tokenizer> tok;
  if (g.find("tokenizer.ggml.model") != nullptr) tok = Tokenizer::from_gguf(g);
  return std::make_unique<LLMEngine>(std::move(w), std::move(tok), options);
}

}  // namespace

std::string_view finish_reason_name(FinishReason r) {
  return r == FinishReason::kStop ? "stop" : "length";
}

LLM::LLM(const LLMOptions& options) : engine_(load(options)) {}

LLM::LLM(ModelWeights weights, std::optional<Tokenizer> tokenizer, const LLMOptions& options)
    : engine_(std::make_unique<LLMEngine>(std::move(weights), std::move(tokenizer), options)) {}

LLM::~LLM() = default;

int64_t LLM::kv_cache_bytes_default(Device device) {
#ifdef KVATTN_WITH_CUDA
  // GPU: 90% of what is free once the weights are loaded, less 512 MiB for activations,
  // cuBLASLt and attention workspaces.
  if (device.is_cuda()) {
    return std::max<int64_t>(cuda_free_bytes(device) / 10 * 9 - (int64_t{512} << 20), 0);
  }
#endif
  (void)device;
  return int64_t{512} << 20;  // CPU: SmolLM2-135M holds ~11k tokens in float32
}

std::vector<int32_t> LLM::encode(std::string_view text) const {
  const Tokenizer* tok = tokenizer();
  KVATTN_CHECK(tok != nullptr, "LLM::encode: this model has no tokenizer; pass token ids");
  std::vector<int32_t> ids = tok->encode(text, /*parse_special=*/true);
  if (tok->add_bos() && tok->bos_id() >= 0 && (ids.empty() || ids.front() != tok->bos_id())) {
    ids.insert(ids.begin(), tok->bos_id());
  }
  return ids;
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::string>& prompts,
                                         const SamplingParams& params,
                                         const TokenCallback& on_token) {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  for (const auto& p : prompts) ids.push_back(encode(p));
  return generate(ids, params, on_token);
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                         const SamplingParams& params,
                                         const TokenCallback& on_token) {
  return engine_->generate(prompts, std::span<const SamplingParams>(&params, 1), on_token);
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<SamplingParams>& params,
                                         const TokenCallback& on_token) {
  KVATTN_CHECK(params.size() == prompts.size(), "LLM::generate: params must hold one ",
               "SamplingParams per prompt (", prompts.size(), ") but holds ", params.size());
  return engine_->generate(prompts, params, on_token);
}

uint64_t LLM::add_request(std::vector<int32_t> prompt, const SamplingParams& params) {
  return engine_->add_request(std::move(prompt), params);
}

void LLM::prepare_structured(const StructuredOutput& output) const {
  engine_->prepare_structured(output);
}

std::vector<RequestOutput> LLM::step(const TokenCallback& on_token) {
  return engine_->step(on_token);
}

bool LLM::has_unfinished_requests() const { return engine_->has_unfinished(); }
bool LLM::abort_request(uint64_t request_id) { return engine_->abort_request(request_id); }
int64_t LLM::num_running_seqs() const { return engine_->num_running_seqs(); }
int64_t LLM::num_waiting_seqs() const { return engine_->num_waiting_seqs(); }
void LLM::check_kv_cache_idle() const { engine_->check_kv_cache_idle(); }
void LLM::set_prefix_caching(bool on) { engine_->set_prefix_caching(on); }

StepTimeSplit& StepTimeSplit::operator+=(const StepTimeSplit& o) {
  steps += o.steps;
  model_seconds += o.model_seconds;
  attention_seconds += o.attention_seconds;
  gemm_seconds += o.gemm_seconds;
  other_seconds += o.other_seconds;
  host_seconds += o.host_seconds;
  attended_keys += o.attended_keys;
  return *this;
}

bool LLM::has_chat_template() const {
  return tokenizer() != nullptr && tokenizer()->chat_template().has_value();
}

std::string LLM::chat_prompt(std::string_view user_message) const {
  KVATTN_CHECK(has_chat_template(), "LLM::chat_prompt: this model has no chat template");
  return tokenizer()->apply_chat_template({ChatMessage{"user", std::string(user_message)}},
                                          /*add_generation_prompt=*/true);
}

const ModelConfig& LLM::config() const { return engine_->config(); }
const Tokenizer* LLM::tokenizer() const { return engine_->tokenizer(); }
const GenerationStats& LLM::last_stats() const { return engine_->stats(); }
std::optional<StepTimeline> LLM::step_timeline() const { return engine_->step_timeline(); }
BlockManagerStats LLM::cache_stats() const { return engine_->cache_stats(); }
int64_t LLM::kv_cache_tokens() const { return engine_->kv_cache_tokens(); }
int64_t LLM::kv_bytes_per_token() const { return engine_->kv_bytes_per_token(); }
int64_t LLM::max_model_len() const { return engine_->max_model_len(); }

}  // namespace kvattn
