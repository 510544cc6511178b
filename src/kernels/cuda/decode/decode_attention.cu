// Paged decode attention on the GPU: split-KV flash-decoding with tensor cores.
//
// Decode reads every cached K and V byte once and does ~2 FLOPs per byte, so it is bound by
// memory bandwidth. The kernel (decode_params.h has the work decomposition) keeps HBM busy:
// - a CTA holds up to 8 KV heads, one warp each (the GQA group x q_len tokens as the 16 rows
//   of one mma tile, so each KV byte is read once); the warps walk the same keys, so every
//   token's K/V row of the CTA's heads (contiguous in the cache) is read at once;
// - each warp runs its own 16-byte cp.async pipeline of 16-key K+V tiles (3 stages at head_dim
//   128, ~192 KB per CTA of 8 warps): no CTA-wide barrier in the loop; block-table entries are
//   loaded two tiles ahead; keys past the end or behind a bad block id are zero-filled;
// - QK^T and PV are mma.sync m16n8k16 (bf16/fp16 in, fp32 accumulate) on ldmatrix fragments of
//   an XOR-swizzled tile (conflict-free); online softmax in the log2 domain, P in registers;
// - stream-K: the CTAs cut the concatenated tiles of the whole batch into equal ranges, so long
//   and short sequences alike spread over every SM; a merge kernel combines the pieces of the
//   sequences a range boundary cut;
// - small batches (few sequences x KV heads; decode_params.h "small mode") take a second kernel
//   instead: one KV head per CTA, its warps split a chunk of one sequence's keys and combine
//   on chip; the last chunk's CTA merges the others' pieces, which it polls as tagged LL words
//   (no fence, no flag, no merge kernel); its K/V copies are marked evict-first in L2 (read
//   once). On the H200 it streams 8 x 32768 at 4.25-4.3 TB/s (the stream kernel: 3.99) and a
//   lone 8192-key sequence in 19.2-20.1 us after do_bench's memset flush (17.2-17.8 with a
//   clean L2; docs/perf/NOTES.md, session 4).
// No host sync and no allocation: capturable in a CUDA graph given the plan and workspace.
// Issue 18's window_size, softcap and alibi_slopes run the same kernels' extended form
// (template flag kExt, decode_mask.cuh): a sequence's tiles are counted and visited from its
// window's first tile on (the stream prefix sum, whole sequences, small mode's chunks), so a
// 4096-key window over 32k reads 4096 keys; only tiles at a window edge run the mask. The
// plain instantiations compile to the same PTX as before the flag (names aside).
//
// Files (src/kernels/cuda/decode/): decode_params.h (parameters, work decomposition),
// decode_common.cuh (building blocks, tile layout), decode_fp8.cuh (the fp8 tile, both forms),
// decode_warp_tile.cuh (one warp's tile: copy and attend), decode_swap_tile.cuh (the swapped
// tile: S^T = K Q^T for units of 8 rows; 16-bit and fp8), decode_mask.cuh (window, softcap,
// ALiBi), decode_split_kernel.cuh,
// decode_small_kernel.cuh, decode_merge_kernel.cuh; decode_launch.cuh (occupancy, the choice of
// kernel, the launch), compiled once per family in decode_inst_*.cu; decode_host.h (what the
// entry and those files share); this file: the host side (configuration, dispatch) and the entry.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <random>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode/decode_host.h"
#include "kernels/cuda/decode/decode_page.h"
#include "kernels/cuda/decode/decode_params.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/tuning.h"

namespace kvattn::cuda {
namespace decode_host {

namespace {
std::atomic<int64_t> tma_launch_count{0};
std::atomic<int64_t> cta_sweep_launch_count{0};
std::atomic<int64_t> dynamic_launch_count{0};
std::atomic<int64_t> tma_refusal_count{0};
std::atomic<int> tma_last_refusal{0};
}  // namespace

int64_t tma_launches() { return tma_launch_count.load(std::memory_order_relaxed); }
void count_tma_launch() { tma_launch_count.fetch_add(1, std::memory_order_relaxed); }
int64_t cta_sweep_launches() { return cta_sweep_launch_count.load(std::memory_order_relaxed); }
void count_cta_sweep_launch() {
  cta_sweep_launch_count.fetch_add(1, std::memory_order_relaxed);
}
int64_t dynamic_launches() { return dynamic_launch_count.load(std::memory_order_relaxed); }
void count_dynamic_launch() { dynamic_launch_count.fetch_add(1, std::memory_order_relaxed); }
int64_t tma_refusals() { return tma_refusal_count.load(std::memory_order_relaxed); }
int last_tma_refusal() { return tma_last_refusal.load(std::memory_order_relaxed); }
void note_tma_refusal(int cu_result) {
  tma_last_refusal.store(cu_result, std::memory_order_relaxed);
  tma_refusal_count.fetch_add(1, std::memory_order_relaxed);
}
bool tma_built() {
#if defined(KVATTN_SM90A)
  return true;
#else
  return false;
#endif
}

void check_device_index(int device) {
  KVATTN_CHECK(device >= 0 && device < kMaxDevices, "decode_attention: device must be in [0, ",
               kMaxDevices, ") but is ", device);
}

int max_optin_smem(int device) {
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  check_device_index(device);
  int n = cache[device].load(std::memory_order_relaxed);
  if (n == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

int prefix_bytes_for(int64_t num_seqs, int claim_ints) {
  return static_cast<int>(((num_seqs + 1 + kDecodeMaxWarps + claim_ints) * 4 + 127) / 128 * 128);
}

int split_smem(const DecodeConfig& c, int prefix_bytes) {
  return prefix_bytes + c.warps * c.stages * c.stage_bytes;
}

SmallConfig small_config(int64_t num_kv_heads, int64_t rows, int64_t head_dim, int kv_bytes,
                         int warps) {
  const DecodeConfig c = decode_config(num_kv_heads, rows, head_dim, kv_bytes);
  SmallConfig s;
  s.warps = std::clamp(warps, 1, kDecodeMaxWarps);
  // The stream kernel's stages, as many as fit for this CTA's warps (a knob may ask for more).
  // (8 KB of the opt-in limit stay for the kernel's static shared memory: the query tile.)
  s.stages = std::clamp(std::min(c.stages, ((227 << 10) - 8192) / (s.warps * c.stage_bytes)), 2,
                        kDecodeMaxStages);
  const int tiles = s.warps * s.stages * c.stage_bytes;
  // The warps' states, then the merger's own piece (float32 rows and LSEs).
  const int combine = s.warps * (kDecodeRows * static_cast<int>(head_dim + 4) + 2 * kDecodeRows) * 4 +
                      kDecodeRows * static_cast<int>(head_dim + 1) * 4;
  s.smem = std::max(tiles, combine);
  return s;
}

}  // namespace decode_host

namespace {

// The one dispatch point: q dtype x cache dtype x head_dim. Supported: bf16, fp16 queries over
// caches of their own dtype or float8_e4m3 (KV = uint8_t), head_dim 64, 128 and 256 (256: the
// swapped tile of the stream kernel only, no small-batch kernel); head_dim 80 and 96 on the
// 128 tiles (decode_tile_dim; stream kernel; fp8 caches where fp8_extended_forms allows).
template <typename Fn>
void dispatch(DType dtype, DType cache_dtype, int64_t head_dim, Fn&& fn) {
  KVATTN_CHECK(dtype == DType::kBF16 || dtype == DType::kF16,
               "decode_attention: unsupported dtype on CUDA: ", dtype, " (bfloat16, float16)");
  KVATTN_CHECK(cache_dtype == dtype || cache_dtype == DType::kF8E4M3,
               "decode_attention: unsupported cache dtype on CUDA: ", cache_dtype, " (", dtype,
               " or float8_e4m3)");
  const bool bf16 = dtype == DType::kBF16;
  const bool fp8 = cache_dtype == DType::kF8E4M3;
  auto with_d = [&]<int D>() {
    if (bf16) {
      fp8 ? fn.template operator()<__nv_bfloat16, uint8_t, D>()
          : fn.template operator()<__nv_bfloat16, __nv_bfloat16, D>();
    } else {
      fp8 ? fn.template operator()<__half, uint8_t, D>() : fn.template operator()<__half, __half, D>();
    }
  };
  switch (head_dim) {
    case 80:
    case 96:
      with_d.template operator()<128>();
      return;
    case 64: with_d.template operator()<64>(); return;
    case 128: with_d.template operator()<128>(); return;
    case 256: with_d.template operator()<256>(); return;
    default:
      KVATTN_FAIL("decode_attention: unsupported head_dim: ", head_dim,
                  " (the CUDA kernel supports 64, 80, 96, 128 and 256)");
  }
}

// Small mode's chunks per (sequence, unit) and warps per CTA; chunks 0: use the stream kernel.
// Worth it only when the batch's units are few for the GPU (4+ chunks each). Warps: 8 when
// that gives 4+ chunks, else 4 (2 CTAs per SM, twice the chunks): measured on the H200
// (docs/perf/NOTES.md, round 3), 8 warps for 1-4 x 8192 (4 warps: 33 chunks of 1-2 tiles
// per warp, +25%), 4 warps for 8 x 32768 (C = 4: 4.35 TB/s vs the stream kernel's 3.99).
// cuda_tuning().decode_small_warps > 0 forces one count; decode_small_max_chunks caps C.
// 16-bit caches at head_dim 64, where asked (cuda_tuning().decode_small_d64_max_mb; off by
// default, tuning.h says why): the small kernel only while the batch's K and V (at its longest
// length, the plan's bound) stay within that many MiB. There the small kernel streams at ~3.0
// TB/s past its fixed cost, the stream kernel at ~4.4 with ~8 us more of fixed cost (split +
// merge): H200, session 21 (docs/perf/NOTES.md, `gpu_decode_bench --only small`, read flush),
// 9/3 d64 small / stream: 2x32768 (50 MB) 27.7 / 29.9 us, 4x32768 (101 MB) 41.2 / 39.2,
// 8x32768 74.5 / 62.1, 16x16384 74.7 / 62.8, 16x8192 43.5 / 40.3; 8/8 d64 4x32768 (268 MB)
// 89.6 / 76.8, 8x32768 167.4 / 136.1: the two lines cross near 78 MB. At head_dim 128 the
// small kernel wins up to 8x32768 32/8 (537 MB: 244.5 / 254.5), so no bound there.
}  // namespace

namespace decode_host {

SmallChoice small_choice(int device, int64_t num_seqs, int64_t num_kv_heads, int64_t rows,
                         int64_t head_dim, DType cache_dtype, int64_t max_keys, bool uniform) {
  const CudaTuning& tuning = cuda_tuning();
  if (!tuning.decode_small || num_seqs <= 0 || num_seqs >= (int64_t{1} << 16)) return {};
  if (head_dim != 64 && head_dim != 128) return {};  // 80, 96, 256: the stream kernel only
  const int64_t units = num_kv_heads * ((rows + kDecodeRows - 1) / kDecodeRows);
  const int forced = tuning.decode_small_warps;
  if (tuning.decode_small_chunks > 0) {  // forced chunk count (tuning.h)
    return {std::min(tuning.decode_small_chunks, kSmallMaxChunks), forced > 0 ? forced : 8};
  }
  if (head_dim == 64 && cache_dtype != DType::kF8E4M3 && tuning.decode_small_d64_max_mb > 0 &&
      num_seqs * num_kv_heads * std::max<int64_t>(max_keys, 0) * 64 * 2 * 2 >
          (int64_t{tuning.decode_small_d64_max_mb} << 20)) {
    return {};
  }
  // Chunks a unit that fill the SMs at each warp count tried: 8, then 4 (or the forced count).
  const int tries[2] = {forced > 0 ? forced : 8, forced > 0 ? 0 : 4};
  int64_t chunks_at[2] = {0, 0};
  int64_t slots_at[2] = {0, 0};  // resident CTAs of that warp count on the device
  for (int i = 0; i < 2 && tries[i] > 0; ++i) {
    const SmallConfig sc =
        small_config(num_kv_heads, rows, head_dim, kv_bytes_of(cache_dtype), tries[i]);
    int ctas = 0;
    dispatch(DType::kBF16, cache_dtype == DType::kF8E4M3 ? cache_dtype : DType::kBF16, head_dim,
             [&]<typename T, typename KV, int D>() {
               if constexpr (D != 256) {
                 ctas = DecodeKernels<T, KV, D>::small_ctas(device, sc.warps * 32, sc.smem);
               }
             });
    slots_at[i] = int64_t{sm_count(device)} * ctas;
    chunks_at[i] = slots_at[i] / (num_seqs * units);
    if (tuning.decode_small_max_chunks > 0) {
      chunks_at[i] = std::min<int64_t>(chunks_at[i], tuning.decode_small_max_chunks);
    }
  }
  // The first warp count that gives at least `least` chunks.
  auto first_with = [&](int64_t least) -> SmallChoice {
    for (int i = 0; i < 2 && tries[i] > 0; ++i) {
      if (chunks_at[i] >= least) {
        return {static_cast<int>(std::min<int64_t>(chunks_at[i], kSmallMaxChunks)),
                std::clamp(tries[i], 1, kDecodeMaxWarps)};
      }
    }
    return {};
  };
  SmallChoice choice = first_with(tuning.decode_small_min_chunks);
  // One wave (decode_small_one_wave): units that fit the SMs at one chunk take one CTA each,
  // no merge, at head_dim 128 over 16-bit caches (tuning.h has the measurements).
  if (choice.chunks == 0 && tuning.decode_small_one_wave != 0 && head_dim == 128 &&
      cache_dtype != DType::kF8E4M3) {
    choice = first_with(1);
  }
  // Uniform lengths (decode_uniform_one_chunk): one 4-warp CTA a unit, no merge, where the
  // units fill a wave of them (chunks_at[1] == 0: not even one chunk each fits at once).
  // (tries[1] is 4 whenever no warp count is forced.)
  if (choice.chunks == 0 && uniform && tuning.decode_uniform_one_chunk != 0 && forced <= 0 &&
      head_dim == 128 && cache_dtype != DType::kF8E4M3 && chunks_at[1] == 0 &&
      decode_uniform_one_chunk(num_seqs, units, slots_at[1], max_keys)) {
    choice = {1, 4};
  }
  return choice;
}

// Never 0, the cleared tag, and never all ones: a zeroed or 0xFF-poisoned workspace word is
// never mistaken for this launch's.
uint32_t next_epoch() {
  static std::atomic<uint32_t> counter{[] {
    std::random_device rd;
    return static_cast<uint32_t>(rd());
  }()};
  for (;;) {
    const uint32_t e = counter.fetch_add(1, std::memory_order_relaxed) * 2654435761u;
    if (e != 0u && e != 0xffffffffu) return e;
  }
}

bool stream_ok(int64_t num_seqs, int64_t capacity) {
  return num_seqs <= kDecodeMaxStreamSeqs &&
         num_seqs * ((capacity + kDecodeTileKeys - 1) / kDecodeTileKeys) < (int64_t{1} << 31);
}

int stream_waves() {
  const CudaTuning& t = cuda_tuning();
  return std::clamp(t.decode_stream_waves, 1, 8);
}

bool dynamic_split() {
  const CudaTuning& t = cuda_tuning();
  return kDecodeDynamicSplitBuilt && t.decode_dynamic_split != 0;
}

int stream_ranges_per_cta() { return dynamic_split() ? 1 + kDynamicTiers : stream_waves(); }

}  // namespace decode_host

using namespace decode_host;  // NOLINT(google-build-using-namespace): this file defines them

namespace {

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

// Warps an SM holds of CTAs of `warps` warps and `cta_bytes` of dynamic shared memory (228 KB
// an SM, 1 KB of it reserved per CTA); registers and the thread limit are not the bound here.
int resident_warps(int warps, int cta_bytes) {
  constexpr int kSmemPerSm = 228 << 10;
  constexpr int kReservedPerCta = 1 << 10;
  return kSmemPerSm / (cta_bytes + kReservedPerCta) * warps;
}

}  // namespace

DecodeConfig decode_config(int64_t num_kv_heads, int64_t rows, int64_t head_dim, int kv_bytes,
                           int unit_rows, bool padded) {
  const CudaTuning& tuning = cuda_tuning();
  DecodeConfig c;
  c.stage_bytes = 2 * kDecodeTileKeys * decode_tile_pitch(static_cast<int>(head_dim), kv_bytes);
  // Tiles fit next to the largest prefix sum; a CTA holds as many warps as 2 stages each fit
  // (8, or 6 at head_dim 256).
  // (With the dynamic split's claims: they must never push a CTA past the opt-in limit.)
  const int prefix = prefix_bytes_for(kDecodeMaxStreamSeqs, kDecodeClaimRingInts);
  const int budget = (227 << 10) - prefix;
  const int max_warps = std::clamp(budget / (2 * c.stage_bytes), 1, kDecodeMaxWarps);
  const int64_t rc = (rows + unit_rows - 1) / unit_rows;
  const int64_t hc_max = std::clamp(tuning.decode_heads_per_cta, 1, max_warps);
  // Tiles whose warps are bound by their own issue rate rather than by the bytes in flight
  // (head_dim 256; 80 and 96 padded to 128) want the most warps on an SM: 2 stages, and the
  // heads per CTA that leave the most of them busy. H200, session 10 (docs/perf/NOTES.md):
  // 64 x 4096 16/8 d256 649 -> 514 us at 2 heads per CTA (6 warps an SM instead of 4);
  // d80 245 -> 202 and d96 246 -> 228 us at 4 heads of 2 stages (12 warps instead of 8).
  const bool warp_bound = head_dim == 256 || padded;
  const int stages_wanted = tuning.decode_stages > 0 ? tuning.decode_stages : warp_bound ? 2 : 0;
  // Heads per CTA among those rc row chunks fit: all of them, in equal blocks (8 KV heads at
  // most 6 per CTA: 4 + 4, not 6 + 2; H200, session 9: 64 x 4096 16/8 d256 646.9 vs 726.2
  // us); for a warp-bound tile, unless the tuning caps the heads per CTA, the count with the
  // most busy warps an SM (resident warps times the share of a block's warps that have a
  // head), ties to the larger.
  auto balanced = [&](int64_t most) {
    const int64_t h = std::min<int64_t>(num_kv_heads, std::max<int64_t>(1, most));
    const int64_t blocks = (num_kv_heads + h - 1) / h;
    return static_cast<int>((num_kv_heads + blocks - 1) / blocks);
  };
  if (rc <= max_warps) {
    c.rc_per_cta = static_cast<int>(rc);
    c.rc_blocks = 1;
    c.heads_per_cta = balanced(hc_max / rc);
    if (warp_bound && tuning.decode_heads_per_cta >= kDecodeMaxWarps) {
      double best = -1.0;
      for (int64_t most = hc_max / rc; most >= 1; --most) {
        const int h = balanced(most);
        const int warps = h * c.rc_per_cta;
        const int64_t blocks = (num_kv_heads + h - 1) / h;
        const double busy = resident_warps(warps, prefix + warps * stages_wanted * c.stage_bytes) *
                            static_cast<double>(num_kv_heads) / static_cast<double>(blocks * h);
        if (busy > best) {
          best = busy;
          c.heads_per_cta = h;
        }
      }
    }
  } else {
    c.rc_per_cta = max_warps;
    c.rc_blocks = static_cast<int>((rc + max_warps - 1) / max_warps);
    c.heads_per_cta = 1;
  }
  c.head_blocks = static_cast<int>((num_kv_heads + c.heads_per_cta - 1) / c.heads_per_cta);
  c.warps = c.heads_per_cta * c.rc_per_cta;
  // Default: ~192 KB of cached bytes in flight for a CTA of 8 warps (3 stages for head_dim
  // 128; fp8: 6 and 8 for 128 and 64), whatever the cache dtype; never more than fits. 16-bit
  // head_dim 64: decode_d64_stages on the 16-row tile (3 by default; tuning.h), 2 on the
  // swapped one: there more resident CTAs beat deeper pipelines (H200, session 9: 96 x 4096
  // 9/3 87.7 vs 107.0 us at 6 stages, 256 x 1024 8/8 139.3 vs 184.0; docs/perf/NOTES.md), and
  // the swapped tile's registers (80) hold three 8-warp CTAs an SM, which only 2 stages allow.
  // Warp-bound tiles 2 (above).
  const int bytes_rule =
      (192 << 10) / (kDecodeMaxWarps * 2 * kDecodeTileKeys * static_cast<int>(head_dim) * kv_bytes);
  // fp8 on the swapped tile (kv_bytes 1, units of kDecodeSwapRows): half the stages of the
  // 16-row fp8 tile (3 at head_dim 128, 4 at 64), so that two CTAs of 8 warps share an SM: the
  // swapped tile's registers allow it (the 16-row fp8 tile's ~220 leave one CTA), and the SM
  // keeps the bytes in flight of the 16-row tile's one CTA with twice the warps (decode is
  // bound by warps per SM there: docs/perf/NOTES.md, session 10). At head_dim 64, 3 (the
  // halving gave 4): more CTAs an SM; H200, session 20, 96 x 4096 9/3 fp8 77.4 / 67.9-68.4 us
  // (memset / read flush) against 85.7-86.4 / 77.4-78.0 with 4 (docs/perf/NOTES.md, session
  // 20 calls 1, 4, 6, 7).
  const bool fp8_swap = kv_bytes == 1 && unit_rows == kDecodeSwapRows;
  const int fp8_swap_stages =
      head_dim == 64 ? 3 : std::max(2, std::min(bytes_rule, kDecodeMaxStages) / 2);
  const int stages = stages_wanted > 0                   ? stages_wanted
                     : fp8_swap                          ? fp8_swap_stages
                     : head_dim == 64 && kv_bytes == 2
                         ? (unit_rows == kDecodeSwapRows ? 2 : tuning.decode_d64_stages)
                                                       : bytes_rule;
  const int fit = budget / (c.warps * c.stage_bytes);
  c.stages = std::clamp(std::min(stages, fit), 2, kDecodeMaxStages);
  return c;
}

int decode_parts(int device, const DecodeConfig& c, int64_t head_dim, int64_t num_seqs,
                 bool fp8_swap) {
  const int smem = split_smem(c, prefix_bytes_for(num_seqs));
  int ctas = 0;
  if (fp8_swap) {
    KVATTN_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "decode_parts: the fp8 "
                 "swapped tile runs head_dim 64, 128 and 256, not ", head_dim);
    dispatch(DType::kBF16, DType::kF8E4M3, head_dim, [&]<typename T, typename KV, int D>() {
      ctas = DecodeKernels<T, KV, D>::stream_ctas(device, c.warps * 32, smem, true);
    });
  } else {
    dispatch(DType::kBF16, DType::kBF16, head_dim, [&]<typename T, typename KV, int D>() {
      ctas = DecodeKernels<T, KV, D>::stream_ctas(device, c.warps * 32, smem, D == 256);
    });
  }
  return static_cast<int>(std::max<int64_t>(1, int64_t{sm_count(device)} * ctas /
                                                   (c.head_blocks * c.rc_blocks))) *
         stream_ranges_per_cta();
}

bool decode_stream_ok(int64_t num_seqs, int64_t capacity) { return stream_ok(num_seqs, capacity); }

int decode_small_chunks(int device, int64_t num_seqs, int64_t num_kv_heads, int64_t rows,
                        int64_t head_dim, int64_t max_keys, bool uniform) {
  return small_choice(device, num_seqs, num_kv_heads, rows, head_dim, DType::kBF16, max_keys,
                      uniform)
      .chunks;
}

void decode_attention(const DecodeArgs& args, const AttentionShape& shape) {
  if (shape.num_seqs == 0) return;
  constexpr std::string_view fn = "decode_attention";
  // 16-byte copies need 16-byte aligned rows; other layouts take a slower register-staged path.
  const int64_t es = dtype_size(args.q.dtype);
  const int64_t kv_es = dtype_size(args.k_cache.dtype);
  const bool aligned = aligned16(args.k_cache.data) && aligned16(args.v_cache.data) &&
                       (args.k_cache.stride(0) * kv_es) % 16 == 0 &&
                       (args.v_cache.stride(0) * kv_es) % 16 == 0;
  const int64_t capacity = shape.max_blocks_per_seq * shape.block_size;
  KVATTN_CHECK(capacity < (int64_t{1} << 30) && shape.num_blocks < (int64_t{1} << 31) &&
                   shape.num_seqs < (int64_t{1} << 30),
               fn, ": sizes past the CUDA kernel's 32-bit indexing (capacity ", capacity,
               ", num_blocks ", shape.num_blocks, ")");
  // fp8 at head_dim 256 (the swapped tile over fp8 codes; session 30, on by default since
  // session 31) and at 80 / 96 (the padded 128 tiles; session 32, on by default since session
  // 33): refused where CudaTuning::fp8_extended_forms / fp8_padded_decode turn them off
  // (tuning.h).
  if (args.k_cache.dtype == DType::kF8E4M3) {
    const bool padded = shape.head_dim == 80 || shape.head_dim == 96;
    KVATTN_CHECK((shape.head_dim != 256 && !padded) || cuda_tuning().fp8_extended_forms != 0,
                 fn, ": head_dim ", shape.head_dim, " over a float8_e4m3 cache is turned off "
                 "(KVATTN_FP8_EXTENDED_FORMS=0)");
    KVATTN_CHECK(!padded || cuda_tuning().fp8_padded_decode != 0, fn, ": head_dim ",
                 shape.head_dim, " over a float8_e4m3 cache is turned off "
                 "(KVATTN_FP8_PADDED_DECODE=0)");
  }

  DecodeParams p;
  p.q = args.q.data;
  p.out = args.out.data;
  p.lse = args.lse.defined() ? static_cast<float*>(args.lse.data) : nullptr;
  p.k_cache = args.k_cache.data;
  p.v_cache = args.v_cache.data;
  p.k_scale = args.k_scale.defined() ? args.k_scale.ptr<const float>() : nullptr;
  p.v_scale = args.v_scale.defined() ? args.v_scale.ptr<const float>() : nullptr;
  p.block_table = args.block_table.ptr<const int32_t>();
  p.cache_seqlens = args.cache_seqlens.ptr<const int32_t>();
  p.q_stride = args.q.stride(0);
  p.out_stride = args.out.stride(0);
  p.k_block_stride = args.k_cache.stride(0);
  p.v_block_stride = args.v_cache.stride(0);
  p.bt_stride = args.block_table.stride(0);
  p.lse_head_stride = p.lse != nullptr ? args.lse.stride(0) : 0;
  p.num_seqs = static_cast<int>(shape.num_seqs);
  p.num_heads = static_cast<int>(shape.num_heads);
  p.num_kv_heads = static_cast<int>(shape.num_kv_heads);
  p.head_dim = static_cast<int>(shape.head_dim);
  p.group = static_cast<int>(shape.num_heads / shape.num_kv_heads);
  p.q_len = static_cast<int>(args.q_len);
  p.rows = p.group * p.q_len;
  p.row_chunks = (p.rows + kDecodeRows - 1) / kDecodeRows;
  p.block_size = static_cast<int>(shape.block_size);
  p.block_shift = decode_block_shift(shape.block_size);
  p.num_blocks = static_cast<int>(shape.num_blocks);
  p.capacity = static_cast<int>(capacity);
  p.len_hint = static_cast<int>(
      args.plan.max_seqlen_k > 0 ? std::min(args.plan.max_seqlen_k, capacity) : capacity);
  p.num_splits = args.plan.num_splits;
  p.uniform_lengths = args.plan.uniform_lengths ? 1 : 0;
  p.scale_log2 = shape.scale * 1.4426950408889634f;
  p.causal = args.causal ? 1 : 0;
  p.out_aligned4 = (reinterpret_cast<uintptr_t>(args.out.data) & 3u) == 0 && p.out_stride % 2 == 0;
  p.q_aligned16 = aligned16(args.q.data) && (p.q_stride * es) % 16 == 0;
  p.kv_evict_first = decode_kv_evict_first(
      cuda_tuning().decode_kv_evict_first, shape.num_seqs, p.len_hint, shape.num_kv_heads,
      shape.head_dim, kv_es, l2_cache_bytes(args.q.device.index));
  p.lean_issue = cuda_tuning().decode_lean_issue;
  p.tma = cuda_tuning().decode_tma;
  p.tma_prefetch = cuda_tuning().decode_tma_prefetch;
  p.fp8_hw_cvt = cuda_tuning().decode_fp8_hw_cvt;
  p.fp8_q_f16 = cuda_tuning().decode_fp8_q_f16;
  p.pdl_trigger = cuda_tuning().decode_pdl_trigger;
  int64_t ws_bytes = 0;
  if (p.num_splits > 1) {
    const int64_t need = decode_workspace_bytes(shape.num_seqs, shape.num_heads,
                                                decode_tile_dim(shape.head_dim),
                                                args.q_len, p.num_splits);
    ws_bytes = args.workspace.defined() ? args.workspace.nbytes() : 0;
    KVATTN_CHECK(args.workspace.defined() && ws_bytes >= need, fn, ": a plan of ", p.num_splits,
                 " splits needs a workspace of ", need, " bytes but got ", ws_bytes);
    KVATTN_CHECK(aligned16(args.workspace.data), fn, ": workspace must be 16-byte aligned");
    p.ws_o = static_cast<float*>(args.workspace.data);
  }

  // Window, softcap, ALiBi: the extended kernels. A bound that cuts no key becomes -1 here,
  // which also keeps the kernels' int arithmetic in range: left >= capacity (row i's first
  // visible key is max(0, i + Lk - Lq - left), and i + Lk - Lq < capacity), right >= q_len - 1
  // (row i's last is min(Lk - 1, i + Lk - Lq + right) = Lk - 1 once right >= q_len - 1 - i).
  // A causal call's right bound 0 alone is the plain kernels' causal mask.
  const bool ext = shape.window_left >= 0 || (!args.causal && shape.window_right >= 0) ||
                   shape.softcap > 0.0f || args.alibi_slopes.defined() ||
                   args.cache_leftpad.defined();
  if (ext) {
    if (args.cache_leftpad.defined()) p.cache_leftpad = args.cache_leftpad.ptr<const int32_t>();
    p.window_left = shape.window_left >= 0 && shape.window_left < capacity
                        ? static_cast<int>(shape.window_left) : -1;
    p.window_right = shape.window_right >= 0 && shape.window_right < args.q_len - 1
                         ? static_cast<int>(shape.window_right) : -1;
    if (shape.softcap > 0.0f) {
      p.softcap_in = 2.0f / shape.softcap;
      p.softcap_out = shape.softcap * 1.4426950408889634f;
    }
    if (args.alibi_slopes.defined()) {
      p.alibi_slopes = args.alibi_slopes.ptr<const float>();
      p.alibi_seq_stride = args.alibi_slopes.ndim == 2 ? args.alibi_slopes.stride(0) : 0;
    }
  }

  const int device = args.q.device.index;
  DeviceGuard guard(device);
  p.fault_word = fault_word_ptr(device);
  auto stream = static_cast<cudaStream_t>(args.stream.handle);
  const bool pdl = args.pdl && compute_capability(device) >= 90;  // DecodeArgs::pdl
  dispatch(args.q.dtype, args.k_cache.dtype, shape.head_dim, [&]<typename T, typename KV, int D>() {
    DecodeKernels<T, KV, D>::launch(p, ext, aligned, ws_bytes, device, stream, pdl);
  });
}

}  // namespace kvattn::cuda
