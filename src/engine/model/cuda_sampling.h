// Internal: token sampling on the GPU, one CTA per logit row (several for small batches). Only the int32 ids leave the
// device. Same filters, in the same order, as the host Sampler (sampler.h): temperature,
// top-k, softmax, top-p, min-p, renormalise, draw.
//
// Greedy (temperature < kGreedyTemperature or top_k == 1): argmax of the bf16 logits with the
// host argmax()'s rules exactly (NaN below every number, equal values => the lowest id), so it
// equals argmax() over the float32 copy of the same row that forward() returns.
//
// Sampled rows, with p_i = exp((l_i - max l) / T) (the max has p = 1, as on the host):
// - top-k keeps the k largest logits; at the boundary, equal logits go to the lowest ids
//   (the host's nth_element order), so exactly k tokens survive. Found by an exact radix
//   select on the 64-bit key (logit order, ~id): a few histogram passes over the row.
// - top-p keeps the shortest prefix of the survivors in (p desc, id asc) order whose mass
//   reaches top_p * (their total mass), as the host does. The masses are summed in 40-bit
//   fixed point (p * 2^40, integer atomics), so the boundary is deterministic run to run; it
//   can differ from the host's double sum only when the cumulative mass at a boundary token
//   is within ~1e-9 relative of the target.
// - min-p keeps p >= min_p (relative to p_max = 1), as on the host.
// - the draw is an exponential race: the survivor with the largest p_i / E_i wins, E_i =
//   -log(U_i), which picks i with probability p_i / sum(p). U_i comes from Philox4x32-10
//   keyed by the seed, with the counter (i / 4, step, stream): a draw depends on (logits,
//   filters, seed, stream, step) only, never on the batch. U has 23 random bits (on a
//   half-integer grid in (0, 1)), so the race's distribution is exact up to ~1e-7.
// NaN logits are never drawn; a row whose maximum is not finite (all NaN / -inf, or +inf
// present) falls back to the greedy choice.
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/cuda_launch.h"
#include "kvattn/engine/model.h"

namespace kvattn::cuda_model {

enum SampleMode : int32_t { kSampleSkip = 0, kSampleGreedy = 1, kSampleRandom = 2 };

// One row's parameters as the kernel reads them.
struct SampleParams {
  int32_t mode = kSampleSkip;  // kSampleSkip: the row is not sampled (padding, forward())
  int32_t top_k = 0;           // <= 0 or >= vocab => off
  float inv_temperature = 1.0f;
  float top_p = 1.0f;          // >= 1 => off
  float min_p = 0.0f;          // <= 0 => off
  uint32_t reserved = 0;
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t step = 0;
};
static_assert(sizeof(SampleParams) == 48, "SampleParams is shared with the device");

// Checks one RowSampling (finite temperature, top_p in (0, 1], min_p in [0, 1]; throws
// kvattn::Error naming the row) and converts it.
SampleParams make_sample_params(const RowSampling& r, size_t row_index);

// Small batches split each row over several CTAs (cuda_sampling.cu, "split form"): at most
// kSampleSplitCtas CTAs a launch, slices of >= kSampleMinSliceGroups groups of 4 logits, at
// most kSampleMaxSlices a row. The answer is the same bits whatever the split.
inline constexpr int64_t kSampleSplitCtas = 256;
inline constexpr int64_t kSampleMinSliceGroups = 1024;
inline constexpr int64_t kSampleMaxSlices = 64;
// Device scratch the split form needs (two 16-byte partials per CTA).
inline constexpr int64_t kSampleScratchBytes = 2 * kSampleSplitCtas * 16;
// Slices per row for `rows` rows of `vocab` logits (1: one CTA per row).
int sample_slices(int64_t rows, int64_t vocab);
// A split row with top-k / top-p runs its radix selects in one thread block cluster of this
// many CTAs (sm_90+; each sweeps an eighth of the row per pass, rank 0 sums the histograms
// through distributed shared memory) instead of slice 0 alone. On by default since session 13
// (H200: top-k 50 + top-p 0.9 at one row 782 -> 163 us, tokens bit-identical; single stream
// with those filters 602 -> 835 tok/s); KVATTN_SAMPLE_CLUSTERS=0 turns it off
// (sample_select_clusters_default()).
inline constexpr int kSampleSelectCluster = 8;
bool sample_select_clusters_default();

// tokens[r] = the draw for row r (rows with mode kSampleSkip are left untouched). logits:
// bf16, row r at logits + r * ld (ld == 0: every row reads the same logits). scratch:
// kSampleScratchBytes of device memory for the split form, or null (one CTA per row);
// max_slices caps the split and select_clusters (1 on, 0 off, -1 the default) picks the
// selects' form (tests compare the forms). No host sync, no allocation: graph-capturable.
void sample_rows(const void* logits, int64_t ld, int64_t rows, int64_t vocab,
                 const SampleParams* params, int32_t* tokens, void* scratch, Launch on,
                 int max_slices = static_cast<int>(kSampleMaxSlices), int select_clusters = -1);

// For tests: samples rows.size() rows of `logits` (float32, rounded to bf16 on the way to
// the device), which holds either one row shared by every draw or rows.size() rows of
// `vocab`, with at most max_slices slices a row (1: one CTA per row) and select_clusters as
// sample_rows. Allocates and synchronizes.
std::vector<int32_t> sample_on_device(int device, std::span<const float> logits, int64_t vocab,
                                      std::span<const RowSampling> rows,
                                      int max_slices = static_cast<int>(kSampleMaxSlices),
                                      int select_clusters = -1);

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
