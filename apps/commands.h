// The `kvattn` subcommands. main.cpp parses the command line with CLI11 and calls these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvattn/engine/sampler.h"

namespace kvattn::cli {

struct GenerateArgs {
  std::string model;  // empty => the default model (see resolve_model_path)
  std::string device = "cpu";
  bool chat = false;     // --chat: force the chat template
  bool no_chat = false;  // --no-chat: raw completion
  std::vector<std::string> prompts;
  SamplingParams sampling;
  int threads = 0;
  std::string weights = "auto";  // CPU weight storage: auto | f32 | f16 | bf16 | q8
  int64_t kv_cache_mb = 0;
  bool quiet = false;  // no loading progress or stats detail on stderr
};

int run_generate(const GenerateArgs& args);
int run_info(const std::string& model, bool all_tensors);

// The model to use: `given` when set; else $KVATTN_MODEL; else the default
// SmolLM2-135M-Instruct GGUF searched in ./models, <exe dir>/../models, <exe dir>/models and
// the source tree's models/. Throws kvattn::Error saying how to fetch it when absent.
std::string resolve_model_path(const std::string& given);

}  // namespace kvattn::cli
