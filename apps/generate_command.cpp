// `kvattn generate`: loads the model (progress on stderr), applies the chat template when the
// model has one (unless --no-chat), streams one prompt's tokens to stdout (or prints each
// completion in turn for several), and ends with "prefill: X tok/s, decode: Y tok/s" on
// stderr. stdout carries the generated text and nothing else, so it can be redirected; --json
// writes the token ids, text, finish reason and timings of each prompt for scripts.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// The positional prompts, then one per --file (llama.cpp's -f: the file's text with one
// trailing newline dropped, so `echo text > f` gives "text"; "-" reads standard input once).
std::vector<std::string> collect_prompts(const GenerateArgs& args) {
  std::vector<std::string> prompts = args.prompts;
  bool stdin_read = false;
  for (const auto& path : args.prompt_files) {
    std::string text;
    if (path == "-") {
      KVATTN_CHECK(!stdin_read, "generate: --file - (standard input) given more than once");
      stdin_read = true;
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      KVATTN_CHECK(!std::cin.bad(), "generate: --file -: reading standard input failed");
    } else {
      KVATTN_CHECK(!std::filesystem::is_directory(path), "generate: --file: '", path,
                   "' is a directory, not a prompt file");
      std::ifstream in(path, std::ios::binary);
      KVATTN_CHECK(in.good(), "generate: --file: cannot read '", path, "'");
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      KVATTN_CHECK(!in.bad(), "generate: --file: reading '", path, "' failed");
    }
    if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\r\n") == 0) {
      text.resize(text.size() - 2);
    } else if (!text.empty() && text.back() == '\n') {
      text.pop_back();
    }
    prompts.push_back(std::move(text));
  }
  KVATTN_CHECK(!prompts.empty(), "generate: no prompt: give prompt text or --file FILE");
  return prompts;
}

Device parse_device(const std::string& d) {
  if (d == "cpu") return Device::cpu();
  KVATTN_CHECK(d == "cuda", "generate: --device must be cpu or cuda but is '", d, "'");
  return Device::cuda(0);
}

// Seconds from the start of generate() to each prompt's first token and to its end.
struct PromptTimes {
  using Clock = std::chrono::steady_clock;
  explicit PromptTimes(size_t n) : first_token(n, -1.0), finished(n, -1.0) {}
  void on_event(const TokenEvent& e) {
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    if (e.token >= 0 && first_token[e.index] < 0) first_token[e.index] = t;
    if (e.finished) finished[e.index] = t;
  }
  Clock::time_point start = Clock::now();
  std::vector<double> first_token, finished;
};

// Writes text to stdout as it comes, remembering whether anything was written and whether it
// ended a line, so the end adds a newline only after text that lacks one.
class TextOut {
 public:
  void write(std::string_view text) {
    if (text.empty()) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    last_ = text.back();
  }
  void end_line() {
    if (last_ != '\0' && last_ != '\n') std::fputc('\n', stdout);
    last_ = '\0';
    std::fflush(stdout);
  }

 private:
  char last_ = '\0';
};

using Json = nlohmann::ordered_json;

// One prompt's --json object. Timings: seconds from the start of the generate() call (all
// prompts run together, so prefill and decode speeds are the whole call's).
Json prompt_json(size_t i, const std::string& prompt, const std::vector<int32_t>& prompt_ids,
                 const RequestOutput& o, const PromptTimes& times, const GenerationStats& s,
                 double load_s) {
  const auto seconds = [](double t) { return t < 0 ? Json(nullptr) : Json(t); };
  Json j;
  j["index"] = i;
  j["prompt"] = prompt;
  j["prompt_token_ids"] = prompt_ids;
  j["token_ids"] = o.token_ids;
  j["text"] = o.text;
  j["finish_reason"] = finish_reason_name(o.finish_reason);
  j["stop_token"] = o.stop_token >= 0 ? Json(o.stop_token) : Json(nullptr);
  j["num_cached_tokens"] = o.num_cached_tokens;
  if (!o.logprobs.empty()) {
    // --logprobs N: per generated token its log-probability and the N most likely ids.
    Json lps = Json::array();
    for (const TokenLogprobs& lp : o.logprobs) {
      Json top = Json::array();
      for (const TokenLogprob& t : lp.top) top.push_back({{"token_id", t.token}, {"logprob", t.logprob}});
      lps.push_back({{"logprob", lp.logprob}, {"top", std::move(top)}});
    }
    j["logprobs"] = std::move(lps);
  }
  j["timings"] = {{"load_s", load_s},
                  {"first_token_s", seconds(times.first_token[i])},
                  {"finished_s", seconds(times.finished[i])},
                  {"prefill_s", s.prefill_seconds},
                  {"decode_s", s.decode_seconds},
                  {"prefill_tokens_per_s", s.prefill_tokens_per_second()},
                  {"decode_tokens_per_s", s.decode_tokens_per_second()}};
  return j;
}

// "prefill: X tok/s, decode: Y tok/s", where a phase that ran no token says "0 tokens"
// instead of a meaningless 0.0 tok/s.
void print_speed(const GenerationStats& s) {
  const auto phase = [](const char* name, int64_t tokens, double tok_s) {
    if (tokens > 0 && tok_s > 0) {
      std::fprintf(stderr, "%s: %.1f tok/s", name, tok_s);
    } else {
      std::fprintf(stderr, "%s: %lld tokens", name, static_cast<long long>(tokens));
    }
  };
  phase("prefill", s.num_prefill_tokens, s.prefill_tokens_per_second());
  std::fputs(", ", stderr);
  phase("decode", s.num_decode_tokens, s.decode_tokens_per_second());
  std::fputc('\n', stderr);
}

// The sampling flags checked before the model loads, SamplingParams' field names in the
// message replaced by the flags that set them (validate() speaks for the library's API).
void check_sampling_flags(const SamplingParams& p) {
  try {
    validate(p);
  } catch (const Error& e) {
    std::string m = e.what();
    static const std::pair<const char*, const char*> kFlags[] = {
        {"SamplingParams: temperature", "--temperature"},
        {"SamplingParams: top_p", "--top-p"},
        {"SamplingParams: min_p", "--min-p"},
        {"SamplingParams: presence_penalty", "--presence-penalty"},
        {"SamplingParams: frequency_penalty", "--frequency-penalty"},
        {"SamplingParams: repetition_penalty", "--repeat-penalty"},
        {"SamplingParams: stop strings", "--stop strings"},
        {"SamplingParams: ignore_eos", "--ignore-eos"}};
    for (const auto& [field, flag] : kFlags) {
      if (m.rfind(field, 0) == 0) m = flag + m.substr(std::string(field).size());
    }
    throw Error("generate: " + m);
  }
}

}  // namespace

// The structured-output flags as SamplingParams::structured.
StructuredOutput structured_output(const GenerateArgs& args) {
  using Kind = StructuredOutput::Kind;
  const auto read = [](const std::string& path, const char* flag) {
    std::ifstream in(path, std::ios::binary);
    KVATTN_CHECK(in.good(), "generate: ", flag, ": cannot read '", path, "'");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  StructuredOutput s;
  if (!args.json_schema.empty()) {
    s.kind = Kind::kJsonSchema;
    s.spec = args.json_schema;
  } else if (!args.json_schema_file.empty()) {
    s.kind = Kind::kJsonSchema;
    s.spec = read(args.json_schema_file, "--json-schema-file");
  } else if (args.json_object) {
    s.kind = Kind::kJsonObject;
  } else if (!args.regex.empty()) {
    s.kind = Kind::kRegex;
    s.spec = args.regex;
  } else if (!args.choices.empty()) {
    s.kind = Kind::kChoice;
    s.choices = args.choices;
  } else if (!args.grammar.empty()) {
    s.kind = Kind::kGrammar;
    s.spec = args.grammar;
  } else if (!args.grammar_file.empty()) {
    s.kind = Kind::kGrammar;
    s.spec = read(args.grammar_file, "--grammar-file");
  }
  return s;
}

int run_generate(const GenerateArgs& args) {
  SamplingParams checked = args.sampling;
  checked.structured = structured_output(args);
  check_sampling_flags(checked);
  const std::vector<std::string> prompts = collect_prompts(args);
  LLMOptions opt;
  opt.model = resolve_model_path(args.model);
  opt.device = parse_device(args.device);
  opt.tensor_parallel = args.tensor_parallel;
  opt.num_threads = args.threads;
  opt.kv_cache_bytes = args.kv_cache_mb << 20;
  opt.ctx_size = args.ctx_size;
  // The prompts run as one batch: the default CPU pool then holds their contexts, not more.
  opt.max_num_seqs = std::max<int64_t>(1, static_cast<int64_t>(prompts.size()));
  apply_kv_cache_args(args.kv, opt);
  apply_weights_arg(args.weights, opt);
  // Open the JSON file before the model loads, so a bad path fails at once.
  std::ofstream json_file;
  const bool json_stdout = args.json == "-";
  if (!args.json.empty() && !json_stdout) {
    json_file.open(args.json);
    KVATTN_CHECK(json_file.good(), "generate: --json: cannot write '", args.json, "'");
  }
  ProgressLine progress(std::filesystem::path(opt.model).filename().string(), args.quiet);
  opt.on_load_progress = [&](double f) { progress(f); };

  const auto t0 = std::chrono::steady_clock::now();
  LLM llm(opt);
  progress.done();
  warn_on_sizing(llm, opt, args.quiet);
  KVATTN_CHECK(llm.tokenizer() != nullptr, "generate: ", opt.model,
               " has no tokenizer (an HF directory without tokenizer.json, or a GGUF without "
               "tokenizer.ggml.*), and generate encodes its prompts with it");
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
  // Encoded here (as LLM::generate would) so --json reports the ids the model saw.
  std::vector<std::vector<int32_t>> prompt_ids;
  for (const auto& p : prompts) prompt_ids.push_back(llm.encode(chat ? llm.chat_prompt(p) : p));

  SamplingParams sampling = checked;
  sampling.skip_special_tokens = !args.special;
  const bool print_text = !json_stdout && sampling.max_tokens > 0;
  const bool stream = print_text && prompt_ids.size() == 1;
  TextOut out;
  PromptTimes times(prompt_ids.size());
  auto outs = llm.generate(prompt_ids, sampling, [&](const TokenEvent& e) {
    times.on_event(e);
    if (stream) out.write(e.text);
  });
  if (stream) out.end_line();
  for (size_t i = 0; print_text && !stream && i < outs.size(); ++i) {
    std::printf("=== [%zu] %s\n", i, prompts[i].c_str());
    out.write(outs[i].text);
    out.end_line();
  }
  const GenerationStats& s = llm.last_stats();
  if (!args.json.empty()) {
    std::ostream& os = json_stdout ? std::cout : json_file;
    for (size_t i = 0; i < outs.size(); ++i) {
      os << prompt_json(i, prompts[i], prompt_ids[i], outs[i], times, s, load_s)
                .dump(-1, ' ', false, Json::error_handler_t::replace)
         << '\n';
    }
    os.flush();
    KVATTN_CHECK(os.good(), "generate: --json: writing '", args.json, "' failed");
  }
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
  print_speed(s);
  return 0;
}

}  // namespace kvattn::cli
