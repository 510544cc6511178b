#include "bench_workload.h"

#include <algorithm>
#include <cmath>

#include "kvattn/core/error.h"

namespace kvattn::cli {

std::string_view workload_name(WorkloadKind k) {
  switch (k) {
    case WorkloadKind::kNanoVllm: return "nano-vllm";
    case WorkloadKind::kPrefix: return "prefix";
    case WorkloadKind::kLong: return "long";
  }
  return "?";
}

WorkloadKind parse_workload(std::string_view name) {
  for (WorkloadKind k : {WorkloadKind::kNanoVllm, WorkloadKind::kPrefix, WorkloadKind::kLong}) {
    if (name == workload_name(k)) return k;
  }
  KVATTN_FAIL("--workload must be nano-vllm, prefix or long but is '", name, "'");
}

WorkloadSpec default_spec(WorkloadKind kind) {
  WorkloadSpec s;
  s.kind = kind;
  if (kind == WorkloadKind::kPrefix) s.prefix_tokens = 2000;
  if (kind == WorkloadKind::kLong) {
    s.num_seqs = 32;
    s.min_input = 8192;
    s.max_input = 16384;
    s.min_output = s.max_output = 512;
  }
  return s;
}

WorkloadSpec scaled(WorkloadSpec s, double scale) {
  KVATTN_CHECK(scale > 0 && std::isfinite(scale), "--scale must be > 0 but is ", scale);
  const auto times = [scale](int64_t n) {
    return std::max<int64_t>(1, std::llround(static_cast<double>(n) * scale));
  };
  s.num_seqs = times(s.num_seqs);
  if (s.prefix_tokens > 0) s.prefix_tokens = times(s.prefix_tokens);
  s.min_input = times(s.min_input);
  s.max_input = times(s.max_input);
  s.min_output = times(s.min_output);
  s.max_output = times(s.max_output);
  return s;
}

void check_spec(const WorkloadSpec& a) {
  KVATTN_CHECK(a.num_seqs >= 1, "bench: --num-seqs must be >= 1 but is ", a.num_seqs);
  KVATTN_CHECK(a.prefix_tokens >= 0, "bench: --prefix-len must be >= 0 but is ", a.prefix_tokens);
  KVATTN_CHECK(a.min_input >= 1 && a.min_input <= a.max_input,
               "bench: input lengths need 1 <= --min-input <= --max-input but are ",
               a.min_input, " and ", a.max_input);
  KVATTN_CHECK(a.min_output >= 1 && a.min_output <= a.max_output,
               "bench: output lengths need 1 <= --min-output <= --max-output but are ",
               a.min_output, " and ", a.max_output);
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t max_id, int64_t n) {
  std::uniform_int_distribution<int32_t> id(0, max_id - 1);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = id(rng);
  return p;
}

Workload make_workload(const WorkloadSpec& spec, uint32_t seed, double temperature,
                       int32_t max_id, int64_t context, int top_k, double top_p) {
  check_spec(spec);
  KVATTN_CHECK(context >= 2, "bench: the context must hold at least 2 tokens but holds ", context);
  Workload w;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, max_id - 1);
  // The shared prompt leaves room for one token of each prompt's own and one output token.
  w.prefix_tokens = std::min(spec.prefix_tokens, context - 2);
  const std::vector<int32_t> prefix = random_prompt(rng, max_id, w.prefix_tokens);
  for (int64_t i = 0; i < spec.num_seqs; ++i) {
    int64_t n = std::uniform_int_distribution<int64_t>(spec.min_input, spec.max_input)(rng);
    n = std::min(n, context - 1 - w.prefix_tokens);
    std::vector<int32_t> p = prefix;
    p.reserve(prefix.size() + static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) p.push_back(id(rng));
    w.input_tokens += static_cast<int64_t>(p.size());
    w.prompts.push_back(std::move(p));
  }
  for (int64_t i = 0; i < spec.num_seqs; ++i) {
    SamplingParams sp;
    sp.temperature = static_cast<float>(temperature);
    sp.top_k = top_k;
    sp.top_p = static_cast<float>(top_p);
    sp.ignore_eos = true;
    sp.detokenize = false;
    const int64_t out = std::uniform_int_distribution<int64_t>(spec.min_output, spec.max_output)(rng);
    sp.max_tokens = static_cast<int>(
        std::min<int64_t>(out, context - static_cast<int64_t>(w.prompts[i].size())));
    w.output_tokens += sp.max_tokens;
    w.params.push_back(sp);
  }
  return w;
}

}  // namespace kvattn::cli
