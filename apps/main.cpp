// kvattn: the command line. `kvattn generate "prompt"` runs the default model on the CPU;
// `kvattn bench` measures serving throughput; `kvattn serve` is the OpenAI-compatible HTTP server;
// `kvattn info --model PATH` describes a model file.
#include <cstdlib>
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <random>
#include <exception>
#include <limits>
#include <string>
#include <system_error>

#include "commands.h"

namespace {

// An error as a command-line user reads it: kvattn::Error ends with the file:line of its check
// (DESIGN's contract, for library callers and bug reports); the command line drops it unless
// KVATTN_ERROR_LOCATIONS=1, as llama.cpp's and vLLM's messages carry none.
std::string user_message(std::string m) {
  const char* keep = std::getenv("KVATTN_ERROR_LOCATIONS");
  if (keep != nullptr && std::string(keep) == "1") return m;
  const size_t open = m.rfind(" (");
  if (open == std::string::npos || m.empty() || m.back() != ')') return m;
  const std::string loc = m.substr(open + 2, m.size() - open - 3);  // "file.ext:NN"
  const size_t colon = loc.rfind(':');
  const bool is_location =
      colon != std::string::npos && colon + 1 < loc.size() && loc.find(' ') == std::string::npos &&
      loc.find('.') < colon && loc.find_first_not_of("0123456789", colon + 1) == std::string::npos;
  return is_location ? m.substr(0, open) : m;
}

// --seed of generate: 0..2^64-1 as given, -1 a random seed (llama.cpp's convention); anything
// else is refused (CLI11 alone wraps -1 and saturates values past 2^64 without a word).
std::string seed_value(std::string& s) {
  if (s == "-1") {
    std::random_device rd;
    s = std::to_string((static_cast<uint64_t>(rd()) << 32) | rd());
    return {};
  }
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return "--seed must be -1 (random) or an integer in [0, 2^64) but is '" + s + "'";
  }
  return {};
}

void add_kv_cache_options(CLI::App* cmd, kvattn::cli::KvCacheArgs& kv) {
  cmd->add_option("--kv-cache-dtype", kv.dtype,
                  "KV cache elements: auto (CPU float32, GPU bf16), bf16, or fp8 (e4m3 with "
                  "per-layer, per-KV-head scales; ~2x the tokens of bf16)")
      ->check(CLI::IsMember({"auto", "bf16", "fp8"}));
  cmd->add_option("--kv-calibration-prompt", kv.calibration_prompt,
                  "fp8: compute the KV scales as amax/448 of this prompt's keys and values "
                  "(one prefill at start); without it the scales are 1.0");
  cmd->add_option("--cascade-min-prefix", kv.cascade_min_prefix,
                  "Cascade decode: decode steps whose sequences all share a cached prompt "
                  "prefix of at least this many tokens read it once for the whole batch "
                  "(0 => off; auto => GPU with a 16-bit cache, 256 tokens, when it saves "
                  ">= 32768 token reads)")
      ->default_val("auto");
}

// --threads: checked here (a bad value never reaches the engine) and warned about after the
// parse when it oversubscribes the machine.
void add_threads_option(CLI::App* cmd, int& threads, const char* automatic) {
  cmd->add_option("--threads", threads,
                  std::string("CPU threads, 1..") + std::to_string(kvattn::cli::kMaxThreads) +
                      " (more than the machine's cores runs, with a warning), or 0 => " +
                      automatic)
      ->default_val(0)
      ->check(CLI::Validator(
          [](std::string& v) { return kvattn::cli::threads_error(v); },
          "0.." + std::to_string(kvattn::cli::kMaxThreads), "threads"));
}

// A whole number of at least `lo`, named in the error ("--max-num-seqs: must be a whole
// number >= 1 but is '-3'"), where CLI11's PositiveNumber would print the range as doubles
// (and its parse saturates numbers past int64).
CLI::Validator at_least(int64_t lo) {
  return CLI::Validator(
      [lo](std::string& v) -> std::string {
        int64_t x = 0;
        const char* end = v.data() + v.size();
        const auto [stop, ec] = std::from_chars(v.data(), end, x);  // out of range: an error
        if (ec != std::errc() || stop != end || x < lo)
          return "must be a whole number >= " + std::to_string(lo) + " but is '" + v + "'";
        return "";
      },
      ">=" + std::to_string(lo), "at_least");
}

// The options generate, bench and serve share, defined once so that their help and checks
// agree: a bad value is refused here, naming the flag, before a model is looked for.
template <typename Args>
void add_engine_options(CLI::App* cmd, Args& a, const char* model_help) {
  cmd->add_option("-m,--model", a.model, model_help);
  cmd->add_option("--device", a.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--weights", a.weights,
                  "CPU weight storage: auto (gguf for GGUF files, f32 for HF directories), "
                  "gguf (the file's quantized blocks, computed on in place), f32, f16, bf16, "
                  "q8 (int8, one scale per 32)")
      ->check(CLI::IsMember({"auto", "gguf", "f32", "f16", "bf16", "q8"}));
  cmd->add_option("--tensor-parallel", a.tensor_parallel,
                  "Ranks of tensor parallelism (GPUs from cuda:0 on; CPU: threads)")
      ->default_val(1)->check(CLI::Range(1, 64));
  cmd->add_option("--kv-cache-mb", a.kv_cache_mb,
                  "KV cache size in MiB (0 => GPU: what --gpu-memory-utilization leaves, 0.9 "
                  "for generate; CPU: sized for --ctx-size)")
      ->default_val(0)->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--ctx-size", a.ctx_size,
                  "Context length: tokens one sequence may hold, prompt and output (0 => the "
                  "model's; on the CPU at most 4096, and the KV pool is sized for it when "
                  "--kv-cache-mb is 0)")
      ->default_val(0)->check(at_least(0));
  add_kv_cache_options(cmd, a.kv);
}

// bench and serve: the GPU memory share and the scheduler's bounds.
template <typename Args>
void add_server_sizing_options(CLI::App* cmd, Args& a, int64_t batched_tokens_default,
                               const char* batched_tokens_help) {
  cmd->add_option("--gpu-memory-utilization", a.gpu_memory_utilization,
                  "Fraction of GPU memory for weights, activations and the KV pool, in (0, 1]")
      ->default_val(0.9)
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            double x = 0;
            if (!CLI::detail::lexical_cast(v, x) || !(x > 0 && x <= 1))
              return "must be in (0, 1] but is '" + v + "'";
            return "";
          },
          "(0, 1]", "fraction"));
  cmd->add_option("--max-num-seqs", a.max_num_seqs, "Running sequences at most")
      ->default_val(256)->check(at_least(1));
  auto* t = cmd->add_option("--max-num-batched-tokens", a.max_num_batched_tokens,
                            batched_tokens_help)->check(at_least(1));
  if (batched_tokens_default > 0) t->default_val(batched_tokens_default);
}

}  // namespace

int main(int argc, char** argv) {
  // NVLink multicast stays off for NCCL (tensor parallelism) and for any child process.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  CLI::App app{"kvattn: paged KV-cache attention and a small LLM engine"};
  app.require_subcommand(1);
  // A flag given twice takes its last value (llama.cpp's and argparse's way: wrapper scripts
  // append overrides); the repeatable options (prompts, --file, --stop, --allowed-origins) take
  // all.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  kvattn::cli::GenerateArgs g;
  auto* gen = app.add_subcommand(
      "generate", "Generate text for one or more prompts (streams when there is one)");
  gen->add_option("prompts", g.prompts, "Prompt text (one or more; or give --file)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  gen->add_option("-f,--file", g.prompt_files,
                  "Read a prompt from this file (repeatable: one prompt a file, after the "
                  "positional ones; - reads standard input); one trailing newline is dropped")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  add_engine_options(gen, g,
                     "A .gguf file or an HF directory (default: SmolLM2-135M-Instruct from "
                     "models/, fetched by scripts/fetch_model.sh; or $KVATTN_MODEL)");
  gen->add_flag("--chat", g.chat,
                "Wrap each prompt in the model's chat template (the default when the model "
                "has one)");
  gen->add_flag("--no-chat", g.no_chat, "Use the prompt as raw text (plain completion)");
  gen->add_option("-n,--max-tokens", g.sampling.max_tokens,
                  "Tokens to generate at most (0: none, nothing printed)")
      ->default_val(256)->check(CLI::Range(0, std::numeric_limits<int>::max()));
  gen->add_option("-t,--temperature", g.sampling.temperature, "0 => greedy")->default_val(0.0);
  gen->add_option("--top-k", g.sampling.top_k, "0 => off")->default_val(0);
  gen->add_option("--top-p", g.sampling.top_p, "1 => off")->default_val(1.0);
  gen->add_option("--min-p", g.sampling.min_p, "0 => off")->default_val(0.0);
  gen->add_option("--seed", g.sampling.seed, "Seed of the sampler (-1: a random one, llama.cpp's)")
      ->default_val(0)
      ->transform(CLI::Validator(seed_value, "-1|0..2^64-1"));
  gen->add_option("--logprobs", g.sampling.logprobs,
                  "With --json: each generated token's log-probability and the N most likely "
                  "token ids (0-20; -1 = none)")
      ->default_val(-1)->check(CLI::Range(-1, kvattn::SamplingParams::kMaxLogprobs));
  gen->add_option("--repeat-penalty,--repetition-penalty", g.sampling.repetition_penalty,
                  "Divide positive (multiply negative) logits of tokens already in the prompt "
                  "or output by this (1 => off; vLLM's repetition_penalty)")
      ->default_val(1.0);
  gen->add_option("--presence-penalty", g.sampling.presence_penalty,
                  "Subtract from the logits of tokens already generated, in [-2, 2]")
      ->default_val(0.0);
  gen->add_option("--frequency-penalty", g.sampling.frequency_penalty,
                  "Subtract this times the count of each token already generated, in [-2, 2]")
      ->default_val(0.0);
  gen->add_flag("--ignore-eos", g.sampling.ignore_eos,
                "Keep going past end-of-text tokens (they are dropped from the text unless "
                "--special)");
  gen->add_flag("--special", g.special,
                "Print special tokens (end-of-text, <|im_end|>, ...) in the text; without it "
                "they are dropped silently. The end-of-text token that stops generation is "
                "never printed");
  gen->add_option("--stop", g.sampling.stop, "Stop string (repeatable); not printed")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  auto* schema = gen->add_option(
      "-j,--json-schema", g.json_schema,
      "Structured output: the text is JSON that satisfies this JSON Schema (llama.cpp's -j; "
      "vLLM's guided_json)");
  auto* schema_file = gen->add_option("--json-schema-file", g.json_schema_file,
                                      "Structured output: as --json-schema, read from a file")
                          ->check(CLI::ExistingFile);
  auto* object = gen->add_flag("--json-object", g.json_object,
                               "Structured output: the text is one JSON object");
  auto* regex = gen->add_option("--regex", g.regex,
                                "Structured output: the whole text matches this regular "
                                "expression (vLLM's guided_regex)");
  auto* choice = gen->add_option("--choice", g.choices,
                                 "Structured output: the text is exactly one of these "
                                 "(repeatable; vLLM's guided_choice)")
                     ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
                     ->allow_extra_args(false);
  auto* grammar = gen->add_option("--grammar", g.grammar,
                                  "Structured output: the text follows this GBNF grammar from its "
                                  "rule root (llama.cpp's --grammar)");
  auto* grammar_file = gen->add_option("--grammar-file", g.grammar_file,
                                       "Structured output: as --grammar, read from a file")
                           ->check(CLI::ExistingFile);
  for (auto* a : {schema, schema_file, object, regex, choice, grammar, grammar_file}) {
    for (auto* b : {schema, schema_file, object, regex, choice, grammar, grammar_file}) {
      if (a != b) a->excludes(b);
    }
  }
  add_threads_option(gen, g.threads, "all cores, or one while the machine is oversubscribed");
  gen->add_option("--json", g.json,
                  "Also write one JSON object per prompt, one per line, to this file (- : to "
                  "stdout, instead of the text): prompt and prompt_token_ids, token_ids, text, "
                  "finish_reason, timings");
  gen->add_flag("-q,--quiet", g.quiet,
                "No loading progress or detail on stderr (the prefill/decode line stays)");
  gen->footer(
      "Output: the generated text alone goes to stdout (several prompts: each after a "
      "'=== [i] prompt' line); loading progress, warnings and the 'prefill: X tok/s, decode: "
      "Y tok/s' line go to stderr, so `kvattn generate ... > out.txt` keeps only the text. "
      "-n 0 prints nothing on stdout.\n");

  kvattn::cli::BenchArgs b;
  auto* bench = app.add_subcommand(
      "bench", "Throughput benchmark: a workload of random prompts (ignore_eos; nano-vllm's by "
               "default), then single-stream decode and time to first token, with each step's "
               "time split into attention, GEMMs, other and host");
  add_engine_options(bench, b, "A .gguf file or an HF directory (default: as generate)");
  bench->add_option("--workload", b.workload,
                    "nano-vllm (256 prompts of 100-1024 tokens, 100-1024 output tokens), prefix "
                    "(the same behind one shared 2000-token system prompt; also run with the "
                    "prefix cache off) or long (32 prompts of 8192-16384 tokens, 512 output "
                    "tokens)")
      ->check(CLI::IsMember({"nano-vllm", "prefix", "long"}))->default_val("nano-vllm");
  const auto size = [&](const char* flag, int64_t& field, const char* what) {
    bench->add_option(flag, field, std::string(what) + " (default: the workload's)")
        ->check(at_least(0));
  };
  size("--num-seqs", b.num_seqs, "Prompts in the main run");
  size("--prefix-len", b.prefix_len, "Tokens of the shared system prompt");
  size("--min-input", b.min_input, "Shortest prompt (after the shared one)");
  size("--max-input", b.max_input, "Longest prompt (after the shared one)");
  size("--min-output", b.min_output, "Fewest tokens generated");
  size("--max-output", b.max_output, "Most tokens generated");
  bench->add_option("--scale", b.scale,
                    "Multiplies the workload's counts and lengths (e.g. 0.05 for a small CPU run)")
      ->default_val(1.0)->check(CLI::Validator(
          [](const std::string& s) -> std::string {
            double v = 0;
            try {
              v = std::stod(s);
            } catch (const std::exception&) {
              return "--scale must be a number > 0 but is '" + s + "'";
            }
            return std::isfinite(v) && v > 0 ? "" : "--scale must be a number > 0 but is " + s;
          },
          "POSITIVE"));
  bench->add_flag("--no-prefix-caching", b.no_prefix_caching,
                  "Turn the prefix cache off (the prefix workload then runs once)");
  bench->add_flag("--no-compare", b.no_compare,
                  "Prefix workload: skip the second run with the prefix cache off");
  bench->add_flag("--breakdown", b.breakdown,
                  "CUDA: time each step's phases (attention, GEMMs, other) with events; steps "
                  "then run eagerly, without CUDA graphs. The CPU always times its phases");
  bench->add_flag("--timeline", b.timeline,
                  "CUDA: the main run's device timeline: time inside steps and the idle gaps "
                  "between them (two events a step; CUDA graphs stay on)");
  bench->add_option("--seed", b.seed, "Seed of the workload (std::mt19937)")->default_val(0);
  bench->add_option("-t,--temperature", b.temperature, "Sampling temperature (0 => greedy)")
      ->default_val(0.6);
  bench->add_option("--top-k", b.top_k, "Every request's top-k (0 => off)")->default_val(0);
  bench->add_option("--top-p", b.top_p, "Every request's top-p (1 => off)")
      ->default_val(1.0)
      ->check(CLI::Range(0.0, 1.0));
  bench->add_flag("--eager", b.eager, "No CUDA graphs (eager launches)");
  add_server_sizing_options(bench, b, 0,
                            "Tokens per step (default: 16384 times --scale, at least 16)");
  add_threads_option(bench, b.threads, "automatic");
  bench->add_option("--single-input", b.single_input, "Prompt of the single-stream run")
      ->default_val(128);
  bench->add_option("--single-output", b.single_output, "Tokens of the single-stream run")
      ->default_val(256);
  bench->add_option("--ttft-input", b.ttft_input,
                    "Prompt of the time-to-first-token run (capped to the context)")
      ->default_val(4096);
  bench->add_flag("--no-warmup", b.no_warmup, "Skip the short warm-up generate");
  bench->add_flag("--progress", b.progress, "Progress bar even when stderr is not a terminal");
  bench->add_option("--json", b.json, "Write every figure to this JSON file");

  kvattn::cli::ServeArgs sv;
  auto* serve = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (SSE "
               "streaming), /v1/models, /health, /metrics");
  add_engine_options(serve, sv, "A .gguf file or an HF directory (default: as generate)");
  serve->add_option("--host", sv.host, "Address to listen on")->default_val("127.0.0.1");
  serve->add_option("--port", sv.port, "Port (0: any free port, printed at start)")
      ->default_val(8000)->check(CLI::Range(0, 65535));
  serve->add_option("--api-key", sv.api_key,
                    "Require 'Authorization: Bearer KEY' on /v1/* (default: $KVATTN_API_KEY)");
  serve->add_option("--served-model-name", sv.served_model_name,
                    "Model id in the API (default: the model file's name)");
  add_server_sizing_options(serve, sv, 16384, "Tokens per step");
  serve->add_flag("--eager", sv.eager, "No CUDA graphs (eager launches)");
  serve->add_flag("--no-prefix-caching", sv.no_prefix_caching, "Turn the prefix cache off");
  add_threads_option(serve, sv.threads, "automatic");
  serve->add_option("--max-queue", sv.max_queue,
                    "Answer 503 while this many sequences wait for admission")
      ->default_val(1024)->check(CLI::PositiveNumber);
  serve->add_option("--drain-s", sv.drain_s,
                    "On SIGINT/SIGTERM, let running requests finish for this many seconds")
      ->default_val(0.0)->check(CLI::NonNegativeNumber);
  serve->add_option("--http-threads", sv.http_threads,
                    "HTTP worker threads (each open stream or keep-alive connection holds one)")
      ->default_val(512)->check(CLI::Range(1, 65536));
  serve->add_option("--allowed-origins", sv.allowed_origins,
                    "CORS: origins browsers may call from, \"*\" or exact origins, comma-separated "
                    "(default \"*\", vLLM's; '' turns CORS off)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  serve->add_flag("-q,--quiet", sv.quiet, "No loading progress on stderr");

  std::string info_model;
  bool info_all = false;
  auto* info = app.add_subcommand("info", "Print a model's architecture, shapes and dtypes");
  info->add_option("-m,--model", info_model, "A .gguf file or an HF directory (default: as generate)");
  info->add_flag("--all", info_all, "List every tensor");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*gen) {
      if (g.chat && g.no_chat) {
        std::fprintf(stderr, "kvattn: error: --chat and --no-chat exclude each other\n");
        return 2;
      }
      kvattn::cli::warn_if_oversubscribed(g.threads);
      return kvattn::cli::run_generate(g);
    }
    if (*bench) {
      kvattn::cli::warn_if_oversubscribed(b.threads);
      return kvattn::cli::run_bench(b);
    }
    if (*serve) {
      kvattn::cli::warn_if_oversubscribed(sv.threads);
      return kvattn::cli::run_serve(sv);
    }
    return kvattn::cli::run_info(info_model, info_all);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\nkvattn: error: %s\n", user_message(e.what()).c_str());
    return 1;
  }
}
