// `kvattn bench --workload`: the request sets the benchmark runs, seeded and reproducible.
//
//   nano-vllm  nano-vllm's bench.py: 256 prompts of 100-1,024 random ids, 100-1,024 output
//              tokens each (the default);
//   prefix     256 requests sharing one 2,000-token system prompt, then 100-1,024 ids of their
//              own, outputs as nano-vllm's: what the prefix cache is for;
//   long       32 requests with 8k-16k-token prompts and 512 new tokens: attention-heavy steps.
//
// Every size can be set by a flag and then scaled (--scale), so the same shapes run small on
// a CPU. Draws come from one std::mt19937(seed): the shared prompt first, then every prompt
// (its length, then its ids), then every output length — nano-vllm's order when there is no
// shared prompt.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kvattn/engine/sampler.h"

namespace kvattn::cli {

enum class WorkloadKind : uint8_t { kNanoVllm, kPrefix, kLong };
std::string_view workload_name(WorkloadKind k);  // "nano-vllm" | "prefix" | "long"
// Throws kvattn::Error naming --workload for anything else.
WorkloadKind parse_workload(std::string_view name);

// The sizes of one workload. A shared prefix of prefix_tokens ids starts every prompt; each
// prompt then has its own [min_input, max_input] ids and generates [min_output, max_output].
struct WorkloadSpec {
  WorkloadKind kind = WorkloadKind::kNanoVllm;
  int64_t num_seqs = 256;
  int64_t prefix_tokens = 0;
  int64_t min_input = 100, max_input = 1024;
  int64_t min_output = 100, max_output = 1024;
  int64_t longest() const { return prefix_tokens + max_input + max_output; }
};

// The sizes for `kind`.
WorkloadSpec default_spec(WorkloadKind kind);

// Every size times `scale` (counts and token lengths, rounded, at least 1; a prefix of 0
// stays 0). Throws unless scale > 0.
WorkloadSpec scaled(WorkloadSpec spec, double scale);

// Throws kvattn::Error naming the flag unless the sizes are usable.
void check_spec(const WorkloadSpec& spec);

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;  // ignore_eos, no detokenization
  int64_t prefix_tokens = 0;           // the shared prompt's length as drawn (after capping)
  int64_t input_tokens = 0, output_tokens = 0;
};

// Random ids in [0, max_id). Each prompt is capped to context - 1 tokens (the shared prefix
// first, so it stays shared) and its output to what the context has left.
// Every request samples at `temperature` with top_k / top_p (0 / 1: off).
Workload make_workload(const WorkloadSpec& spec, uint32_t seed, double temperature,
                       int32_t max_id, int64_t context, int top_k = 0, double top_p = 1.0);

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t max_id, int64_t n);

}  // namespace kvattn::cli
