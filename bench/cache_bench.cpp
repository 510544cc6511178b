// Host cost of the cache layer (DESIGN §3 BlockManager / batch metadata; targets from issue 3):
// - one decode step's host work for 512 running sequences of ~2k tokens (append the sampled
//   token, can_append/append, build the BatchContext, mark_computed): target < 100 us;
// - allocating a 4k-token prompt whose first 3k tokens are cached (75% hit): target < 20 us.
// Workloads are seeded; the argument is the block size (16: vLLM's default, 256: nano-vllm's).
#include <benchmark/benchmark.h>

#include <time.h>

#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"

namespace kvattn {
namespace {

constexpr int kSeqs = 512;

// This thread's CPU time in seconds: unlike wall time, not inflated when the (shared, 2-core)
// machine runs other work, so the counters below report both.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
constexpr int kDecodeSteps = 256;  // fixed: the sequences grow by this many tokens per repetition

struct DecodeFixture {
  std::unique_ptr<BlockManager> manager;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<ScheduledSequence> batch;

  explicit DecodeFixture(int64_t block_size) {
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<int32_t> tok(0, 150000);
    std::uniform_int_distribution<int> len(1536, 2560);
    const int64_t max_len = 2560 + kDecodeSteps * 4;  // room for every repetition's growth
    manager = std::make_unique<BlockManager>(kSeqs * ((max_len + block_size - 1) / block_size + 1),
                                             block_size);
    for (int i = 0; i < kSeqs; ++i) {
      std::vector<int32_t> prompt(static_cast<size_t>(len(rng)));
      for (auto& t : prompt) t = tok(rng);
      seqs.push_back(std::make_unique<Sequence>(i, std::move(prompt)));
      manager->allocate(*seqs.back());
      manager->mark_computed(*seqs.back(), seqs.back()->num_tokens());
      batch.push_back({seqs.back().get(), 1});
    }
    // One untimed step: a prompt's token vector starts at exact capacity, so the first append
    // of all 512 sequences would reallocate at once, which no steady state does.
    append_all(0);
    mark_all();
  }

  // The host work of one decode step: the sampled tokens join, blocks follow, the context is
  // built, and after the (absent) forward the new KV is marked computed.
  void append_all(int32_t token) {
    for (auto& s : seqs) {
      s->append_token(token);
      if (!manager->can_append(*s)) std::abort();
      manager->append(*s);
    }
  }
  void mark_all() {
    for (auto& s : seqs) manager->mark_computed(*s, 1);
  }
};

void BM_DecodeStepHostWork(benchmark::State& state) {
  DecodeFixture f(state.range(0));
  BatchMetadataBuilder builder(*f.manager);
  BatchBuildOptions opt;
  if (state.range(1)) {  // CUDA-graph shape: padded batch, fixed table width
    opt.pad_decode_batch_to = kSeqs + 0;
    opt.block_table_width = (4096 + state.range(0) - 1) / state.range(0);
  }
  int32_t token = 7;
  for (auto _ : state) {
    f.append_all(token++);
    const BatchMetadata& md = builder.build(f.batch, opt);
    benchmark::DoNotOptimize(md.ctx.slot_mapping.data);
    f.mark_all();
  }
  state.counters["seqs"] = kSeqs;
  state.counters["table_width"] = static_cast<double>(builder.last().ctx.block_tables.size(1));
}
BENCHMARK(BM_DecodeStepHostWork)
    ->ArgsProduct({{16, 256}, {0, 1}})
    ->ArgNames({"block_size", "graph"})
    ->Iterations(kDecodeSteps)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

// The same step split in two: blocks (append + mark_computed) and metadata (build) alone.
void BM_DecodeStepMetadataOnly(benchmark::State& state) {
  DecodeFixture f(state.range(0));
  BatchMetadataBuilder builder(*f.manager);
  f.append_all(7);
  for (auto _ : state) {
    const BatchMetadata& md = builder.build(f.batch);
    benchmark::DoNotOptimize(md.ctx.slot_mapping.data);
  }
}
BENCHMARK(BM_DecodeStepMetadataOnly)->Arg(16)->Arg(256)->ArgName("block_size")->Unit(benchmark::kMicrosecond);

void BM_DecodeStepBlocksOnly(benchmark::State& state) {
  DecodeFixture f(state.range(0));
  int32_t token = 7;
  for (auto _ : state) {
    f.append_all(token++);
    f.mark_all();
  }
}
BENCHMARK(BM_DecodeStepBlocksOnly)
    ->Arg(16)->Arg(256)->ArgName("block_size")
    ->Iterations(kDecodeSteps)->Repetitions(5)->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

// can_allocate + allocate of a 4096-token prompt whose first 3072 tokens are cached (computed
// by an earlier request, now freed: the hit blocks come back out of the free list). The
// sequence is built outside the timed region and freed after it; its hashes are not memoized.
void BM_AllocatePrompt75PercentHit(benchmark::State& state) {
  const int64_t bs = state.range(0);
  const bool held = state.range(1) != 0;  // the prefix is still held by a running request
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, 150000);
  std::vector<int32_t> prompt(4096);
  for (auto& t : prompt) t = tok(rng);
  BlockManager manager(4 * 4096 / bs + 64, bs);
  Sequence owner(0, std::vector<int32_t>(prompt.begin(), prompt.begin() + 3072 + 1));
  manager.allocate(owner);
  manager.mark_computed(owner, owner.num_tokens());
  if (!held) manager.free(owner);
  for (int32_t i = 3072; i < 4096; ++i) prompt[i] = tok(rng);  // the new 25%
  int64_t hit = 0;
  SeqId id = 1;
  double cpu = 0;
  for (auto _ : state) {
    Sequence seq(id++, prompt);
    const double c0 = thread_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    if (!manager.can_allocate(seq)) std::abort();
    manager.allocate(seq);
    const auto t1 = std::chrono::steady_clock::now();
    cpu += thread_cpu_seconds() - c0;
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    hit = seq.num_computed_tokens();
    manager.free(seq);
  }
  state.counters["hit_tokens"] = static_cast<double>(hit);
  // Thread CPU time of the timed region (includes two clock reads, ~0.1-0.5 us).
  state.counters["thread_cpu_us"] = 1e6 * cpu / static_cast<double>(state.iterations());
  if (hit != 3072) state.SkipWithError("expected a 3072-token hit");
}
BENCHMARK(BM_AllocatePrompt75PercentHit)
    ->ArgsProduct({{16, 256}, {0, 1}})
    ->ArgNames({"block_size", "prefix_held"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvattn

BENCHMARK_MAIN();
