// CUDA store_kv and paged decode benchmark: the TARGETS.md shapes, timed with CUDA events
// (median of many reps after warm-up; working sets under 4x L2 are timed after an L2 flush,
// both a 256 MB memset as triton's do_bench does and a 256 MB read), against a
// device-to-device copy ceiling and an empty kernel's launch floor measured in the same run.
//
// Every decode variant (kernels/cuda/tuning.h: heads per CTA, stages) is timed beside the
// default in the same process, so one run says which is best. Each variant's output is compared with the default's (rel L2 in the
// note) so that a fast wrong variant shows. The environment's KVATTN_DECODE_* knobs set the
// base every variant starts from; a variant changes only the fields it names.
//
// Prints one JSON line per timing: {"op", "shape", "us", "bytes", "TBps", "frac_copy", "note"},
// then a full table and, last, a summary with the default's and the best variant's figures.
// Bytes: store_kv counts K and V read + written plus the slots (as the seed peer does);
// decode counts the cached K and V of every sequence read once.
// fp8 rows (" fp8" in the shape): the same shapes over float8_e4m3 caches of random finite
// codes (bytes counted at 1 per element), timed with the variants that pick the fp8 tile
// ("swap": the swapped fp8 tile, "noswap": the 16-row one) beside the default; `--only fp8`
// times just them and their bf16 twins, side by side.
// `--only small` maps the small kernel against the stream kernel on few-unit batches of long
// sequences (bf16, page 16; kSmallMapVariants).
// `--variants a,b,...` keeps only the named variants (and "default", always first).
//   gpu_decode_bench [--reps N] [--quick] [--warm] [--memset-large] [--store-rounds N]
//                    [--variants NAMES]
//                    [--only store|decode|fp8|small|d64|d64s|d64fp8|d128|single]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/tensor.h"
#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/device_faults.h"
#include "kvattn/kernels/store_kv.h"
#include "kernels/cuda/decode/decode_params.h"
#include "kernels/cuda/tuning.h"
#include "bench_util.cuh"
#include "paged_decode_case.cuh"

namespace {

using kvattn::DType;
using kvattn::Tensor;
using kvattn::TensorView;
const kvattn::Device kGpu = kvattn::Device::cuda(0);

int g_reps = 100;
double g_l2_bytes = 50e6;
// Median time in microseconds of fn() over g_reps reps (bench_util.cuh).
template <typename Fn>
double time_us(Fn&& fn, Flush flush, int warmup = 10) {
  return median_us(fn, flush, g_reps, warmup);
}

// `--warm`: working sets that fit the L2 four times over are also timed without a flush (as
// the peers' graph replay sees them: cuDNN's 1 x 8192 d128 runs from L2 there).
bool g_warm = false;
// `--memset-large`: working sets past four times the L2 are also timed after the memset flush,
// as the peers' harness times its "flushed" column (do_bench zeroes 256 MB before each call:
// the L2's dirty lines are written back while the kernel reads; session 46 saw the uniform
// plan's one-chunk kernel pay twice what the split kernel pays for that on the H200).
bool g_memset_large = false;

// The flush modes a working set of `bytes` is timed under: working sets far larger than L2
// need none.
std::vector<Flush> flushes_for(double bytes) {
  if (bytes > 4.0 * g_l2_bytes) {
    if (g_memset_large) return {Flush::kNone, Flush::kMemset};
    return {Flush::kNone};
  }
  if (g_warm) return {Flush::kMemset, Flush::kRead, Flush::kNone};
  return {Flush::kMemset, Flush::kRead};
}

struct Row {
  std::string op, shape;
  double us, bytes;
  std::string note;
};
std::vector<Row> g_rows;
double g_copy_tbps = 0.0;

void report(const std::string& op, const std::string& shape, double us, double bytes,
            const std::string& note = "") {
  const double tbps = bytes / (us * 1e-6) / 1e12;
  std::printf("{\"op\": \"%s\", \"shape\": \"%s\", \"us\": %.2f, \"bytes\": %.0f, \"TBps\": %.3f, "
              "\"frac_copy\": %.3f, \"note\": \"%s\"}\n",
              op.c_str(), shape.c_str(), us, bytes, tbps, g_copy_tbps > 0 ? tbps / g_copy_tbps : 0.0,
              note.c_str());
  std::fflush(stdout);
  g_rows.push_back({op, shape, us, bytes, note});
}

void check_faults(const std::string& what) {
  const uint32_t f = kvattn::read_device_faults(kGpu);
  if (f != 0) {
    std::fprintf(stderr, "%s: device fault word 0x%x\n", what.c_str(), f);
    std::exit(1);
  }
}

void bench_copy() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&b, bytes));
  BENCH_CUDA(cudaMemset(a, 1, bytes));
  const double us = time_us(
      [&] { BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, Flush::kNone, 3);
  g_copy_tbps = 2.0 * bytes / (us * 1e-6) / 1e12;
  report("ceiling", "d2d copy 2 GiB (read+write)", us, 2.0 * bytes);
  BENCH_CUDA(cudaFree(a));
  BENCH_CUDA(cudaFree(b));
}

__global__ void empty_kernel() {}

// The floor of this timing method: an empty kernel between the two events.
void bench_launch_floor() {
  for (Flush f : {Flush::kMemset, Flush::kRead}) {
    const double us = time_us([] { empty_kernel<<<1, 32>>>(); }, f);
    report("floor", "empty kernel launch", us, 0.0, flush_name(f));
  }
}

using kvattn::cuda::CudaTuning;

// store_kv: T tokens of 8 KV heads x 128 bf16 into random slots of a 1M-slot cache.
// Diagnostic slot patterns (the same bytes, other destinations) separate the cost of the
// scattered 2 KB rows from the kernel's own: kSequential = slots 0..T-1 (one contiguous
// write), kSorted = the benchmark's random slots in ascending order (the writes sweep the
// cache once), kLocal = a random permutation of 0..T-1 (scattered, but within T rows).
enum class SlotPattern { kRandom, kSequential, kSorted, kLocal };
const char* pattern_name(SlotPattern s) {
  switch (s) {
    case SlotPattern::kSequential: return " slots 0..T-1 (diag)";
    case SlotPattern::kSorted: return " 1M slots sorted (diag)";
    case SlotPattern::kLocal: return " perm of 0..T-1 (diag)";
    default: return " 1M slots";
  }
}

int g_store_rounds = 1;

void bench_store_kv(int64_t tokens, int64_t block_size, std::mt19937_64& rng,
                    SlotPattern pattern = SlotPattern::kRandom) {
  const int64_t hkv = 8, d = 128, slots = int64_t{1} << 20;
  const int64_t num_blocks = slots / block_size;
  Tensor key = Tensor::empty({tokens, hkv, d}, DType::kBF16, kGpu);
  Tensor value = Tensor::empty({tokens, hkv, d}, DType::kBF16, kGpu);
  Tensor kc = Tensor::empty({num_blocks, block_size, hkv, d}, DType::kBF16, kGpu);
  Tensor vc = Tensor::empty({num_blocks, block_size, hkv, d}, DType::kBF16, kGpu);
  fill_bf16(key, 1);
  fill_bf16(value, 2);
  std::vector<int32_t> perm(static_cast<size_t>(slots));
  std::iota(perm.begin(), perm.end(), 0);
  const auto used = perm.begin() + tokens;
  if (pattern == SlotPattern::kLocal) std::shuffle(perm.begin(), used, rng);
  if (pattern == SlotPattern::kRandom || pattern == SlotPattern::kSorted) {
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  if (pattern == SlotPattern::kSorted) std::sort(perm.begin(), used);
  Tensor slot = Tensor::empty({tokens}, DType::kI32, kGpu);
  BENCH_CUDA(cudaMemcpy(slot.data(), perm.data(), tokens * 4, cudaMemcpyHostToDevice));
  const double bytes = 4.0 * tokens * hkv * d * 2 + tokens * 4.0;
  const bool diag = pattern != SlotPattern::kRandom;
  const std::string shape = "T=" + std::to_string(tokens) + " Hkv=8 D=128 bf16 page " +
                            std::to_string(block_size) + pattern_name(pattern);
  // The default launch, then the others (cuda_tuning().store_kv_variant) beside it, in
  // g_store_rounds alternating rounds. Large batches are timed back to back and after a
  // memset flush (do_bench's way).
  CudaTuning& tuning = kvattn::cuda::cuda_tuning();
  const CudaTuning saved = tuning;
  struct StoreVariant {
    const char* name;
    int variant;
  };
  const StoreVariant variants[] = {{"store_kv", 0}, {"store_kv cta256", 1}};
  std::vector<Flush> flushes = flushes_for(bytes);
  if (flushes.size() == 1) flushes.push_back(Flush::kMemset);
  for (int round = 0; round < g_store_rounds; ++round) {
    for (const StoreVariant& v : variants) {
      if (diag && v.variant != 0) continue;
      tuning.store_kv_variant = v.variant;
      for (Flush f : flushes) {
        const double us = time_us([&] { kvattn::store_kv(key, value, kc, vc, slot); }, f);
        check_faults("store_kv");
        report(diag ? std::string(v.name) + " (diag)" : v.name, shape, us, bytes, flush_name(f));
      }
    }
  }
  tuning = saved;
}

struct DecodeVariant {
  const char* name;
  int heads;        // heads per CTA
  int stages;       // 0 = default
  int small = 1;    // small-batch kernel allowed
  int small_warps = 0;  // 0: the library's choice
  int no_merge = 0; // diagnostics: stream kernel without its merge (wrong output)
  int max_chunks = 0;  // small kernel: most chunks per unit (0: the library's choice)
  int evict = -1;      // K/V copies evict-first in L2: 1 / 0; -1: the library's default
  int swap = -1;       // the stream kernel's swapped tile (decode_swap_tile.cuh): -1 default
  int hw_cvt = -1;     // fp8: the hardware e4m3 conversion, P V in f16 (-1: the default)
  int q_f16 = -1;      // fp8, bf16 queries: Q in f16, K by the hardware conversion (-1: default)
  int small_chunks = 0;  // the small kernel with exactly this many chunks (0: the library's rule)
  int min_tiles = -1;    // small kernel: chunks unused below this many tiles a warp (0: all;
                         // -1: the library's default)
  int d64_max_mb = -1;   // small kernel at head_dim 64: the bound on the batch's K/V MiB (0:
                         // none, the default; -1: the library's default)
  int min_chunks = 0;    // small kernel: fewest chunks a unit to take a batch (0: the default)
  int one_wave = -1;     // small kernel: one CTA a unit when the units fit a wave (-1: default)
  int lean_issue = -1;   // aligned caches: issue_tile_lean (decode_lean_issue; -1: default)
  int tma = -1;          // the TMA copy issue where eligible (decode_tma; -1: default)
  int tma_prefetch = -1; // ... with the next tile asked of L2 (decode_tma_prefetch; -1: default)
  int cta_sweep = -1;    // split kernel, fp8 d64: the CTA page sweep (decode_cta_sweep; -1: default)
  int waves = 0;         // stream mode's waves of ranges (decode_stream_waves; 0: default)
  int dynamic = -1;      // stream mode's dynamic split (decode_dynamic_split; -1: default)
  int uniform = 0;       // 1: planned with DecodePlan::uniform_lengths where the lengths are
                         // uniform (flash-attn's int cache_seqlens); else as "default"
};
// The default first: the others' outputs are compared with its. "diag" rows are diagnostics
// (not candidates): the split kernel alone, to price the merge launch.
const DecodeVariant kDecodeVariants[] = {
    {.name = "default", .heads = 8, .stages = 0},
    // The copy issue's forms (decode_lean_issue, decode_tma; the default picks by measurement,
    // session 29): by cp.async copies, lean, TMA, TMA with the next tile's L2 prefetch, on the
    // default choice of tile and on each tile.
    {.name = "copy", .heads = 8, .stages = 0, .lean_issue = 0, .tma = 0},
    {.name = "copy swap", .heads = 8, .stages = 0, .swap = 1, .lean_issue = 0, .tma = 0},
    {.name = "lean", .heads = 8, .stages = 0, .lean_issue = 1, .tma = 0},
    {.name = "lean swap", .heads = 8, .stages = 0, .swap = 1, .lean_issue = 1, .tma = 0},
    {.name = "lean noswap", .heads = 8, .stages = 0, .swap = 0, .lean_issue = 1, .tma = 0},
    {.name = "tma", .heads = 8, .stages = 0, .tma = 1},
    {.name = "tma swap", .heads = 8, .stages = 0, .swap = 1, .tma = 1},
    {.name = "tma noswap", .heads = 8, .stages = 0, .swap = 0, .tma = 1},
    {.name = "tma pf", .heads = 8, .stages = 0, .tma = 1, .tma_prefetch = 1},
    {.name = "tma pf swap", .heads = 8, .stages = 0, .swap = 1, .tma = 1, .tma_prefetch = 1},
    // The split kernel's CTA page sweep (fp8 d64; elsewhere the default kernels run), on the
    // default tile and each tile, and with a fourth stage.
    {.name = "cta sweep", .heads = 8, .stages = 0, .cta_sweep = 1},
    {.name = "cta sweep swap", .heads = 8, .stages = 0, .swap = 1, .cta_sweep = 1},
    {.name = "cta sweep noswap", .heads = 8, .stages = 0, .swap = 0, .cta_sweep = 1},
    {.name = "cta sweep s4", .heads = 8, .stages = 4, .cta_sweep = 1},
    // Stream mode in W waves of W times shorter ranges (decode_stream_waves): the hardware's
    // block scheduler balances the SMs; with 4 heads a CTA (two CTAs an SM) one CTA's ramp
    // overlaps the other's streaming.
    {.name = "waves 2", .heads = 8, .stages = 0, .waves = 2},
    {.name = "waves 4", .heads = 8, .stages = 0, .waves = 4},
    {.name = "swap h4 s3 waves 2", .heads = 4, .stages = 3, .swap = 1, .waves = 2},
    {.name = "swap h4 s3 waves 4", .heads = 4, .stages = 3, .swap = 1, .waves = 4},
    // The dynamic split (decode_dynamic_split): CTAs claim the last quarter's ranges as they
    // finish; static for contrast where the default flips.
    {.name = "dynamic", .heads = 8, .stages = 0, .dynamic = 1},
    {.name = "static", .heads = 8, .stages = 0, .dynamic = 0},
    {.name = "swap h4 s3 dynamic", .heads = 4, .stages = 3, .swap = 1, .dynamic = 1},
    // A third stage with the lean and TMA forms (the plain one is "s3" below).
    {.name = "lean s3", .heads = 8, .stages = 3, .lean_issue = 1, .tma = 0},
    {.name = "tma s3", .heads = 8, .stages = 3, .tma = 1},
    {.name = "s2", .heads = 8, .stages = 2},
    {.name = "h4", .heads = 4, .stages = 0},
    {.name = "h4 s2", .heads = 4, .stages = 2},
    {.name = "nosmall", .heads = 8, .stages = 0, .small = 0},
    {.name = "small w4", .heads = 8, .stages = 0, .small_warps = 4},
    {.name = "diag nomerge", .heads = 8, .stages = 0, .small = 0, .no_merge = 1},
    {.name = "small c8", .heads = 8, .stages = 0, .max_chunks = 8},
    // The caller's promise of uniform lengths (DecodePlan::uniform_lengths: one 4-warp CTA a
    // (sequence, KV head), no merge, where decode_uniform_one_chunk says so).
    {.name = "uniform", .heads = 8, .stages = 0, .uniform = 1},
    {.name = "evict-first", .heads = 8, .stages = 0, .evict = 1},
    {.name = "evict-normal", .heads = 8, .stages = 0, .evict = 0},
    {.name = "swap", .heads = 8, .stages = 0, .swap = 1},
    {.name = "noswap", .heads = 8, .stages = 0, .swap = 0},
    {.name = "s3", .heads = 8, .stages = 3},
    {.name = "s4", .heads = 8, .stages = 4},
    {.name = "s6", .heads = 8, .stages = 6},
    {.name = "swap s3", .heads = 8, .stages = 3, .swap = 1},
    {.name = "swap h4", .heads = 4, .stages = 0, .swap = 1},
    {.name = "swap h4 s2", .heads = 4, .stages = 2, .swap = 1},
    // head_dim 256 and the padded 80/96: warps per SM (heads per CTA x stages); "swap h4 s2"
    // is d256's default before session 10, "s3" d80/96's.
    {.name = "swap h4 s3", .heads = 4, .stages = 3, .swap = 1},
    {.name = "swap h2", .heads = 2, .stages = 0, .swap = 1},
    {.name = "swap h2 s3", .heads = 2, .stages = 3, .swap = 1},
    {.name = "swap h1", .heads = 1, .stages = 0, .swap = 1},
    {.name = "swap h2 s2", .heads = 2, .stages = 2, .swap = 1},
    {.name = "swap h1 s2", .heads = 1, .stages = 2, .swap = 1},
    // The small kernel for every batch (decode_small_chunks): one CTA per (sequence, KV head)
    // and C chunks of its keys; C = 1 needs no merge (session 3: 8x32768 at 103% of copy
    // with C = 4 and 4 warps).
    {.name = "small c1", .heads = 8, .stages = 0, .small_chunks = 1},
    {.name = "small c1 w4", .heads = 8, .stages = 0, .small_warps = 4, .small_chunks = 1},
    {.name = "small c2", .heads = 8, .stages = 0, .small_chunks = 2},
    {.name = "small c2 w4", .heads = 8, .stages = 0, .small_warps = 4, .small_chunks = 2},
    // Short sequences use fewer of the small kernel's chunks (decode_small_min_tiles; mt0:
    // every chunk, the form before session 16).
    {.name = "small mt0", .heads = 8, .stages = 0, .min_tiles = 0},
    {.name = "small mt1", .heads = 8, .stages = 0, .min_tiles = 1},
    {.name = "small mt2", .heads = 8, .stages = 0, .min_tiles = 2},
    {.name = "small mt4", .heads = 8, .stages = 0, .min_tiles = 4},
    // The default once more, last: is the first timing of a shape off?
    {.name = "default again", .heads = 8, .stages = 0},
};

// The variants timed on fp8 rows: the default first, the two tiles, and the swapped tile's
// stage and heads-per-CTA neighbours (decode_config: 3 stages at d128 and d64), the swapped
// tile with small mode off (the stream kernel where small mode would take the batch), and the
// default again last.
// `--only small` (g_small_map): where the small kernel should give way to the stream kernel on
// few-unit batches of long sequences (docs/notes/decode-next.md, session 20's planner leads):
// the default, the stream kernel, and the small kernel at fixed chunk counts with 8 and 4 warps.
bool g_small_map = false;
// `--variants`: the names kept (empty: all), comma-separated.
std::string g_variant_filter;

bool variant_kept(const char* name) {
  if (g_variant_filter.empty() || std::strcmp(name, "default") == 0) return true;
  const std::string list = "," + g_variant_filter + ",";
  return list.find("," + std::string(name) + ",") != std::string::npos;
}
const DecodeVariant kSmallMapVariants[] = {
    {.name = "default", .heads = 8, .stages = 0},
    {.name = "nosmall", .heads = 8, .stages = 0, .small = 0},
    {.name = "small c1", .heads = 8, .stages = 0, .small_chunks = 1},
    {.name = "small c2", .heads = 8, .stages = 0, .small_chunks = 2},
    {.name = "small c4", .heads = 8, .stages = 0, .small_chunks = 4},
    {.name = "small c8", .heads = 8, .stages = 0, .small_chunks = 8},
    {.name = "small c2 w4", .heads = 8, .stages = 0, .small_warps = 4, .small_chunks = 2},
    {.name = "small c4 w4", .heads = 8, .stages = 0, .small_warps = 4, .small_chunks = 4},
    {.name = "small c8 w4", .heads = 8, .stages = 0, .small_warps = 4, .small_chunks = 8},
    {.name = "small w4", .heads = 8, .stages = 0, .small_warps = 4},
    {.name = "small d64 bound", .heads = 8, .stages = 0, .d64_max_mb = 64},
    {.name = "small min1", .heads = 8, .stages = 0, .min_chunks = 1},
    {.name = "small min2", .heads = 8, .stages = 0, .min_chunks = 2},
    {.name = "small min1 mt4", .heads = 8, .stages = 0, .min_tiles = 4, .min_chunks = 1},
    {.name = "small one wave", .heads = 8, .stages = 0, .one_wave = 1},
    {.name = "small no one wave", .heads = 8, .stages = 0, .one_wave = 0},
    {.name = "default again", .heads = 8, .stages = 0},
};

std::vector<DecodeVariant> all_variants_for(bool fp8) {
  std::vector<DecodeVariant> out;
  if (g_small_map) return {std::begin(kSmallMapVariants), std::end(kSmallMapVariants)};
  if (!fp8) {
    for (const DecodeVariant& v : kDecodeVariants) out.push_back(v);
    return out;
  }
  static const char* const kNames[] = {"default", "lean",    "lean swap", "lean noswap",
                                       "tma",     "tma swap", "tma noswap", "tma pf", "tma pf swap",
                                       "noswap",  "swap",    "swap s2",   "swap s3",
                                       "swap s4", "swap s6", "swap h4",   "nosmall", "s3",
                                       "cta sweep", "cta sweep swap",
                                       "cta sweep noswap", "cta sweep s4", "dynamic", "static"};
  for (const char* n : kNames) {
    for (const DecodeVariant& v : kDecodeVariants) {
      if (std::strcmp(v.name, n) == 0) out.push_back(v);
    }
  }
  out.push_back({.name = "swap s5", .heads = 8, .stages = 5, .swap = 1});
  out.push_back({.name = "swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1});
  // the integer e4m3 conversion (decode_fp8_hw_cvt 0; the default is the hardware one) on the
  // default choice and on each tile
  out.push_back({.name = "int", .heads = 8, .stages = 0, .hw_cvt = 0});
  out.push_back({.name = "int noswap", .heads = 8, .stages = 0, .swap = 0, .hw_cvt = 0});
  out.push_back({.name = "int nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1, .hw_cvt = 0});
  // Q kept in bf16, K by the integer conversion (decode_fp8_q_f16 0; the default rewrites Q in
  // f16 so that K takes the hardware conversion too)
  out.push_back({.name = "noqf16", .heads = 8, .stages = 0, .q_f16 = 0});
  out.push_back({.name = "noqf16 noswap", .heads = 8, .stages = 0, .swap = 0, .q_f16 = 0});
  out.push_back({.name = "default again", .heads = 8, .stages = 0});
  return out;
}

std::vector<DecodeVariant> variants_for(bool fp8) {
  std::vector<DecodeVariant> out;
  for (const DecodeVariant& v : all_variants_for(fp8)) {
    // The dynamic split's rows only where it is compiled in (else they would time the static
    // split under its name).
    if (v.dynamic == 1 && !kvattn::cuda::kDecodeDynamicSplitBuilt) continue;
    if (variant_kept(v.name)) out.push_back(v);
  }
  return out;
}

// Random finite e4m3 codes (no NaN: exponent field <= 0b0110, both signs), |x| < 1.
__global__ void fill_random_e4m3(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = static_cast<uint8_t>(x & 0xb7u);
  }
}

std::vector<float> to_floats(const Tensor& t) {
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  BENCH_CUDA(cudaMemcpy(bits.data(), t.data(), bits.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t w = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&f[i], &w, 4);
  }
  return f;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : 1e30;
}

// Decode: one query per sequence, GQA, bf16, head_dim d, random non-identity block tables.
// fp8: over float8_e4m3 caches of the same shape (scales 1), with the fp8 variants only.
void bench_decode(const std::string& name, const std::vector<int64_t>& lens, int64_t hq,
                  int64_t hkv, int64_t block_size, std::mt19937_64& rng,
                  int64_t d = PagedDecodeCase::kHeadDim, bool fp8 = false,
                  int64_t min_table_keys = 0) {
  const int64_t B = static_cast<int64_t>(lens.size());
  const PagedDecodeCase pc =
      make_paged_decode_case(lens, hq, hkv, block_size, rng, d, min_table_keys);
  Tensor k8, v8;
  if (fp8) {
    const std::vector<int64_t> cshape = {pc.k_cache.size(0), pc.k_cache.size(1),
                                         pc.k_cache.size(2), pc.k_cache.size(3)};
    k8 = Tensor::empty(cshape, DType::kF8E4M3, kGpu);
    v8 = Tensor::empty(cshape, DType::kF8E4M3, kGpu);
    fill_random_e4m3<<<1024, 256>>>(static_cast<uint8_t*>(k8.data()), k8.numel(), 13);
    fill_random_e4m3<<<1024, 256>>>(static_cast<uint8_t*>(v8.data()), v8.numel(), 14);
    BENCH_CUDA(cudaGetLastError());
  }
  const double bytes = fp8 ? pc.kv_bytes / 2 : pc.kv_bytes;
  const std::string shape = name + " " + std::to_string(hq) + "/" + std::to_string(hkv) +
                            (d == PagedDecodeCase::kHeadDim ? "" : " d" + std::to_string(d)) +
                            " page " + std::to_string(block_size) + (fp8 ? " fp8" : "") +
                            (min_table_keys > 0 ? " table " + std::to_string(pc.width * block_size)
                                                : "");

  CudaTuning& tuning = kvattn::cuda::cuda_tuning();
  const CudaTuning saved = tuning;
  // One workspace for every variant (as an engine reuses one), sized for the largest plan, so
  // that no variant's timing depends on where its own allocation landed.
  // A variant changes only the fields where it departs from the library's defaults; the
  // others keep what the environment set (KVATTN_DECODE_*), so an env run compares as asked.
  // (Until session 20 every variant wrote every field: an env stage count did nothing.)
  const CudaTuning lib{};
  auto use = [&](const DecodeVariant& v) {
    tuning = saved;
    auto set = [](int& field, int value, int library_default) {
      if (value != library_default) field = value;
    };
    set(tuning.decode_heads_per_cta, v.heads, lib.decode_heads_per_cta);
    set(tuning.decode_stages, v.stages, lib.decode_stages);
    set(tuning.decode_small, v.small, lib.decode_small);
    set(tuning.decode_small_warps, v.small_warps, lib.decode_small_warps);
    set(tuning.decode_debug_no_merge, v.no_merge, lib.decode_debug_no_merge);
    set(tuning.decode_small_max_chunks, v.max_chunks, lib.decode_small_max_chunks);
    if (v.evict >= 0) tuning.decode_kv_evict_first = v.evict;
    set(tuning.decode_swap, v.swap, lib.decode_swap);
    if (v.hw_cvt >= 0) tuning.decode_fp8_hw_cvt = v.hw_cvt;
    if (v.q_f16 >= 0) tuning.decode_fp8_q_f16 = v.q_f16;
    set(tuning.decode_small_chunks, v.small_chunks, lib.decode_small_chunks);
    if (v.min_tiles >= 0) tuning.decode_small_min_tiles = v.min_tiles;
    if (v.d64_max_mb >= 0) tuning.decode_small_d64_max_mb = v.d64_max_mb;
    if (v.min_chunks > 0) tuning.decode_small_min_chunks = v.min_chunks;
    if (v.one_wave >= 0) tuning.decode_small_one_wave = v.one_wave;
    if (v.lean_issue >= 0) tuning.decode_lean_issue = v.lean_issue;
    if (v.tma >= 0) tuning.decode_tma = v.tma;
    if (v.tma_prefetch >= 0) tuning.decode_tma_prefetch = v.tma_prefetch;
    if (v.cta_sweep >= 0) tuning.decode_cta_sweep = v.cta_sweep;
    if (v.waves > 0) tuning.decode_stream_waves = v.waves;
    if (v.dynamic >= 0) tuning.decode_dynamic_split = v.dynamic;
  };
  const bool lens_uniform = std::all_of(lens.begin(), lens.end(),
                                        [&](int64_t n) { return n == lens.front(); });
  auto plan = [&](const DecodeVariant& v) {
    if (v.uniform != 0 && lens_uniform && min_table_keys == 0) {
      return kvattn::plan_decode(B, hq, hkv, d, 1, lens.front(), kGpu, true);
    }
    return kvattn::plan_decode(B, hq, hkv, d, 1, pc.width * block_size, kGpu);
  };
  const std::vector<DecodeVariant> variants = variants_for(fp8);
  int64_t ws_bytes = 16;
  for (const DecodeVariant& v : variants) {
    use(v);
    ws_bytes = std::max<int64_t>(ws_bytes, plan(v).workspace_bytes);
  }
  const Tensor ws = Tensor::empty({ws_bytes}, DType::kU8, kGpu);
  std::vector<float> ref;
  for (const DecodeVariant& v : variants) {
    use(v);
    const bool diag = std::strncmp(v.name, "diag", 4) == 0;
    try {
      kvattn::DecodeArgs a = pc.args();
      if (fp8) {
        a.k_cache = k8;
        a.v_cache = v8;
      }
      a.plan = plan(v);
      if (a.plan.workspace_bytes > 0) a.workspace = ws;
      BENCH_CUDA(cudaMemset(pc.out.data(), 0xFF, static_cast<size_t>(pc.out.nbytes())));
      kvattn::decode_attention(a);
      BENCH_CUDA(cudaDeviceSynchronize());
      check_faults("decode " + name);
      const std::vector<float> got = to_floats(pc.out);
      if (ref.empty()) ref = got;
      const double err = rel_l2(got, ref);
      char note[160];
      for (Flush f : flushes_for(bytes)) {
        const double us = time_us([&] { kvattn::decode_attention(a); }, f);
        check_faults("decode " + name);
        std::snprintf(note, sizeof(note), "splits %d, rel_l2 vs default %.1e, %s", a.plan.num_splits,
                      err, flush_name(f));
        report(diag ? std::string(v.name) : std::string("decode ") + v.name, shape, us, bytes, note);
      }
    } catch (const std::exception& e) {
      std::printf("{\"op\": \"decode %s\", \"shape\": \"%s\", \"error\": \"%s\"}\n", v.name,
                  shape.c_str(), e.what());
      std::fflush(stdout);
    }
  }
  tuning = saved;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--warm")) g_warm = true;
    if (!std::strcmp(argv[i], "--memset-large")) g_memset_large = true;
    if (!std::strcmp(argv[i], "--store-rounds") && i + 1 < argc) {
      g_store_rounds = std::atoi(argv[++i]);
    }
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    if (!std::strcmp(argv[i], "--variants") && i + 1 < argc) g_variant_filter = argv[++i];
  }
  if (!kvattn::cuda_available()) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, L2 %d MB, reps %d (median)\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, g_reps);
  g_l2_bytes = prop.l2CacheSize;
  init_l2_flush();
  std::mt19937_64 rng(2026);

  bench_copy();
  bench_launch_floor();
  if (only.empty() || only == "store") {
    for (int64_t page : {256, 16}) {
      for (int64_t t : {256, 4096, 65536}) bench_store_kv(t, page, rng);
      if (!quick) {
        for (SlotPattern sp :
             {SlotPattern::kSequential, SlotPattern::kSorted, SlotPattern::kLocal}) {
          bench_store_kv(65536, page, rng, sp);
        }
      }
      if (quick) break;
    }
  }
  // fp8 caches (issue 16: >= 1.7x the bf16 decode), page 16; with `--only fp8` each beside its
  // bf16 twin (the decode run times the twins below).
  if (only.empty() || only == "decode" || only == "fp8") {
    const bool twins = only == "fp8";
    struct Fp8Shape {
      const char* name;
      int64_t batch, len, hq, hkv, d;
    };
    const Fp8Shape fp8_shapes[] = {{"64x4096", 64, 4096, 32, 8, 128},
                                   {"96x4096", 96, 4096, 9, 3, 64},
                                   {"256x1024", 256, 1024, 16, 8, 128},
                                   {"8x32768", 8, 32768, 32, 8, 128},
                                   {"1x8192", 1, 8192, 32, 8, 128},
                                   {"4x8192", 4, 8192, 32, 8, 128},
                                   {"1x8192", 1, 8192, 9, 3, 64},
                                   {"256x1024", 256, 1024, 8, 8, 64},
                                   {"64x4096", 64, 4096, 32, 8, 64},
                                   {"8x32768", 8, 32768, 9, 3, 64},
                                   {"64x4096", 64, 4096, 16, 8, 256},
                                   {"16x8192", 16, 8192, 16, 8, 256}};
    for (const Fp8Shape& f : fp8_shapes) {
      const std::vector<int64_t> lens(static_cast<size_t>(f.batch), f.len);
      if (twins) bench_decode(f.name, lens, f.hq, f.hkv, 16, rng, f.d);
      // head_dim 256 over fp8: the form written in session 30 (CudaTuning::fp8_extended_forms,
      // off by default until the GPU suite has run it), on for its rows.
      const int saved = kvattn::cuda::cuda_tuning().fp8_extended_forms;
      if (f.d == 256) kvattn::cuda::cuda_tuning().fp8_extended_forms = 1;
      bench_decode(f.name, lens, f.hq, f.hkv, 16, rng, f.d, true);
      kvattn::cuda::cuda_tuning().fp8_extended_forms = saved;
    }
  }
  if (only == "small") {
    g_small_map = true;
    // table > 0: a table of that many keys over shorter lengths, planned with its width as an
    // engine's graphs plan (short contexts where the d64 bound and the one-wave rule matter).
    struct MapShape {
      int64_t batch, len, hq, hkv, d, table = 0;
    };
    const MapShape map_shapes[] = {
        {2, 32768, 9, 3, 64},   {4, 32768, 9, 3, 64},   {8, 32768, 9, 3, 64},
        {16, 16384, 9, 3, 64},  {8, 16384, 9, 3, 64},   {32, 8192, 9, 3, 64},
        {4, 32768, 8, 8, 64},   {8, 32768, 8, 8, 64},   {2, 32768, 32, 8, 128},
        {4, 32768, 32, 8, 128}, {8, 32768, 32, 8, 128}, {16, 16384, 32, 8, 128},
        {8, 32768, 16, 8, 128}, {4, 8192, 32, 8, 128},  {16, 8192, 9, 3, 64},
        // 133-264 units at d128: one wave at one chunk takes 4-warp CTAs (decode_small_one_wave)
        {32, 8192, 32, 8, 128}, {24, 16384, 16, 8, 128}, {20, 4096, 32, 8, 128},
        {8, 512, 9, 3, 64, 8192},    {16, 512, 9, 3, 64, 8192},    {32, 300, 9, 3, 64, 8192},
        {64, 1000, 9, 3, 64, 8192},  {16, 2048, 9, 3, 64, 8192},   {16, 600, 8, 8, 64, 8192},
        {16, 512, 16, 8, 128, 8192}, {64, 300, 16, 8, 128, 8192}, {32, 1000, 16, 8, 128, 8192}};
    for (const MapShape& m : map_shapes) {
      const std::string name = std::to_string(m.batch) + "x" + std::to_string(m.len);
      bench_decode(name, std::vector<int64_t>(static_cast<size_t>(m.batch), m.len), m.hq, m.hkv,
                   16, rng, m.d, false, m.table);
    }
  }
  // `--only engine`: decode batches as nano-vllm's workload gives the engine (Qwen3-0.6B's
  // heads, 16/8 d128, page 16; lengths drawn from [100, 2048]), each planned with its longest
  // length (an eager step) and with the table width of the engine's graphs (ctx 40960): the
  // engine's decode attention read 2.64 TB/s there against 2.89 for uniform shapes (H100,
  // session 33); does the graphs' plan cost it?
  if (only == "engine") {
    for (int64_t batch : {64, 148, 256}) {
      std::uniform_int_distribution<int64_t> len(100, 2048);
      std::vector<int64_t> lens(static_cast<size_t>(batch));
      for (auto& l : lens) l = len(rng);
      const std::string name = std::to_string(batch) + "x[100,2048]";
      for (bool fp8 : {false, true}) {
        bench_decode(name, lens, 16, 8, 16, rng, 128, fp8);
        bench_decode(name, lens, 16, 8, 16, rng, 128, fp8, 40960);
      }
    }
  }
  // `--only short`: a single stream's short contexts (SmolLM2's 9/3 d64, Qwen3-0.6B's 16/8
  // d128) planned with the engine graphs' table width (SmolLM2's ctx 8192) and with their own
  // length, over the small-kernel variants: the attention is the largest kernel of SmolLM2's
  // single-stream token (8.65 us a layer under ncu, session 33).
  if (only == "short") {
    g_small_map = true;
    for (int64_t len : {128, 256, 384}) {
      const std::vector<int64_t> lens(1, len);
      const std::string name = "1x" + std::to_string(len);
      bench_decode(name, lens, 9, 3, 16, rng, 64, false, 8192);
      bench_decode(name, lens, 9, 3, 16, rng, 64);
      bench_decode(name, lens, 16, 8, 16, rng, 128, false, 8192);
    }
  }
  // `--only d64`: SmolLM2's head shape alone (96 x 4096, 9/3, d64, page 16), for a profiler
  // run of one kernel (the 16-row tile by default, the swapped one with KVATTN_DECODE_SWAP=1);
  // `--only d64s`: both head_dim 64 acceptance shapes (also 256 x 1024, 8/8), for variant maps.
  if (only == "d64" || only == "d64s") {
    bench_decode("96x4096", std::vector<int64_t>(96, 4096), 9, 3, 16, rng, 64);
  }
  if (only == "d64s") {
    bench_decode("256x1024", std::vector<int64_t>(256, 1024), 8, 8, 16, rng, 64);
  }
  // `--only d64fp8`: the head_dim 64 shapes over an fp8 cache, SmolLM2's first (a profiler's
  // first launch; 1.11x its bf16 on the H200 against 1.45x on the H100: session 39).
  if (only == "d64fp8") {
    bench_decode("96x4096", std::vector<int64_t>(96, 4096), 9, 3, 16, rng, 64, true);
    bench_decode("256x1024", std::vector<int64_t>(256, 1024), 8, 8, 16, rng, 64, true);
  }
  // `--only d128` / `--only single`: one shape each for a profiler run, the uniform d128 shape
  // (issue 16: 0.94-0.97 of cuDNN) and the lone 8192-key sequence (the small-batch kernel).
  if (only == "d128") {
    bench_decode("64x4096", std::vector<int64_t>(64, 4096), 32, 8, 16, rng);
  }
  if (only == "single") {
    bench_decode("1x8192", std::vector<int64_t>(1, 8192), 32, 8, 16, rng);
  }
  if (only.empty() || only == "decode") {
    for (int64_t page : {16, 256}) {
      bench_decode("64x4096", std::vector<int64_t>(64, 4096), 32, 8, page, rng);
      bench_decode("8x32768", std::vector<int64_t>(8, 32768), 32, 8, page, rng);
      bench_decode("256x1024", std::vector<int64_t>(256, 1024), 16, 8, page, rng);
      bench_decode("96x4096", std::vector<int64_t>(96, 4096), 9, 3, page, rng, 64);
      bench_decode("256x1024", std::vector<int64_t>(256, 1024), 8, 8, page, rng, 64);
      bench_decode("1x8192", std::vector<int64_t>(1, 8192), 9, 3, page, rng, 64);
      bench_decode("8x32768", std::vector<int64_t>(8, 32768), 9, 3, page, rng, 64);
      bench_decode("64x4096", std::vector<int64_t>(64, 4096), 16, 8, page, rng, 256);
      bench_decode("16x8192", std::vector<int64_t>(16, 8192), 16, 8, page, rng, 256);
      bench_decode("64x4096", std::vector<int64_t>(64, 4096), 32, 8, page, rng, 96);
      bench_decode("64x4096", std::vector<int64_t>(64, 4096), 32, 8, page, rng, 80);
      std::vector<int64_t> skew(4, 16384);
      skew.resize(64, 512);
      bench_decode("skewed 4x16384+60x512", skew, 32, 8, page, rng);
      bench_decode("1x8192", std::vector<int64_t>(1, 8192), 32, 8, page, rng);
      // Fixed cost vs length for a lone sequence, and a few sequences (small-batch kernel).
      bench_decode("1x2048", std::vector<int64_t>(1, 2048), 32, 8, page, rng);
      // A single stream's short context (Qwen3-0.6B's heads; SmolLM2's) in a table of 4096
      // keys, planned with the table's width as an engine's graph is.
      bench_decode("1x130", std::vector<int64_t>(1, 130), 16, 8, page, rng, 128, false, 4096);
      bench_decode("1x130", std::vector<int64_t>(1, 130), 9, 3, page, rng, 64, false, 4096);
      bench_decode("1x600", std::vector<int64_t>(1, 600), 16, 8, page, rng, 128, false, 4096);
      bench_decode("1x32768", std::vector<int64_t>(1, 32768), 32, 8, page, rng);
      bench_decode("4x8192", std::vector<int64_t>(4, 8192), 32, 8, page, rng);
      if (quick) break;
    }
  }

  std::printf("\n%-22s %-44s %9s %7s %7s %s\n", "op", "shape", "us", "TB/s", "of copy", "note");
  for (const Row& r : g_rows) {
    const double tbps = r.bytes / (r.us * 1e-6) / 1e12;
    std::printf("%-22s %-44s %9.2f %7.3f %6.1f%% %s\n", r.op.c_str(), r.shape.c_str(), r.us, tbps,
                100.0 * tbps / g_copy_tbps, r.note.c_str());
  }
  // Summary: per (shape, flush), the default variant and the fastest one.
  std::printf("\nSUMMARY (copy %.3f TB/s): shape | flush | default us (TB/s, of copy) | best variant us\n",
              g_copy_tbps);
  for (size_t i = 0; i < g_rows.size(); ++i) {
    const Row& r = g_rows[i];
    const bool is_default = r.op == "store_kv" || r.op == "decode default";
    if (!is_default) continue;
    const std::string family = r.op.substr(0, r.op.find(' '));
    const std::string flush = r.note.substr(r.note.rfind(',') == std::string::npos ? 0 : r.note.rfind(',') + 2);
    const Row* best = &r;
    for (const Row& o : g_rows) {
      const std::string oflush = o.note.substr(o.note.rfind(',') == std::string::npos ? 0 : o.note.rfind(',') + 2);
      if (o.shape == r.shape && o.op.rfind(family, 0) == 0 && oflush == flush && o.us < best->us) best = &o;
    }
    const double tbps = r.bytes / (r.us * 1e-6) / 1e12;
    std::printf("%-44s | %-16s | %8.2f (%5.3f, %5.1f%%) | %-18s %8.2f (%5.3f)\n", r.shape.c_str(),
                flush.c_str(), r.us, tbps, 100 * tbps / g_copy_tbps, best->op.c_str(), best->us,
                best->bytes / (best->us * 1e-6) / 1e12);
  }
  return 0;
}
