// The launch of the CUDA paged-decode kernels of one (query dtype, cache dtype, head_dim):
// occupancy, the choice between the small, stream and whole-sequence forms, the merge. Included
// only by the instantiation files (decode_inst_*.cu), each of which compiles one family's
// kernels (the kernels live in anonymous namespaces: one copy per translation unit, so each
// family must be instantiated in exactly one file). decode_attention.cu has the entry.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode/decode_host.h"
#include "kernels/cuda/decode/decode_merge_kernel.cuh"
#include "kernels/cuda/decode/decode_params.h"
#include "kernels/cuda/decode/decode_small_kernel.cuh"
#include "kernels/cuda/decode/decode_split_kernel.cuh"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/hopper/tensor_map.h"
#include "kernels/cuda/pdl_launch.h"
#include "kernels/cuda/tuning.h"

namespace kvattn::cuda {
namespace {

// CTAs per SM of the split kernel (kSmall: the small-batch kernel; kExt: their extended form)
// at (threads, smem); raises its shared-memory limit once per device. Cached: the planner and
// every launch ask.
template <typename T, typename KV, int D, bool kAligned16, bool kSmall = false, bool kExt = false,
          bool kSwap = false, CopyIssue kIssue = CopyIssue::kByCopy>
int split_occupancy(int device, int threads, int smem) {
  struct Entry {
    int device, threads, smem, ctas;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  static std::array<bool, decode_host::kMaxDevices> raised{};
  decode_host::check_device_index(device);
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache) {
    if (e.device == device && e.threads == threads && e.smem == smem) return e.ctas;
  }
  DeviceGuard guard(device);
  const auto kernel = [] {
    if constexpr (kSmall) {
      return decode_small_kernel<T, KV, D, kAligned16, kExt, kIssue>;
    } else {
      return decode_kernel<T, KV, D, kAligned16, kExt, kSwap, kIssue>;
    }
  }();
  if (!raised[device]) {  // dynamic + static shared memory must stay within the opt-in limit
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        decode_host::max_optin_smem(device) - static_cast<int>(attr.sharedSizeBytes)));
    raised[device] = true;
  }
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
  KVATTN_CHECK(n > 0, "decode_attention: a CTA of ", threads, " threads and ", smem,
               " bytes of shared memory does not fit on an SM");
  cache.push_back(Entry{device, threads, smem, n});
  return n;
}

// Whether the TMA form (decode_tma.cuh) can serve p at tile dim D with `smem` bytes of dynamic
// shared memory (before kDecodeTmaSmemExtra) on `device`: sm_90a code and device, a head_dim
// that is D (the caller checks the form exists for the cache type and D), pages of whole
// 16-key tiles, TMA's stride limits, and room for the ring's extra bytes beside the largest
// static shared memory of the kernels (the small kernel's query tile).
template <typename KV, int D>
bool decode_tma_eligible(const DecodeParams& p, int device, int smem) {
  constexpr int kStaticMost = 8192;  // the kernels' static shared memory: 1-5 KB (cuobjdump)
  const int64_t most_stride =
      std::max(p.k_block_stride, p.v_block_stride) * static_cast<int64_t>(sizeof(KV));
  return decode_host::tma_built() && p.head_dim == D && compute_capability(device) == 90 &&
         p.block_size % kDecodeTileKeys == 0 && p.num_blocks > 0 &&
         most_stride < (int64_t{1} << 40) &&
         smem + kDecodeTmaSmemExtra + kStaticMost <= decode_host::max_optin_smem(device);
}

// The caches' tensor maps for the TMA form into p: {head_dim, num_kv_heads, block_size,
// num_blocks} with boxes of {128 bytes of dims, 1 head, 16 keys, 1 block} (decode_tma.cuh).
// False where the driver refuses one (the caller then takes a cp.async form).
template <typename KV, int D>
bool set_decode_tensor_maps(DecodeParams& p) {
  static_assert(sizeof(CUtensorMap) == sizeof(DecodeTensorMap));
  constexpr int kBytes = sizeof(KV);
  constexpr uint32_t kBoxElems = 128 / kBytes;
  const auto kv_heads = static_cast<uint64_t>(p.num_kv_heads);
  const auto bs = static_cast<uint64_t>(p.block_size);
  const auto nb = static_cast<uint64_t>(p.num_blocks);
  constexpr uint64_t kRow = uint64_t{D} * kBytes;  // bytes of one head's row
  CUresult rk = CUDA_SUCCESS, rv = CUDA_SUCCESS;
  const std::optional<CUtensorMap> k =
      try_tensor_map(kBytes, p.k_cache, {D, kv_heads, bs, nb},
                     {kRow, kv_heads * kRow, static_cast<uint64_t>(p.k_block_stride) * kBytes},
                     {kBoxElems, 1, kDecodeTileKeys, 1}, &rk);
  const std::optional<CUtensorMap> v =
      try_tensor_map(kBytes, p.v_cache, {D, kv_heads, bs, nb},
                     {kRow, kv_heads * kRow, static_cast<uint64_t>(p.v_block_stride) * kBytes},
                     {kBoxElems, 1, kDecodeTileKeys, 1}, &rv);
  if (!k || !v) {
    decode_host::note_tma_refusal(static_cast<int>(rk != CUDA_SUCCESS ? rk : rv));
    return false;
  }
  std::memcpy(&p.tmap_k, &*k, sizeof(*k));
  std::memcpy(&p.tmap_v, &*v, sizeof(*v));
  return true;
}

// kExt: the extended kernels (window, softcap, ALiBi; decode_mask.cuh), with the plain ones'
// configuration (same tiles, stages and work decomposition).
template <typename T, typename KV, int D, bool kExt>
void launch_kernels(DecodeParams p, bool aligned, int64_t ws_bytes, int device,
                    cudaStream_t stream, bool pdl) {
  constexpr int kKvBytes = static_cast<int>(sizeof(KV));
  const DType cache_dtype = kIsFp8<KV> ? DType::kF8E4M3 : DType::kBF16;
  // The swapped tile (decode_swap_tile.cuh; decode_use_swap): head_dim 256 always (16-bit and
  // fp8 caches, plain and extended); head_dim 128 (or any, by the knob) for plain units of <= 8
  // rows over 16-bit caches; fp8 caches at 64 and 128, plain and extended, by the knob
  // (kDecodeFp8SwapDefault). (16-bit caches take the extended form of the swapped tile only at
  // 256: no other instantiation of it.)
  constexpr bool kOnlySwap = D == 256;
  constexpr bool kCanSwap = kIsFp8<KV> || !kExt || kOnlySwap;
  const bool swap =
      kCanSwap && decode_use_swap(cuda_tuning().decode_swap, p.rows, D, kIsFp8<KV>, kExt);
  // The copy issue (CopyIssue) over aligned caches: the TMA form where asked (DecodeParams::tma),
  // eligible at the launch's shared memory and its maps encoded, else the lean form where asked
  // (DecodeParams::lean_issue; the plain kernels only), else by copy. Each form is a twin kernel
  // of its own: the lean issue's code in the default kernels raised their registers even where
  // not taken (the swapped d64 tile 80 -> 128, the fp8 one 80 -> 110).
  constexpr bool kLeanable = !kExt;
  // The TMA twins, plain and extended: 16-bit caches at head_dim 64, 128 and 256, fp8 ones at
  // 128 (decode_tma.cuh).
  constexpr bool kTmaAble = kIsFp8<KV> ? D == 128 : true;
  // -1 (the default) takes each form where it measured faster (tuning.h, decode_lean_issue):
  // TMA for fp8 caches at 128; lean everywhere else but the split / stream kernel over 16-bit
  // caches at 128.
  const bool tma_asked = kTmaAble && aligned && (p.tma > 0 || (p.tma < 0 && kIsFp8<KV>));
  auto lean_for = [&](bool small_kernel) {
    const bool measured = small_kernel || D != 128 || kIsFp8<KV>;
    return kLeanable && aligned && (p.lean_issue > 0 || (p.lean_issue < 0 && measured));
  };
  // The form for the small kernel (small_kernel) or the split one, of `smem` bytes of dynamic
  // shared memory before the TMA ring's extra; taking TMA fills p's tensor maps.
  auto pick_issue = [&](int smem, bool small_kernel) {
    if (tma_asked && decode_tma_eligible<KV, D>(p, device, smem) &&
        set_decode_tensor_maps<KV, D>(p)) {
      decode_host::count_tma_launch();
      return CopyIssue::kTma;
    }
    return lean_for(small_kernel) ? CopyIssue::kLean : CopyIssue::kByCopy;
  };
  // f.template operator()<kAligned16, kIssue>(smem + the form's extra bytes), instantiating
  // only the twins that exist.
  auto with_issue = [&](CopyIssue issue, int smem, auto&& f) {
    if constexpr (kTmaAble) {
      if (issue == CopyIssue::kTma) {
        return f.template operator()<true, CopyIssue::kTma>(smem + kDecodeTmaSmemExtra);
      }
    }
    if constexpr (kLeanable) {
      if (issue == CopyIssue::kLean) return f.template operator()<true, CopyIssue::kLean>(smem);
    }
    return aligned ? f.template operator()<true, CopyIssue::kByCopy>(smem)
                   : f.template operator()<false, CopyIssue::kByCopy>(smem);
  };
  // The split kernel's CTA page sweep (decode_cta_sweep.cuh; cuda_tuning().decode_cta_sweep):
  // a twin for the plain kernels over fp8 caches at head_dim 64, the form read_rate measured
  // faster (16-bit d64 read the same either way).
  constexpr bool kSweepAble = !kExt && kIsFp8<KV> && D == 64;
  // with_issue for the split kernel, which also has the CTA sweep's twin.
  auto with_split_issue = [&](CopyIssue issue, int smem, auto&& f) {
    if constexpr (kSweepAble) {
      if (issue == CopyIssue::kCtaSweep) {
        return f.template operator()<true, CopyIssue::kCtaSweep>(smem);
      }
    }
    return with_issue(issue, smem, f);
  };
  const int unit_rows = swap ? kSwapRows : kDecodeRows;
  p.row_chunks = (p.rows + unit_rows - 1) / unit_rows;
  const DecodeConfig c =
      decode_config(p.num_kv_heads, p.rows, D, kKvBytes, unit_rows, p.head_dim != D);
  const int64_t B = p.num_seqs;
  // Small mode: as many chunks as wanted and the workspace holds (not for padded tiles, nor for
  // fp8 caches on the swapped tile above 2^24 cached elements: the small kernel has only the
  // 16-row tile, faster for little work, slower for more; H200, session 11, graph replay,
  // 16-row small kernel / swapped stream: 1 x 8192 32/8 d128 16.6 / 19.9 us, 2 x 8192 24.0 /
  // 23.5, 4 x 8192 37.9 / 34.7, 8 x 32768 223 / 176; docs/perf/NOTES.md).
  const int64_t key_bound = p.len_hint > 0 ? p.len_hint : p.capacity;
  const bool fp8_stream = kIsFp8<KV> && swap &&
                          B * key_bound * p.num_kv_heads * int64_t{D} >= (int64_t{1} << 24);
  if (!kOnlySwap && !fp8_stream && p.head_dim == D && p.num_splits > 1) {
    const int64_t units = static_cast<int64_t>(p.num_kv_heads) * p.row_chunks;
    const int64_t fixed = decode_small_ws_bytes(B, p.num_kv_heads, p.rows, D, 0);
    const int64_t per_chunk = decode_small_ws_bytes(B, p.num_kv_heads, p.rows, D, 1) - fixed;
    const int64_t fit = (ws_bytes - fixed) / per_chunk;
    const decode_host::SmallChoice choice = decode_host::small_choice(
        device, B, p.num_kv_heads, p.rows, D, cache_dtype, key_bound, p.uniform_lengths != 0);
    const int64_t chunks = std::min<int64_t>(choice.chunks, fit);
    // One chunk only where forced (decode_small_chunks) or allowed (decode_small_min_chunks 1,
    // decode_small_one_wave, uniform lengths): else the stream kernel, as before.
    const bool one_ok = cuda_tuning().decode_small_chunks > 0 ||
                        cuda_tuning().decode_small_min_chunks <= 1 ||
                        cuda_tuning().decode_small_one_wave != 0 || p.uniform_lengths != 0;
    if (chunks >= (one_ok ? 1 : 2)) {
      const decode_host::SmallConfig sc =
          decode_host::small_config(p.num_kv_heads, p.rows, D, kKvBytes, choice.warps);
      const int64_t slots = B * chunks;
      p.stages = sc.stages;
      p.parts = static_cast<int>(chunks);
      p.ws_ll = reinterpret_cast<uint64_t*>(p.ws_o);
      p.ws_ll_lse = p.ws_ll + slots * p.num_kv_heads * p.rows * (D / 2);
      p.ws_gen = reinterpret_cast<uint32_t*>(p.ws_ll_lse + slots * p.num_kv_heads * p.rows);
      p.epoch = decode_host::next_epoch();
      p.probe = cuda_tuning().decode_probe;
      p.small_interleave = cuda_tuning().decode_small_interleave;
      p.small_min_tiles = p.small_interleave ? 0 : cuda_tuning().decode_small_min_tiles;
      const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(units),
                      static_cast<unsigned>(B));
      if constexpr (!kOnlySwap) {
        const dim3 block(static_cast<unsigned>(sc.warps * 32));
        with_issue(pick_issue(sc.smem, true), sc.smem, [&]<bool kAl, CopyIssue kIs>(int smem) {
          (void)split_occupancy<T, KV, D, kAl, true, kExt, false, kIs>(device, sc.warps * 32,
                                                                      smem);
          launch_maybe_pdl(decode_small_kernel<T, KV, D, kAl, kExt, kIs>, grid, block, smem,
                           stream, pdl, p);
        });
        return;
      }
    }
  }
  bool stream_mode = p.num_splits > 1 && decode_host::stream_ok(B, p.capacity);
  int64_t slots = 0;
  if (stream_mode) {
    const int64_t rows_total = static_cast<int64_t>(p.num_heads) * p.q_len;
    slots = decode_ws_slots(ws_bytes, rows_total, D);
    stream_mode = slots - B + 1 >= 1;
  }
  p.heads_per_cta = c.heads_per_cta;
  p.rc_per_cta = c.rc_per_cta;
  p.head_blocks = c.head_blocks;
  p.slices = c.head_blocks * c.rc_blocks;
  p.stages = c.stages;
  p.probe = cuda_tuning().decode_probe;
  p.stream = stream_mode ? 1 : 0;
  p.prefix_bytes = stream_mode ? decode_host::prefix_bytes_for(B) : 0;
  const int threads = c.warps * 32;
  const int smem_tiles = decode_host::split_smem(c, p.prefix_bytes);
  // The CTA sweep's contract: every warp has a unit (the CTA's heads divide the KV heads, its
  // row chunks the unit's), the merge kernel, no padded tile.
  const bool cta_sweep = kSweepAble && aligned && cuda_tuning().decode_cta_sweep != 0 &&
                         p.head_dim == D &&
                         p.num_kv_heads % c.heads_per_cta == 0 &&
                         p.row_chunks % c.rc_per_cta == 0;
  const CopyIssue issue = cta_sweep ? CopyIssue::kCtaSweep : pick_issue(smem_tiles, false);
  if (cta_sweep) decode_host::count_cta_sweep_launch();
  auto occupancy = [&](int smem_total) {
    return with_split_issue(issue, smem_total, [&]<bool kAl, CopyIssue kIs>(int smem) {
      auto occ = [&]<bool kSw>() {
        return split_occupancy<T, KV, D, kAl, false, kExt, kSw, kIs>(device, threads, smem);
      };
      if constexpr (kCanSwap) {
        if (swap) return occ.template operator()<true>();
      }
      if constexpr (!kOnlySwap) {
        if (!swap) return occ.template operator()<false>();
      }
      return 0;
    });
  };
  const int ctas = occupancy(smem_tiles);
  const int64_t per_slice = std::max<int64_t>(1, int64_t{sm_count(device)} * ctas / p.slices);
  // The dynamic split (decode_stream_ranges.cuh) where asked, the kernel is a plain one (not
  // the extended), the workspace holds its ranges and its claim list leaves the CTAs per SM as
  // they are; else the static one.
  int smem_launch = smem_tiles;
  bool dynamic = false;
  if (!kExt && stream_mode && decode_host::dynamic_split() &&
      slots - B + 1 >= (1 + kDynamicTiers) * per_slice && per_slice <= (1 << 20)) {
    const int prefix_dyn = decode_host::prefix_bytes_for(B, kDecodeClaimRingInts);
    const int smem_dyn = decode_host::split_smem(c, prefix_dyn);
    if (occupancy(smem_dyn) == ctas) {
      dynamic = true;
      p.prefix_bytes = prefix_dyn;
      smem_launch = smem_dyn;
    }
  }
  p.dynamic_split = dynamic ? 1 : 0;
  if (dynamic) decode_host::count_dynamic_launch();
  int64_t pieces_per_seq = 1;
  if (stream_mode) {
    const int64_t rows_total = static_cast<int64_t>(p.num_kv_heads) * p.rows;
    p.ws_lse = p.ws_o + slots * rows_total * D;
    // The claim words at the next 8-byte boundary (decode_ws_slots left room).
    const auto at = reinterpret_cast<uintptr_t>(p.ws_lse + slots * rows_total);
    p.ws_claim = reinterpret_cast<uint64_t*>((at + 7) & ~uintptr_t{7});
    p.parts = static_cast<int>(per_slice * (dynamic ? 1 : decode_host::stream_waves()));
    p.part_cap = static_cast<int>(std::min<int64_t>(slots - B + 1, 1 << 30));
    const int64_t ranges =
        dynamic ? (1 + kDynamicTiers) * per_slice : std::min<int64_t>(p.parts, p.part_cap);
    pieces_per_seq = std::min<int64_t>(ranges, (ranges + B - 1) / B + 1);
  } else {
    p.parts = static_cast<int>(std::min<int64_t>(B, per_slice));
  }
  p.merge_wpr = pieces_per_seq >= 48 ? 8 : pieces_per_seq >= 12 ? 4 : pieces_per_seq >= 4 ? 2 : 1;
  const bool merge_follows = stream_mode && cuda_tuning().decode_debug_no_merge == 0;
  p.merge_pdl = merge_follows && cuda_tuning().decode_merge_pdl != 0 &&
                compute_capability(device) >= 90 ? 1 : 0;
  const auto grid = static_cast<unsigned>(static_cast<int64_t>(p.parts) * p.slices);
  const dim3 block(static_cast<unsigned>(threads));
  with_split_issue(issue, smem_launch, [&]<bool kAl, CopyIssue kIs>(int smem) {
    auto launch = [&]<bool kSw>() {
      launch_maybe_pdl(decode_kernel<T, KV, D, kAl, kExt, kSw, kIs>, grid, block, smem, stream,
                       pdl, p);
    };
    if constexpr (kCanSwap) {
      if (swap) launch.template operator()<true>();
    }
    if constexpr (!kOnlySwap) {
      if (!swap) launch.template operator()<false>();
    }
  });
  if (!merge_follows) return;
  const int64_t rows = B * p.q_len * p.num_heads;
  const int64_t rows_per_block = 8 / p.merge_wpr;
  launch_maybe_pdl(merge_kernel<T, D, kExt>,
                   dim3(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block)),
                   dim3(256), 0, stream, p.merge_pdl != 0, p);
}

}  // namespace

template <typename T, typename KV, int D>
void DecodeKernels<T, KV, D>::launch(const DecodeParams& p, bool ext, bool aligned,
                                     int64_t ws_bytes, int device, cudaStream_t stream,
                                     bool pdl) {
  if (ext) {
    launch_kernels<T, KV, D, true>(p, aligned, ws_bytes, device, stream, pdl);
  } else {
    launch_kernels<T, KV, D, false>(p, aligned, ws_bytes, device, stream, pdl);
  }
}

template <typename T, typename KV, int D>
int DecodeKernels<T, KV, D>::small_ctas(int device, int threads, int smem) {
  if constexpr (D == 256) {
    KVATTN_FAIL("decode_attention: no small-batch kernel at head_dim 256");
  } else {
    return split_occupancy<T, KV, D, true, true>(device, threads, smem);
  }
}

template <typename T, typename KV, int D>
int DecodeKernels<T, KV, D>::stream_ctas(int device, int threads, int smem, bool swap) {
  // As launch_kernels' plain form: the swapped tile at every head_dim, the 16-row tile at all
  // but 256.
  constexpr bool kCanSwap = true;
  constexpr bool kCanPlain = D != 256;
  if (swap) {
    if constexpr (kCanSwap) {
      return split_occupancy<T, KV, D, true, false, false, true>(device, threads, smem);
    }
  } else {
    if constexpr (kCanPlain) {
      return split_occupancy<T, KV, D, true, false, false, false>(device, threads, smem);
    }
  }
  KVATTN_FAIL("decode_attention: no ", swap ? "swapped" : "16-row", " tile at head_dim ", D,
              kIsFp8<KV> ? " over float8_e4m3" : "");
}

}  // namespace kvattn::cuda
