// The `kvattn` subcommands. main.cpp parses the command line with CLI11 and calls these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvattn/engine/llm.h"
#include "kvattn/engine/sampler.h"

namespace kvattn::cli {

// --kv-cache-dtype, --kv-calibration-prompt and --cascade-min-prefix, shared by generate, bench
// and serve.
struct KvCacheArgs {
  std::string dtype = "auto";       // auto | bf16 | fp8
  std::string calibration_prompt;   // fp8: scales from this prompt's amax (empty: 1.0)
  std::string cascade_min_prefix = "auto";  // --cascade-min-prefix: auto | N (0 = off)
};
// Sets o.kv_cache_dtype and o.kv_calibration_prompt; refuses a calibration prompt on CUDA
// (not supported yet)
// and a calibration prompt without fp8, with a message naming the flag.
void apply_kv_cache_args(const KvCacheArgs& a, LLMOptions& o);

// --weights (auto | gguf | f32 | f16 | bf16 | q8) on generate, bench and serve: sets o.weight_format
// for a named format; "auto" leaves the default.
void apply_weights_arg(const std::string& weights, LLMOptions& o);

// After the model loads (generate, bench, serve): a warning on stderr (unless quiet) where the
// sizing flags were not taken as given: --ctx-size past the model's context (clamped to it),
// or a --kv-cache-mb pool smaller than one sequence's context (such sequences end early).
void warn_on_sizing(const LLM& llm, const LLMOptions& o, bool quiet);

// --threads on generate, bench and serve: 0 (automatic) or 1..kMaxThreads.
inline constexpr int kMaxThreads = 1024;
int available_cores();  // the cores this process may run on (its affinity mask)
// Empty when `value` is a valid --threads value; else the reason, naming the valid range.
std::string threads_error(const std::string& value);
// Warns on stderr when `threads` exceeds available_cores() (the run goes on).
void warn_if_oversubscribed(int threads);

struct GenerateArgs {
  std::string model;  // empty => the default model (see resolve_model_path)
  std::string device = "cpu";
  bool chat = false;     // --chat: force the chat template
  bool no_chat = false;  // --no-chat: raw completion
  std::vector<std::string> prompts;
  // -f/--file: one prompt per file, after the positional ones ("-": standard input), its
  // one trailing newline dropped (llama.cpp's -f).
  std::vector<std::string> prompt_files;
  SamplingParams sampling;
  int threads = 0;
  std::string weights = "auto";  // CPU weight storage: auto | gguf | f32 | f16 | bf16 | q8
  int64_t kv_cache_mb = 0;
  int64_t ctx_size = 0;  // --ctx-size: LLMOptions::ctx_size (0: automatic)
  int tensor_parallel = 1;
  bool quiet = false;    // no loading progress or stats detail on stderr
  bool special = false;  // --special: special tokens (end-of-text...) appear in the text
  std::string json;      // --json FILE: one JSON object per prompt, one per line ("-": stdout)
  // Structured output (at most one): --json-schema TEXT, --json-schema-file FILE,
  // --json-object, --regex RE, --choice TEXT (repeatable), --grammar GBNF, --grammar-file FILE.
  std::string json_schema;
  std::string json_schema_file;
  std::string grammar;
  std::string grammar_file;
  bool json_object = false;
  std::string regex;
  std::vector<std::string> choices;
  KvCacheArgs kv;
};

// `kvattn bench`: a throughput workload (bench_workload.h: nano-vllm's bench.py by default,
// or the shared-prefix or long-prompt one), then one stream's decode speed and one long
// prompt's time to first token, with each step's wall time split into attention, GEMMs,
// other model work and host. Sizes left at -1 take the workload's; --scale multiplies them.
// All draws come from std::mt19937(seed).
struct BenchArgs {
  std::string model;  // empty => the default model
  std::string device = "cpu";
  std::string workload = "nano-vllm";  // nano-vllm | prefix | long
  int64_t num_seqs = -1;
  int64_t prefix_len = -1;  // the shared prompt (prefix: 2,000 tokens; others: none)
  int64_t min_input = -1, max_input = -1;
  int64_t min_output = -1, max_output = -1;
  double scale = 1.0;
  uint32_t seed = 0;
  double temperature = 0.6;  // nano-vllm's bench samples at 0.6
  int top_k = 0;             // 0: off (nano-vllm's bench)
  double top_p = 1.0;        // 1: off
  bool eager = false;        // no CUDA graphs
  bool no_prefix_caching = false;  // the main run without the prefix cache
  bool no_compare = false;         // prefix workload: no second run with the cache off
  // CUDA: per-phase step times from events, every step eager (no graphs); the CPU model
  // always times its phases in bench.
  bool breakdown = false;
  // CUDA: the device's step timeline of the main run (LLMOptions::step_timeline): busy time
  // and the idle gaps between steps, from two events a step (graphs stay on).
  bool timeline = false;
  int tensor_parallel = 1;
  int64_t max_num_seqs = 256;
  // -1: 16384 times --scale (at least 16), so a scaled run splits its prompts over steps
  // as the full one does (the prefix cache serves only prompts admitted after the step
  // that computed the prefix).
  int64_t max_num_batched_tokens = -1;
  int64_t kv_cache_mb = 0;
  int64_t ctx_size = 0;
  double gpu_memory_utilization = 0.9;
  int threads = 0;
  std::string weights = "auto";
  int64_t single_input = 128, single_output = 256;  // the single-stream decode run
  int64_t ttft_input = 4096;                        // capped to the context and the pool
  bool no_warmup = false;
  bool progress = false;  // draw the progress bar even when stderr is not a terminal
  std::string json;       // write every figure here
  KvCacheArgs kv;
};

// `kvattn serve`: the OpenAI-compatible HTTP server (include/kvattn/server/server.h) with the
// engine options of bench.
struct ServeArgs {
  std::string model;  // empty => the default model
  std::string device = "cpu";
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (printed)
  std::string api_key;
  std::string served_model_name;  // empty: the model file's name without extension
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 16384;
  int64_t kv_cache_mb = 0;
  int64_t ctx_size = 0;
  double gpu_memory_utilization = 0.9;
  int tensor_parallel = 1;
  bool eager = false;
  bool no_prefix_caching = false;
  int threads = 0;
  std::string weights = "auto";
  int64_t max_queue = 1024;
  double drain_s = 0.0;
  int http_threads = 512;
  std::vector<std::string> allowed_origins = {"*"};  // CORS (ServerOptions::allowed_origins)
  bool quiet = false;
  KvCacheArgs kv;
};

int run_generate(const GenerateArgs& args);
int run_serve(const ServeArgs& args);
int run_bench(const BenchArgs& args);
int run_info(const std::string& model, bool all_tensors);

// The model to use: `given` when set; else $KVATTN_MODEL; else the default
// SmolLM2-135M-Instruct GGUF searched in ./models, <exe dir>/../models, <exe dir>/models and
// the source tree's models/. Throws kvattn::Error saying how to fetch it when absent.
std::string resolve_model_path(const std::string& given);

}  // namespace kvattn::cli
