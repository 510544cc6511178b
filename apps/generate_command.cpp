// `kvattn generate`: loads the model (progress on stderr), applies the chat template when the
// model has one (unless --no-chat), streams one prompt's tokens to stdout (or prints each
// completion in turn for several), and ends with "prefill: X tok/s, decode: Y tok/s".
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "commands.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"

namespace kvattn::cli {
namespace {

// Prints "loading NAME: 42%" on stderr, redrawn in place on a terminal, once per 25% otherwise.
class ProgressLine {
 public:
  ProgressLine(std::string name, bool quiet)
      : name_(std::move(name)), quiet_(quiet), tty_(isatty(STDERR_FILENO) != 0) {}
  void operator()(double fraction) {
    if (quiet_) return;
    const int pct = static_cast<int>(fraction * 100.0 + 0.5);
    const int step = tty_ ? 1 : 25;
    if (pct / step == last_ / step) return;
    last_ = pct;
    std::fprintf(stderr, tty_ ? "\rloading %s: %3d%%" : "loading %s: %3d%%\n", name_.c_str(),
                 pct);
    std::fflush(stderr);
  }
  void done() {
    if (!quiet_ && tty_ && last_ >= 0) std::fputc('\n', stderr);
  }

 private:
  std::string name_;
  bool quiet_, tty_;
  int last_ = -1;
};

Device parse_device(const std::string& d) {
  if (d == "cpu") return Device::cpu();
  KVATTN_CHECK(d == "cuda", "generate: --device must be cpu or cuda but is '", d, "'");
  return Device::cuda(0);
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  LLMOptions opt;
  opt.model = resolve_model_path(args.model);
  opt.device = parse_device(args.device);
  opt.tensor_parallel = args.tensor_parallel;
  opt.num_threads = args.threads;
  opt.kv_cache_bytes = args.kv_cache_mb << 20;
  apply_kv_cache_args(args.kv, opt);
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16,
                         WeightFormat::kQ8}) {
    if (args.weights == weight_format_name(f)) opt.weight_format = f;
  }
  ProgressLine progress(std::filesystem::path(opt.model).filename().string(), args.quiet);
  opt.on_load_progress = [&](double f) { progress(f); };

  const auto t0 = std::chrono::steady_clock::now();
  LLM llm(opt);
  progress.done();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelConfig& c = llm.config();
  if (!args.quiet) {
    std::fprintf(stderr, "loaded %s (%lld layers, hidden %lld, vocab %lld) on %s in %.1f s\n",
                 c.architecture.c_str(), static_cast<long long>(c.num_layers),
                 static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size),
                 args.device.c_str(), load_s);
    std::fprintf(stderr, "KV cache: %s, %lld tokens\n", args.kv.dtype.c_str(),
                 static_cast<long long>(llm.kv_cache_tokens()));
  }

  const bool chat = args.chat || (!args.no_chat && llm.has_chat_template());
  KVATTN_CHECK(!args.chat || llm.has_chat_template(),
               "generate: --chat was given but the model has no chat template");
  std::vector<std::string> prompts;
  for (const auto& p : args.prompts) prompts.push_back(chat ? llm.chat_prompt(p) : p);

  const bool stream = prompts.size() == 1;
  TokenCallback on_token;
  if (stream) {
    on_token = [](const TokenEvent& e) {
      if (!e.text.empty()) {
        std::fwrite(e.text.data(), 1, e.text.size(), stdout);
        std::fflush(stdout);
      }
    };
  }
  auto outs = llm.generate(prompts, args.sampling, on_token);
  if (stream) {
    std::fputc('\n', stdout);
  } else {
    for (size_t i = 0; i < outs.size(); ++i) {
      std::printf("=== [%zu] %s\n%s\n", i, args.prompts[i].c_str(), outs[i].text.c_str());
    }
  }
  std::fflush(stdout);
  const GenerationStats& s = llm.last_stats();
  if (!args.quiet) {
    int64_t generated = 0;
    for (const auto& o : outs) generated += static_cast<int64_t>(o.token_ids.size());
    std::fprintf(stderr,
                 "[%lld prompt tokens (%lld from the prefix cache) in %.3f s; %lld generated "
                 "tokens, %lld decode steps in %.3f s; finish: %s]\n",
                 static_cast<long long>(s.num_prompt_tokens),
                 static_cast<long long>(s.num_cached_tokens), s.prefill_seconds,
                 static_cast<long long>(generated), static_cast<long long>(s.num_decode_tokens),
                 s.decode_seconds,
                 outs.empty() ? "-" : std::string(finish_reason_name(outs[0].finish_reason)).c_str());
  }
  std::printf("prefill: %.1f tok/s, decode: %.1f tok/s\n", s.prefill_tokens_per_second(),
              s.decode_tokens_per_second());
  return 0;
}

}  // namespace kvattn::cli
