// `kvattn bench`: nano-vllm's throughput benchmark (bench.py) on kvattn's engine, then a
// single stream's decode speed and a long prompt's time to first token. Prints one summary
// (and JSON with --json); fails when a KV block is still held after the runs.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"
#include "progress_bar.h"

namespace kvattn::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void check_args(const BenchArgs& a) {
  KVATTN_CHECK(a.num_seqs >= 1, "bench: --num-seqs must be >= 1 but is ", a.num_seqs);
  KVATTN_CHECK(a.min_input >= 1 && a.min_input <= a.max_input,
               "bench: input lengths need 1 <= --min-input <= --max-input but are ",
               a.min_input, " and ", a.max_input);
  KVATTN_CHECK(a.min_output >= 1 && a.min_output <= a.max_output,
               "bench: output lengths need 1 <= --min-output <= --max-output but are ",
               a.min_output, " and ", a.max_output);
  KVATTN_CHECK(a.single_input >= 1 && a.single_output >= 1 && a.ttft_input >= 1,
               "bench: --single-input, --single-output and --ttft-input must be >= 1 but are ",
               a.single_input, ", ", a.single_output, " and ", a.ttft_input);
}

LLMOptions llm_options(const BenchArgs& a) {
  LLMOptions o;
  o.model = resolve_model_path(a.model);
  KVATTN_CHECK(a.device == "cpu" || a.device == "cuda",
               "bench: --device must be cpu or cuda but is '", a.device, "'");
  o.device = a.device == "cpu" ? Device::cpu() : Device::cuda(0);
  o.num_threads = a.threads;
  o.kv_cache_bytes = a.kv_cache_mb << 20;
  o.ctx_size = a.ctx_size;
  apply_kv_cache_args(a.kv, o);
  o.max_num_seqs = a.max_num_seqs;
  o.max_num_batched_tokens = a.max_num_batched_tokens;
  o.gpu_memory_utilization = a.gpu_memory_utilization;
  o.cuda_graphs = !a.eager;
  o.tensor_parallel = a.tensor_parallel;
  apply_weights_arg(a.weights, o);
  return o;
}

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  int64_t input_tokens = 0, output_tokens = 0;
};

// nano-vllm's draw order: every prompt (its length, then its ids), then every output length.
// Lengths are capped so prompt + output fits the model's context.
Workload make_workload(const BenchArgs& a, std::mt19937& rng, int32_t max_id, int64_t context) {
  Workload w;
  std::uniform_int_distribution<int32_t> id(0, max_id - 1);
  for (int64_t i = 0; i < a.num_seqs; ++i) {
    int64_t n = std::uniform_int_distribution<int64_t>(a.min_input, a.max_input)(rng);
    n = std::min(n, context - 1);
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = id(rng);
    w.input_tokens += n;
    w.prompts.push_back(std::move(p));
  }
  for (int64_t i = 0; i < a.num_seqs; ++i) {
    SamplingParams sp;
    sp.temperature = static_cast<float>(a.temperature);
    sp.ignore_eos = true;
    sp.detokenize = false;
    const int64_t out = std::uniform_int_distribution<int64_t>(a.min_output, a.max_output)(rng);
    sp.max_tokens = static_cast<int>(
        std::min<int64_t>(out, context - static_cast<int64_t>(w.prompts[i].size())));
    w.output_tokens += sp.max_tokens;
    w.params.push_back(sp);
  }
  return w;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t max_id, int64_t n) {
  std::uniform_int_distribution<int32_t> id(0, max_id - 1);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = id(rng);
  return p;
}

int64_t output_tokens(const std::vector<RequestOutput>& outs) {
  int64_t n = 0;
  for (const auto& o : outs) {
    for (const auto& s : o.samples) n += static_cast<int64_t>(s.token_ids.size());
  }
  return n;
}

Json stats_json(const GenerationStats& s) {
  return {{"steps", s.num_steps},
          {"mixed_steps", s.num_mixed_steps},
          {"partial_prefills", s.num_partial_prefills},
          {"preemptions", s.num_preemptions},
          {"prompt_tokens", s.num_prompt_tokens},
          {"cached_tokens", s.num_cached_tokens},
          {"prefill_tokens", s.num_prefill_tokens},
          {"generated_tokens", s.num_generated_tokens},
          {"prefill_s", s.prefill_seconds},
          {"decode_s", s.decode_seconds},
          {"model_s", s.model_seconds},
          {"host_s", s.host_seconds}};
}

}  // namespace

int run_bench(const BenchArgs& a) {
  check_args(a);
  const LLMOptions opt = llm_options(a);
  const auto t_load = Clock::now();
  LLM llm(opt);
  const double load_s = seconds_since(t_load);
  const ModelConfig& c = llm.config();
  const int64_t context = c.max_position_embeddings > 0 ? c.max_position_embeddings : (1 << 20);
  const auto max_id = static_cast<int32_t>(std::min<int64_t>(10000, c.vocab_size));
  const std::string name = std::filesystem::path(opt.model).filename().string();
  std::fprintf(stderr, "loaded %s (%s, %lld layers, hidden %lld) on %s%s in %.1f s; KV pool %lld tokens (%s)\n",
               name.c_str(), c.architecture.c_str(), static_cast<long long>(c.num_layers),
               static_cast<long long>(c.hidden_size), a.device.c_str(),
               a.device == "cuda" ? (a.eager ? " (eager)" : " (cuda graphs)") : "", load_s,
               static_cast<long long>(llm.kv_cache_tokens()), a.kv.dtype.c_str());

  std::mt19937 rng(a.seed);
  const Workload w = make_workload(a, rng, max_id, context);
  if (!a.no_warmup) {  // first-call costs (allocations, kernels, graphs) stay out of the figures
    SamplingParams sp;
    sp.max_tokens = 8;
    sp.ignore_eos = true;
    sp.detokenize = false;
    std::mt19937 warm(a.seed + 1);
    llm.generate({random_prompt(warm, max_id, std::min<int64_t>(64, context - 8))}, sp);
  }

  // Main run.
  const bool show = a.progress || isatty(STDERR_FILENO) != 0;
  ProgressBar bar(w.output_tokens, a.num_seqs, isatty(STDERR_FILENO) != 0);
  TokenCallback cb;
  if (show) cb = [&bar](const TokenEvent& e) { bar.on_event(e); };
  const auto t_run = Clock::now();
  const auto outs = llm.generate(w.prompts, w.params, cb);
  const double wall = seconds_since(t_run);
  if (show) bar.finish();
  const GenerationStats main_stats = llm.last_stats();
  const int64_t out_tokens = output_tokens(outs);
  const double step_s = main_stats.model_seconds + main_stats.host_seconds;
  const double model_share = step_s > 0 ? main_stats.model_seconds / step_s : 0.0;

  // Single stream: one prompt decoding alone.
  SamplingParams one;
  one.temperature = static_cast<float>(a.temperature);
  one.ignore_eos = true;
  one.detokenize = false;
  const int64_t single_in = std::min(a.single_input, context - 1);
  one.max_tokens = static_cast<int>(std::min(a.single_output, context - single_in));
  const auto t_single = Clock::now();
  llm.generate({random_prompt(rng, max_id, single_in)}, one);
  const double single_wall = seconds_since(t_single);
  const double single_decode = llm.last_stats().decode_tokens_per_second();

  // Time to first token of one long prompt (fresh ids: no prefix-cache hit).
  const int64_t ttft_in =
      std::max<int64_t>(1, std::min({a.ttft_input, context - 1, llm.kv_cache_tokens() - 1}));
  one.max_tokens = 1;
  double ttft = 0.0;
  const auto t_ttft = Clock::now();
  llm.generate({random_prompt(rng, max_id, ttft_in)}, one, [&](const TokenEvent&) {
    if (ttft == 0.0) ttft = seconds_since(t_ttft);
  });

  const BlockManagerStats cache = llm.cache_stats();
  std::string leak;
  try {
    llm.check_kv_cache_idle();
  } catch (const Error& e) {
    leak = e.what();
  }

  std::printf("kvattn bench: %s on %s%s\n", name.c_str(), a.device.c_str(),
              a.device == "cuda" ? (a.eager ? " (eager)" : " (cuda graphs)") : "");
  std::printf("workload: %lld seqs, input [%lld, %lld], output [%lld, %lld], seed %u: "
              "%lld prompt tokens, %lld output tokens\n",
              static_cast<long long>(a.num_seqs), static_cast<long long>(a.min_input),
              static_cast<long long>(a.max_input), static_cast<long long>(a.min_output),
              static_cast<long long>(a.max_output), a.seed,
              static_cast<long long>(w.input_tokens), static_cast<long long>(w.output_tokens));
  std::printf("Total: %lldtok, Time: %.2fs, Throughput: %.2ftok/s\n",
              static_cast<long long>(out_tokens), wall, out_tokens / wall);
  std::printf("time split: model %.1f%%, host %.1f%% (%lld steps, %lld mixed, %lld preemptions, "
              "%lld prompt tokens from the prefix cache)\n",
              100.0 * model_share, 100.0 * (1.0 - model_share),
              static_cast<long long>(main_stats.num_steps),
              static_cast<long long>(main_stats.num_mixed_steps),
              static_cast<long long>(main_stats.num_preemptions),
              static_cast<long long>(main_stats.num_cached_tokens));
  std::printf("single stream: %lld-token prompt, %d new tokens: decode %.1f tok/s (%.2f s)\n",
              static_cast<long long>(single_in), static_cast<int>(std::min(a.single_output, context - single_in)),
              single_decode, single_wall);
  std::printf("time to first token: %lld-token prompt: %.1f ms (%.0f prompt tok/s)\n",
              static_cast<long long>(ttft_in), ttft * 1e3, ttft > 0 ? ttft_in / ttft : 0.0);
  if (leak.empty()) {
    std::printf("kv cache: all %lld blocks free after the runs\n",
                static_cast<long long>(cache.num_blocks));
  } else {
    std::printf("kv cache: LEAK: %s\n", leak.c_str());
  }

  if (!a.json.empty()) {
    Json j = {
        {"model", opt.model},
        {"device", a.device},
        {"cuda_graphs", a.device == "cuda" && !a.eager},
        {"max_num_seqs", a.max_num_seqs},
        {"max_num_batched_tokens", a.max_num_batched_tokens},
        {"kv_cache_tokens", llm.kv_cache_tokens()},
        {"kv_cache_dtype", a.kv.dtype},
        {"kv_calibrated", !a.kv.calibration_prompt.empty()},
        {"load_s", load_s},
        {"workload",
         {{"num_seqs", a.num_seqs}, {"min_input", a.min_input}, {"max_input", a.max_input},
          {"min_output", a.min_output}, {"max_output", a.max_output}, {"seed", a.seed},
          {"temperature", a.temperature}, {"prompt_tokens", w.input_tokens},
          {"output_tokens", w.output_tokens}}},
        {"throughput",
         {{"output_tokens", out_tokens}, {"wall_s", wall}, {"output_tok_per_s", out_tokens / wall},
          {"total_tok_per_s", (out_tokens + w.input_tokens) / wall}, {"model_share", model_share},
          {"host_share", 1.0 - model_share}, {"stats", stats_json(main_stats)}}},
        {"single_stream",
         {{"prompt_tokens", single_in}, {"new_tokens", std::min(a.single_output, context - single_in)},
          {"decode_tok_per_s", single_decode}, {"wall_s", single_wall}}},
        {"ttft", {{"prompt_tokens", ttft_in}, {"seconds", ttft}}},
        {"kv_cache",
         {{"blocks", cache.num_blocks}, {"free_blocks_after", cache.num_free_blocks},
          {"all_free", leak.empty()}, {"prefix_hit_rate", cache.hit_rate()}}},
    };
    std::ofstream f(a.json);
    KVATTN_CHECK(f.good(), "bench: cannot write --json file '", a.json, "'");
    f << j.dump(2) << "\n";
  }
  return leak.empty() ? 0 : 1;
}

}  // namespace kvattn::cli
