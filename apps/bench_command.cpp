// `kvattn bench`: a throughput workload (bench_workload.h; nano-vllm's bench.py by default) on
// kvattn's engine, then a single stream's decode speed and a long prompt's time to first
// token. The prefix workload runs a second time with the prefix cache off, so one call gives
// both throughputs. Prints one summary with each step's time split into attention, GEMMs,
// other model work and host (and JSON with --json); fails when a KV block is still held
// after the runs.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_workload.h"
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

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

void check_args(const BenchArgs& a) {
  KVATTN_CHECK(a.single_input >= 1 && a.single_output >= 1 && a.ttft_input >= 1,
               "bench: --single-input, --single-output and --ttft-input must be >= 1 but are ",
               a.single_input, ", ", a.single_output, " and ", a.ttft_input);
}

// The workload's sizes, then the flags given (>= 0), then --scale.
WorkloadSpec resolve_spec(const BenchArgs& a) {
  WorkloadSpec s = default_spec(parse_workload(a.workload));
  const auto set = [](int64_t given, int64_t& field) {
    if (given >= 0) field = given;
  };
  set(a.num_seqs, s.num_seqs);
  set(a.prefix_len, s.prefix_tokens);
  set(a.min_input, s.min_input);
  set(a.max_input, s.max_input);
  set(a.min_output, s.min_output);
  set(a.max_output, s.max_output);
  check_spec(s);  // before scaling, which rounds 0 up to 1
  s = scaled(s, a.scale);
  check_spec(s);
  return s;
}

int64_t step_tokens(const BenchArgs& a) {
  if (a.max_num_batched_tokens > 0) return a.max_num_batched_tokens;
  return std::max<int64_t>(16, std::llround(16384 * a.scale));
}

LLMOptions llm_options(const BenchArgs& a, const WorkloadSpec& spec) {
  LLMOptions o;
  o.model = resolve_model_path(a.model);
  KVATTN_CHECK(a.device == "cpu" || a.device == "cuda",
               "bench: --device must be cpu or cuda but is '", a.device, "'");
  o.device = a.device == "cpu" ? Device::cpu() : Device::cuda(0);
  o.num_threads = a.threads;
  o.kv_cache_bytes = a.kv_cache_mb << 20;
  o.ctx_size = a.ctx_size;
  // The CPU's default context (4096) would cut the long workload's prompts: size it for the
  // longest request instead (the LLM caps it at the model's context).
  if (o.ctx_size == 0 && o.device.is_cpu() && spec.longest() > 4096) o.ctx_size = spec.longest();
  apply_kv_cache_args(a.kv, o);
  o.max_num_seqs = a.max_num_seqs;
  o.max_num_batched_tokens = step_tokens(a);
  o.gpu_memory_utilization = a.gpu_memory_utilization;
  o.cuda_graphs = !a.eager;
  o.tensor_parallel = a.tensor_parallel;
  o.enable_prefix_caching = !a.no_prefix_caching;
  // Cheap on the CPU; elsewhere only when asked for (it may change how steps run).
  o.phase_timing = o.device.is_cpu() || a.breakdown;
  o.step_timeline = a.timeline;
  apply_weights_arg(a.weights, o);
  return o;
}

int64_t output_tokens(const std::vector<RequestOutput>& outs) {
  int64_t n = 0;
  for (const auto& o : outs) {
    for (const auto& s : o.samples) n += static_cast<int64_t>(s.token_ids.size());
  }
  return n;
}

// One generate() of the whole workload.
struct Run {
  int64_t output_tokens = 0;
  double wall = 0.0;
  GenerationStats stats;
  double tok_per_s() const { return ratio(static_cast<double>(output_tokens), wall); }
};

Run run_workload(LLM& llm, const Workload& w, bool progress) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  const bool show = progress || tty;
  ProgressBar bar(w.output_tokens, static_cast<int64_t>(w.prompts.size()), tty);
  TokenCallback cb;
  if (show) cb = [&bar](const TokenEvent& e) { bar.on_event(e); };
  const auto t = Clock::now();
  const auto outs = llm.generate(w.prompts, w.params, cb);
  Run r;
  r.wall = seconds_since(t);
  if (show) bar.finish();
  r.stats = llm.last_stats();
  r.output_tokens = output_tokens(outs);
  return r;
}

// "attention 21.0%, GEMMs 55.1%, other 22.9%, host 1.0%" of s (model/host when not timed).
std::string split_text(const StepTimeSplit& s, bool timed) {
  const double total = s.seconds();
  char buf[256];
  if (timed) {
    std::snprintf(buf, sizeof buf, "attention %.1f%%, GEMMs %.1f%%, other %.1f%%, host %.1f%%",
                  100 * ratio(s.attention_seconds, total), 100 * ratio(s.gemm_seconds, total),
                  100 * ratio(s.other_seconds, total), 100 * ratio(s.host_seconds, total));
  } else {
    std::snprintf(buf, sizeof buf, "model %.1f%%, host %.1f%% (no per-phase times here)",
                  100 * ratio(s.model_seconds, total), 100 * ratio(s.host_seconds, total));
  }
  return buf;
}

// Decode steps' K/V reads: attended keys x the cache's bytes a token (sliding-window layers
// read fewer, so there this is an upper bound), and the rate over the attention time when the
// phases are timed, else over the model time (a lower bound on the attention's own rate).
double decode_kv_bytes(const GenerationStats& st, int64_t kv_bytes_per_token) {
  return static_cast<double>(st.decode_steps.attended_keys) * static_cast<double>(kv_bytes_per_token);
}
double decode_kv_rate(const GenerationStats& st, int64_t kv_bytes_per_token) {
  const StepTimeSplit& d = st.decode_steps;
  return ratio(decode_kv_bytes(st, kv_bytes_per_token),
               st.phases_timed ? d.attention_seconds : d.model_seconds);
}

void print_breakdown(const GenerationStats& st, int64_t kv_bytes_per_token) {
  const auto line = [&](const char* what, const StepTimeSplit& s) {
    std::printf("  %-14s %6lld steps, %8.2f ms/step: %s\n", what, static_cast<long long>(s.steps),
                1e3 * ratio(s.seconds(), static_cast<double>(s.steps)),
                split_text(s, st.phases_timed).c_str());
  };
  std::printf("step time breakdown:\n");
  line("all steps", st.all_steps());
  line("prefill steps", st.prefill_steps);
  line("decode steps", st.decode_steps);
  if (st.decode_steps.steps > 0) {
    std::printf("  decode K/V reads: %.2f GB (%.0f keys a step), %.2f TB/s over the %s time\n",
                1e-9 * decode_kv_bytes(st, kv_bytes_per_token),
                ratio(static_cast<double>(st.decode_steps.attended_keys),
                      static_cast<double>(st.decode_steps.steps)),
                1e-12 * decode_kv_rate(st, kv_bytes_per_token),
                st.phases_timed ? "attention" : "model");
  }
}

Json split_json(const StepTimeSplit& s, bool timed) {
  const double total = s.seconds();
  Json j = {{"steps", s.steps},
            {"seconds", total},
            {"ms_per_step", 1e3 * ratio(total, static_cast<double>(s.steps))},
            {"model_s", s.model_seconds},
            {"host_s", s.host_seconds},
            {"host_share", ratio(s.host_seconds, total)}};
  if (timed) {
    j["attention_s"] = s.attention_seconds;
    j["gemm_s"] = s.gemm_seconds;
    j["other_s"] = s.other_seconds;
    j["attention_share"] = ratio(s.attention_seconds, total);
    j["gemm_share"] = ratio(s.gemm_seconds, total);
    j["other_share"] = ratio(s.other_seconds, total);
  }
  return j;
}

Json breakdown_json(const GenerationStats& st, int64_t kv_bytes_per_token) {
  Json decode = split_json(st.decode_steps, st.phases_timed);
  decode["attended_keys"] = st.decode_steps.attended_keys;
  decode["kv_bytes"] = decode_kv_bytes(st, kv_bytes_per_token);
  decode["kv_read_bytes_per_s"] = decode_kv_rate(st, kv_bytes_per_token);
  return {{"timed", st.phases_timed},
          {"all_steps", split_json(st.all_steps(), st.phases_timed)},
          {"prefill_steps", split_json(st.prefill_steps, st.phases_timed)},
          {"decode_steps", decode}};
}

// --timeline: the device's busy share and its idle gaps between steps.
void print_timeline(const std::optional<StepTimeline>& t) {
  if (!t) {
    std::printf("device timeline: not recorded (this model has none: CPU or tensor-parallel)\n");
    return;
  }
  std::printf("device timeline: %lld steps over %.3f s: busy %.1f%%, idle gaps %.1f%% "
              "(median %.1f us, p90 %.1f us, max %.1f us)\n",
              static_cast<long long>(t->steps), t->span_s, 100.0 * ratio(t->busy_s, t->span_s),
              100.0 * ratio(t->gap_s, t->span_s), t->gap_median_s * 1e6, t->gap_p90_s * 1e6,
              t->gap_max_s * 1e6);
}

Json timeline_json(const std::optional<StepTimeline>& t) {
  if (!t) return nullptr;
  return {{"steps", t->steps},         {"span_s", t->span_s},
          {"busy_s", t->busy_s},       {"gap_s", t->gap_s},
          {"gap_median_s", t->gap_median_s}, {"gap_p90_s", t->gap_p90_s},
          {"gap_max_s", t->gap_max_s}};
}

Json stats_json(const GenerationStats& s) {
  return {{"steps", s.num_steps},
          {"mixed_steps", s.num_mixed_steps},
          {"cascade_steps", s.num_cascade_steps},
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

Json run_json(const Run& r, int64_t prompt_tokens, int64_t kv_bytes_per_token) {
  const GenerationStats& s = r.stats;
  const double step_s = s.model_seconds + s.host_seconds;
  const double model_share = ratio(s.model_seconds, step_s);
  return {{"output_tokens", r.output_tokens},
          {"wall_s", r.wall},
          {"output_tok_per_s", r.tok_per_s()},
          {"total_tok_per_s", ratio(static_cast<double>(r.output_tokens + prompt_tokens), r.wall)},
          {"model_share", model_share},
          {"host_share", 1.0 - model_share},
          {"prefix_hit_rate", s.prefix_hit_rate()},
          {"stats", stats_json(s)},
          {"breakdown", breakdown_json(s, kv_bytes_per_token)}};
}

}  // namespace

int run_bench(const BenchArgs& a) {
  check_args(a);
  const WorkloadSpec spec = resolve_spec(a);
  const LLMOptions opt = llm_options(a, spec);
  if (!a.json.empty()) {  // a bad path fails before the model loads and the workload runs
    std::ofstream probe(a.json, std::ios::app);
    KVATTN_CHECK(probe.good(), "bench: cannot write --json file '", a.json, "'");
  }
  const auto t_load = Clock::now();
  LLM llm(opt);
  warn_on_sizing(llm, opt, false);
  const double load_s = seconds_since(t_load);
  const ModelConfig& c = llm.config();
  const int64_t context = llm.max_model_len();
  const auto max_id = static_cast<int32_t>(std::min<int64_t>(10000, c.vocab_size));
  const std::string name = std::filesystem::path(opt.model).filename().string();
  // Phase timing on CUDA runs every step eagerly (cuda_phase_events.h).
  const bool graphs = a.device == "cuda" && !a.eager && !a.breakdown;
  const char* mode = a.device != "cuda" ? ""
                     : graphs          ? " (cuda graphs)"
                     : a.breakdown     ? " (eager: --breakdown)"
                                       : " (eager)";
  std::fprintf(stderr, "loaded %s (%s, %lld layers, hidden %lld) on %s%s in %.1f s; KV pool %lld tokens (%s)\n",
               name.c_str(), c.architecture.c_str(), static_cast<long long>(c.num_layers),
               static_cast<long long>(c.hidden_size), a.device.c_str(), mode, load_s,
               static_cast<long long>(llm.kv_cache_tokens()), a.kv.dtype.c_str());

  const Workload w = make_workload(spec, a.seed, a.temperature, max_id, context, a.top_k, a.top_p);
  if (!a.no_warmup) {  // first-call costs (allocations, kernels, graphs) stay out of the figures
    SamplingParams sp;
    sp.max_tokens = 8;
    sp.ignore_eos = true;
    sp.detokenize = false;
    std::mt19937 warm(a.seed + 1);
    llm.generate({random_prompt(warm, max_id, std::min<int64_t>(64, context - 8))}, sp);
  }

  // Every block must be free after each run; set_prefix_caching() starts a fresh block
  // manager, so the check comes before it.
  std::string leak;
  const auto check_idle = [&] {
    try {
      llm.check_kv_cache_idle();
    } catch (const Error& e) {
      if (leak.empty()) leak = e.what();
    }
  };
  const Run main_run = run_workload(llm, w, a.progress);
  const GenerationStats& main_stats = main_run.stats;
  const std::optional<StepTimeline> main_timeline = llm.step_timeline();  // before other runs
  // The prefix workload again with the prefix cache off: the cache's own speedup.
  std::optional<Run> off_run;
  if (spec.kind == WorkloadKind::kPrefix && opt.enable_prefix_caching && !a.no_compare) {
    check_idle();
    llm.set_prefix_caching(false);
    off_run = run_workload(llm, w, a.progress);
    check_idle();
    llm.set_prefix_caching(true);
  }
  const double step_s = main_stats.model_seconds + main_stats.host_seconds;
  const double model_share = ratio(main_stats.model_seconds, step_s);

  // Single stream: one prompt decoding alone.
  std::mt19937 rng(a.seed + 2);
  SamplingParams one;
  one.temperature = static_cast<float>(a.temperature);
  one.top_k = a.top_k;
  one.top_p = static_cast<float>(a.top_p);
  one.ignore_eos = true;
  one.detokenize = false;
  const int64_t single_in = std::min(a.single_input, context - 1);
  const int64_t single_out = std::min(a.single_output, context - single_in);
  one.max_tokens = static_cast<int>(single_out);
  const auto t_single = Clock::now();
  llm.generate({random_prompt(rng, max_id, single_in)}, one);
  const double single_wall = seconds_since(t_single);
  const GenerationStats single_stats = llm.last_stats();
  const double single_decode = single_stats.decode_tokens_per_second();

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
  check_idle();

  std::printf("kvattn bench: %s on %s%s\n", name.c_str(), a.device.c_str(), mode);
  std::printf("workload %s: %lld seqs, ", std::string(workload_name(spec.kind)).c_str(),
              static_cast<long long>(spec.num_seqs));
  if (w.prefix_tokens > 0) {
    std::printf("shared prefix %lld + ", static_cast<long long>(w.prefix_tokens));
  }
  std::printf("input [%lld, %lld], output [%lld, %lld], seed %u: "
              "%lld prompt tokens, %lld output tokens\n",
              static_cast<long long>(spec.min_input), static_cast<long long>(spec.max_input),
              static_cast<long long>(spec.min_output), static_cast<long long>(spec.max_output),
              a.seed, static_cast<long long>(w.input_tokens),
              static_cast<long long>(w.output_tokens));
  std::printf("Total: %lldtok, Time: %.2fs, Throughput: %.2ftok/s\n",
              static_cast<long long>(main_run.output_tokens), main_run.wall, main_run.tok_per_s());
  std::printf("time split: model %.1f%%, host %.1f%% (%lld steps, %lld mixed, %lld preemptions, "
              "%lld prompt tokens from the prefix cache)\n",
              100.0 * model_share, 100.0 * (1.0 - model_share),
              static_cast<long long>(main_stats.num_steps),
              static_cast<long long>(main_stats.num_mixed_steps),
              static_cast<long long>(main_stats.num_preemptions),
              static_cast<long long>(main_stats.num_cached_tokens));
  print_breakdown(main_stats, llm.kv_bytes_per_token());
  if (a.timeline) print_timeline(main_timeline);
  if (main_stats.num_cascade_steps > 0) {
    std::printf("cascade decode: %lld of %lld decode steps read a shared prefix once\n",
                static_cast<long long>(main_stats.num_cascade_steps),
                static_cast<long long>(main_stats.decode_steps.steps));
  }
  std::printf("prefix cache %s: hit rate %.1f%% (%lld of %lld prompt tokens from the cache)\n",
              opt.enable_prefix_caching ? "on" : "off", 100.0 * main_stats.prefix_hit_rate(),
              static_cast<long long>(main_stats.num_cached_tokens),
              static_cast<long long>(main_stats.num_prompt_tokens));
  if (off_run) {
    std::printf("prefix cache off: Total: %lldtok, Time: %.2fs, Throughput: %.2ftok/s; "
                "cache on/off: %.2fx\n",
                static_cast<long long>(off_run->output_tokens), off_run->wall,
                off_run->tok_per_s(), ratio(main_run.tok_per_s(), off_run->tok_per_s()));
  }
  std::printf("single stream: %lld-token prompt, %lld new tokens: decode %.1f tok/s (%.2f s)\n",
              static_cast<long long>(single_in), static_cast<long long>(single_out),
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
        {"cuda_graphs", graphs},
        {"max_num_seqs", a.max_num_seqs},
        {"max_num_batched_tokens", opt.max_num_batched_tokens},
        {"ctx_size", context},
        {"kv_cache_tokens", llm.kv_cache_tokens()},
        {"kv_cache_dtype", a.kv.dtype},
        {"kv_calibrated", !a.kv.calibration_prompt.empty()},
        {"load_s", load_s},
        {"workload",
         {{"name", workload_name(spec.kind)}, {"num_seqs", spec.num_seqs},
          {"prefix_tokens", w.prefix_tokens}, {"min_input", spec.min_input},
          {"max_input", spec.max_input}, {"min_output", spec.min_output},
          {"max_output", spec.max_output}, {"scale", a.scale}, {"seed", a.seed},
          {"temperature", a.temperature}, {"top_k", a.top_k}, {"top_p", a.top_p},
          {"prompt_tokens", w.input_tokens},
          {"output_tokens", w.output_tokens}}},
        {"throughput", run_json(main_run, w.input_tokens, llm.kv_bytes_per_token())},
        {"breakdown", breakdown_json(main_stats, llm.kv_bytes_per_token())},
        {"timeline", timeline_json(main_timeline)},
        {"prefix_cache",
         {{"enabled", opt.enable_prefix_caching},
          {"hit_rate", main_stats.prefix_hit_rate()},
          {"cached_tokens", main_stats.num_cached_tokens},
          {"prompt_tokens", main_stats.num_prompt_tokens},
          {"off", off_run ? run_json(*off_run, w.input_tokens, llm.kv_bytes_per_token()) : Json()},
          {"speedup", off_run ? Json(ratio(main_run.tok_per_s(), off_run->tok_per_s())) : Json()}}},
        {"single_stream",
         {{"prompt_tokens", single_in}, {"new_tokens", single_out},
          {"decode_tok_per_s", single_decode}, {"wall_s", single_wall},
          {"breakdown", breakdown_json(single_stats, llm.kv_bytes_per_token())}}},
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
