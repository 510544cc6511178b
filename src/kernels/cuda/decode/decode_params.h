// The parameter block and the tiling of the CUDA paged-decode kernels (split-KV
// flash-decoding), shared by the kernels (decode_attention.cu) and the planner
// (decode_plan.cpp).
//
// Work decomposition. A CTA holds kDecodeTileKeys-key tiles of several KV
// heads at once: warp w owns one unit (KV head h0 + w / rc_per_cta, row chunk w % rc_per_cta),
// i.e. the up-to-16 query rows (GQA group x q_len tokens, row r = i * group + h) that read that
// KV head, and runs its own cp.async pipeline over the keys. The warps of a CTA walk the same
// keys in step, so together they read each token's K/V row (all heads of the CTA, contiguous
// in the cache) at once. The CTAs of one "slice" (a block of heads x row chunks) share out the
// keys of the whole batch:
// - stream mode (plan.num_splits > 1; at most kDecodeMaxStreamSeqs sequences): the tiles of
//   all sequences, concatenated, are cut into P equal ranges, one per CTA (stream-K), so every
//   CTA streams the same number of bytes whatever the lengths (or, with the dynamic split,
//   P equal ranges of 3/4 of them and 4P smaller ones the CTAs claim as they finish:
//   decode_stream_ranges.cuh). A sequence cut by a range boundary is computed in pieces whose
//   normalized partials + log2-LSE go to the workspace; a merge kernel combines them. The
//   piece of (range p, sequence b) uses slot p + b.
// - whole mode (num_splits == 1): CTA p of a slice takes whole sequences p, p + P, ...; no
//   workspace, no merge.
// - small mode (few sequences x KV heads for the SMs; decode_small_chunks() > 0): a separate
//   kernel. CTA (chunk c, unit u, sequence b) holds ONE unit (KV head x row chunk); its 8 (or,
//   when 8 give fewer than 4 chunks, 4) warps split chunk c of C of b's tiles, each warp
//   streaming its own sub-range, and combine their softmax states through shared memory into
//   one piece. The pieces meet without a fence or a flag: CTAs c < C - 1 store theirs
//   (normalized output in the output dtype, as FlashInfer's and vLLM's split-KV partials, and
//   the float32 log2-LSE) as LL words, 64-bit words of a 32-bit payload and the launch's tag
//   of (b, u)), each written and read in one single-copy-atomic access, and exit. CTA C - 1,
//   the merger, keeps its own piece in shared memory, polls the others' words until every tag
//   is the launch's, merges and writes out. The tag chains from launch to launch: every CTA
//   reads the unit's gen word (the previous launch's tag) at its start, the tag is a hash of
//   it and the host's per-launch epoch that never equals it, and the merger stores the tag as
//   the next gen. So what the previous launch of the same layout left is always stale, even
//   in a graph replay (same epoch), and any other leftover matches with odds 2^-32. The
//   merger waits only for CTAs of lower grid index.
//   The key split of (b, c) comes from b's length; the CTA guesses that length is
//   plan.max_seqlen_k (p.len_hint) and loads the block ids of the guessed range while the
//   length is in flight, reloading them only when the guess was wrong. With p.small_interleave
//   chunk c takes tiles c, c + C, c + 2C, ... instead of a contiguous range: its warps' first
//   tiles are then known before the length and need no reload. With p.small_min_tiles > 0
//   (contiguous chunks) a sequence of n tiles uses only its first C_n = clamp(ceil(n / (warps
//   x small_min_tiles)), 1, C) chunks: CTAs c >= C_n exit once the length is known and CTA
//   C_n - 1 merges C_n pieces (none besides its own at C_n = 1). The unit's 16 query
//   rows are loaded once per CTA (16-byte copies into shared memory, then ldmatrix).
//
// Layout (strides in elements; all tensors on one device):
//   q, out     [num_seqs * q_len, num_heads, head_dim]: token t, head h at t*q_stride + h*D
//              (out at t*out_stride + h*D); q and out have the caches' dtype (bf16 or fp16)
//   caches     [num_blocks, block_size, num_kv_heads, head_dim]: key j of sequence b lives in
//              block blk = block_table[b*bt_stride + j / block_size], offset o = j % block_size,
//              at blk*k_block_stride + (o*num_kv_heads + kvh)*D
//   lse        optional float32 [num_heads, num_seqs*q_len]: (h, t) at h*lse_head_stride + t
//   workspace  (stream mode) float32 partials of ws_slots slots, R = num_kv_heads * rows:
//              (slot, kvh, row r) at wi = (slot*num_kv_heads + kvh)*rows + r:
//              ws_o[wi*D .. wi*D+D) = that piece's normalized output, ws_lse[wi] = its
//              log2-domain LSE (scaled scores), -inf when it saw no key (the merge kernel
//              combines sequences of 2+ pieces, whose slots it derives from the lengths);
//              then, from the next 8-byte boundary, ws_claim: 2 uint64 words a slice (the
//              dynamic split's counter and gen word; room for rows_total slices).
//              Small mode: piece (slot b*C + c, kvh, row r) at wi as above; values in
//              ws_ll[wi*D/2 .. wi*D/2 + D/2) (two per word), LSE in ws_ll_lse[wi]; then
//              ws_gen: uint32 [num_seqs][units], the last tag of each (sequence, unit).
// Extended form (kExt: a window, softcap or ALiBi; decode_mask.cuh): sequence b's tiles are
// counted and visited from window_first_tile(len) on, everywhere above (the stream prefix sum,
// whole sequences, small mode's chunk split); the tiles before it are never issued.
// Index VALUES (block ids, cache_seqlens) are untrusted: out-of-range ones are never used to
// address memory; the kernel zero-fills or clamps and ORs a DeviceFault bit into *fault_word.
#pragma once

#include <cstdint>

namespace kvattn::cuda {

inline constexpr int kDecodeTileKeys = 16;        // keys per pipeline stage of one warp
inline constexpr int kDecodeRows = 16;            // query rows per unit: one mma M tile
inline constexpr int kDecodeSwapRows = 8;         // ... in the swapped tile: one mma N tile
inline constexpr int kDecodeMaxWarps = 8;         // units (warps) per CTA
inline constexpr int kDecodeMaxStreamSeqs = 2048; // stream mode keeps a tile prefix sum in smem
inline constexpr int kDecodeMaxStages = 8;
// Most chunks per (sequence, unit) in small mode (bounds the merger's serial work).
inline constexpr int kSmallMaxChunks = 1024;
// The dynamic split's tiers of claimed ranges (decode_stream_ranges.cuh): kDynamicTiers ranges
// a resident CTA besides its static one.
inline constexpr int kDynamicTiers = 4;
// Whether the split kernel carries the dynamic split's code at all (CMake option
// KVATTN_DECODE_DYNAMIC_SPLIT_BUILD, off): measured slower than the static split on every shape
// (session 37), and its claims, though never taken by default, raised the default kernels'
// registers (the 16-bit d64 lean tile 120 -> 128 with 12 bytes of spills, a local load every
// tile: session 38's ncu). Without it the launcher never asks for it and the kernels compile to
// the static split alone.
#ifndef KVATTN_DECODE_DYNAMIC_SPLIT_BUILD
#define KVATTN_DECODE_DYNAMIC_SPLIT_BUILD 0
#endif
inline constexpr bool kDecodeDynamicSplitBuilt = KVATTN_DECODE_DYNAMIC_SPLIT_BUILD != 0;
// Ints of shared memory after the prefix sum that hold a CTA's claims (ClaimRing,
// decode_stream_ranges.cuh).
inline constexpr int kDecodeClaimRingInts = 32;

// Bytes between two key rows of a stage: 16-bit tiles XOR-swizzle unpadded rows
// (decode_common.cuh); fp8 tiles pad each row by a 16-byte chunk (decode_fp8.cuh), which
// measured 6% faster than their swizzled form at 64 x 4096 on the H200.
constexpr int decode_tile_pitch(int head_dim, int kv_bytes) {
  return head_dim * kv_bytes + (kv_bytes == 1 ? 16 : 0);
}

// How a kernel's warps copy their K/V tiles into shared memory (a template argument of the
// split and small kernels): 16-byte cp.async copies that each derive their address
// (issue_tile_by_copy, and the only form over caches not 16-byte aligned), the same copies
// from one row offset per key (issue_tile_lean, DecodeParams::lean_issue), tensor-map
// loads issued by one lane (decode_tma.cuh, DecodeParams::tma), or the split kernel's CTA
// copying all its heads' rows of a tile together (decode_cta_sweep.cuh,
// cuda_tuning().decode_cta_sweep).
enum class CopyIssue : int { kByCopy = 0, kLean = 1, kTma = 2, kCtaSweep = 3 };

// A CUtensorMap's 128 opaque bytes (cuda.h's type, kept out of this header).
struct alignas(64) DecodeTensorMap {
  unsigned char bytes[128];
};

struct DecodeParams {
  const void* q = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // nullptr: not requested
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const float* k_scale = nullptr;        // float8_e4m3 caches: [num_kv_heads], null => 1.0
  const float* v_scale = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* cache_seqlens = nullptr;
  float* ws_o = nullptr;
  float* ws_lse = nullptr;
  uint64_t* ws_ll = nullptr;             // small mode: the pieces' LL words (values)
  uint64_t* ws_ll_lse = nullptr;         // small mode: the pieces' LL words (LSEs)
  uint32_t* ws_gen = nullptr;            // small mode: per (sequence, unit), last tag
  uint32_t* fault_word = nullptr;
  uint32_t epoch = 1;                    // small mode: fresh per host launch
  // Diagnostics (cuda_tuning().decode_probe): per-CTA stamps of the small kernel's phases or of
  // the split kernel's entry and warps' ends (kDecodeProbeSlots words a CTA of the grid), or
  // null.
  unsigned long long* probe = nullptr;

  int64_t q_stride = 0;
  int64_t out_stride = 0;
  int64_t k_block_stride = 0;
  int64_t v_block_stride = 0;
  int64_t bt_stride = 0;
  int64_t lse_head_stride = 0;

  int num_seqs = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int group = 1;        // num_heads / num_kv_heads
  int q_len = 1;
  int rows = 1;         // group * q_len
  int row_chunks = 1;   // ceil(rows / kDecodeRows)
  int block_size = 1;
  int block_shift = -1;  // log2(block_size) when it is a power of two, else -1 (page_of)
  int num_blocks = 0;
  int capacity = 0;     // max_blocks_per_seq * block_size: the most keys a row of the table holds
  int len_hint = 0;     // small mode: the length guessed before cache_seqlens arrives (<= capacity)
  float scale_log2 = 0.0f;  // softmax scale * log2(e)
  int causal = 1;
  int out_aligned4 = 0;     // out rows allow 4-byte stores
  int q_aligned16 = 0;      // q rows are 16-byte aligned (small kernel: cp.async of the q tile)
  int kv_evict_first = 1;   // small kernel: K/V copies evict-first in L2 (decode_kv_evict_first)
  int lean_issue = -1;      // aligned plain kernels: the kLean twins (issue_tile_lean); -1 auto
  int small_interleave = 0; // small kernel: chunks take interleaved tiles (cuda_tuning())
  int small_min_tiles = 0;  // small kernel: tiles per warp below which chunks go unused (ditto)
  int fp8_hw_cvt = 0;       // fp8 caches: the hardware e4m3 conversion, P V in f16 (cuda_tuning())
  int fp8_q_f16 = 0;        // fp8, bf16 queries: Q in f16 (scaled), K by the hardware conversion
  int pdl_trigger = 0;      // griddepcontrol.launch_dependents after the PDL wait (cuda_tuning())
  int merge_pdl = 0;        // stream mode: the merge kernel follows by PDL (the split kernel triggers)
  int uniform_lengths = 0;  // the plan's promise (DecodePlan::uniform_lengths); the launcher's choice

  // CTA shape (decode_config) and the partition of the work.
  int heads_per_cta = 1;
  int rc_per_cta = 1;
  int head_blocks = 1;
  int slices = 1;        // head_blocks * row-chunk blocks
  int stages = 3;
  int stream = 0;        // 1: stream-K ranges over all tiles; 0: whole sequences per CTA
  int parts = 1;         // CTAs per slice (gridDim.x / slices)
  int part_cap = 1;      // most ranges the workspace holds (stream mode)
  int prefix_bytes = 0;  // shared memory before the tile buffers (stream mode prefix sum)
  int merge_wpr = 1;     // merge kernel: warps per output row
  int num_splits = 1;    // the plan's

  // The extended kernels (template flag kExt, decode_mask.cuh) only: flash-attn's window,
  // softcap and ALiBi. (Last, so the plain kernels' parameter offsets stay as they were.)
  int window_left = -1;   // -1: unbounded (also for a window wider than the capacity)
  int window_right = -1;  // resolved: causal is 0
  float softcap_in = 0.0f;   // 2 / softcap
  float softcap_out = 0.0f;  // softcap * log2(e); 0: off
  const float* alibi_slopes = nullptr;  // float32 [num_heads] or [num_seqs, num_heads]; null: off
  int64_t alibi_seq_stride = 0;         // 0 for [num_heads]
  // int32 [num_seqs] or null: sequence b's keys are the cache positions cache_leftpad[b] ..
  // len - 1 (flash-attn's cache_leftpad); the mask, window and ALiBi are unchanged in cache
  // positions, the positions before it are never read. A value outside [0, len] is clamped
  // and recorded (kFaultLeftpadOutOfRange).
  const int32_t* cache_leftpad = nullptr;

  // The tensors' head_dim: the kernels' tile dim D, or less for a padded tile (head_dim 80 and
  // 96 run on D = 128: the dims past head_dim are zero-filled in shared memory and in Q, never
  // read or written in memory; decode_tile_dim). The workspace keeps D floats per row.
  int head_dim = 0;

  // The TMA form (CopyIssue::kTma, decode_tma.cuh): 1 asks for it where eligible
  // (decode_tma_eligible), -1 where measured faster (cuda_tuning().decode_tma); the launcher
  // fills the caches' tensor maps when it takes it.
  int tma = -1;
  int tma_prefetch = 0;  // the TMA form also asks L2 for the tile after the one it loads
  DecodeTensorMap tmap_k{};
  DecodeTensorMap tmap_v{};

  // Stream mode: 1 = the dynamic split (decode_stream_ranges.cuh):
  // parts static ranges, then kDynamicTiers x parts claimed ones (part_cap holds them all); the
  // CTA's claims follow the prefix sum in shared memory (prefix_bytes covers them).
  // cuda_tuning().decode_dynamic_split.
  int dynamic_split = 0;
  uint64_t* ws_claim = nullptr;  // dynamic split: per slice, {tag, count} counter and gen word
};

// The tile dim the kernels run a head_dim on: 80 and 96 on the 128 tiles, others as they are.
inline int decode_tile_dim(int64_t head_dim) {
  return head_dim == 80 || head_dim == 96 ? 128 : static_cast<int>(head_dim);
}

// The CTA shape for a head count, rows per KV head and head_dim (see above).
struct DecodeConfig {
  int heads_per_cta = 1;
  int rc_per_cta = 1;
  int head_blocks = 1;
  int rc_blocks = 1;
  int warps = 1;
  int stages = 3;
  int stage_bytes = 0;  // per warp: K and V tiles of kDecodeTileKeys keys
};

// The small kernel's L2 policy for its K/V copies (CudaTuning::decode_kv_evict_first):
// `forced` 0 or 1 as given; -1 = by size: evict-first (1) only when the launch's K/V bytes
// (num_seqs x key_bound keys x KV heads x head_dim x 2 tensors x kv_elem_bytes) exceed the
// device's L2. A launch whose K/V fit may find them there again (graph replay, a second call
// over the same cache: 1x8192 32/8 d128 warm 14.4 us at normal priority against 20.4
// evict-first, H100, session 44); one that does not cannot, and evict-first then spares the
// L2's other lines (after a memset flush 23.4 against 25.3). Counted in double: no overflow.
inline int decode_kv_evict_first(int forced, int64_t num_seqs, int64_t key_bound,
                                 int64_t num_kv_heads, int64_t head_dim, int64_t kv_elem_bytes,
                                 int64_t l2_bytes) {
  if (forced >= 0) return forced;
  const double kv_bytes = 2.0 * static_cast<double>(num_seqs) * static_cast<double>(key_bound) *
                          static_cast<double>(num_kv_heads) * static_cast<double>(head_dim) *
                          static_cast<double>(kv_elem_bytes);
  return kv_bytes > static_cast<double>(l2_bytes) ? 1 : 0;
}

// Bytes of float32 workspace a plan of `num_splits` asks for (0 when num_splits == 1).
inline int64_t decode_workspace_bytes(int64_t num_seqs, int64_t num_heads, int64_t head_dim,
                                      int64_t q_len, int64_t num_splits) {
  if (num_splits <= 1) return 0;
  return num_seqs * num_splits * num_heads * q_len * (head_dim + 1) * 4;
}

// Slots of partials a workspace of `bytes` holds next to the dynamic split's claim words
// (stream mode; at most rows_total slices, aligned to 8 bytes).
inline int64_t decode_ws_slots(int64_t bytes, int64_t rows_total, int64_t head_dim) {
  const int64_t fixed = 8 + rows_total * 16;
  return bytes > fixed ? (bytes - fixed) / (rows_total * (head_dim + 1) * 4) : 0;
}

// The CTA shape of the kernel for `num_kv_heads` KV heads of `rows` query rows each in units
// of `unit_rows` (kDecodeRows, or kDecodeSwapRows for the swapped tile), over a cache of
// `kv_bytes`-byte elements (2, or 1 for float8_e4m3; cuda_tuning() may change heads per CTA
// and stages). A CTA holds as many warps as two stages each fit (head_dim 256: 6). `padded`:
// the tensors' head_dim is less than the tile's (80 and 96 on the 128 tile).
DecodeConfig decode_config(int64_t num_kv_heads, int64_t rows, int64_t head_dim,
                           int kv_bytes = 2, int unit_rows = kDecodeRows, bool padded = false);

// Query rows per unit the stream kernel uses at tile dim `tile_dim` whatever the tuning: 256
// runs on the swapped tile only (kDecodeSwapRows); others plan with kDecodeRows.
inline int decode_plan_unit_rows(int64_t tile_dim) {
  return tile_dim == 256 ? kDecodeSwapRows : kDecodeRows;
}

// The fp8 swapped tile's default (decode_fp8.cuh, decode_swap_tile.cuh): on. H200, session 11
// (docs/perf/NOTES.md): 64 x 4096 32/8 d128 252.6 -> 172.5 us, 256 x 1024 16/8 252.6 -> 171.0,
// 96 x 4096 9/3 d64 104.9 -> 79.7, over the 16-row fp8 tile; cuda_tuning().decode_swap = 0
// turns it off. Batches that take it skip the small-batch kernel (which has only the 16-row
// tile; 8 x 32768: 223 us there, 171 in stream mode on the swapped tile).
inline constexpr bool kDecodeFp8SwapDefault = true;

// Whether the stream kernel runs the swapped tile (units of kDecodeSwapRows rows) for `rows`
// query rows per KV head at tile dim `tile_dim` over a 16-bit or fp8 cache, extended (window,
// softcap, ALiBi, leftpad) or not, given the knob cuda_tuning().decode_swap (-1 default, 0
// never, 1 wherever the tile exists). 16-bit caches: head_dim 256 always; plain units of <= 8
// rows, by default at tile dim 128 (80 and 96 included). fp8 caches: 256 always; units of <= 8
// rows at 64 and 128, plain and extended, by default where kDecodeFp8SwapDefault says.
inline bool decode_use_swap(int knob, int64_t rows, int64_t tile_dim, bool fp8, bool ext) {
  if (tile_dim == 256) return true;  // the only tile at 256 (16-bit and fp8 caches)
  if (fp8) {  // fp8 caches at head_dim 64 and 128: by the knob
    const bool on = knob == 1 || (knob < 0 && kDecodeFp8SwapDefault);
    return on && rows <= kDecodeSwapRows && (tile_dim == 64 || tile_dim == 128);
  }
  if (rows > kDecodeSwapRows) return false;
  return !ext && (knob == 1 || (knob < 0 && tile_dim == 128));
}

// Stream-mode CTAs per slice on `device`: resident CTAs (occupancy) over slices, times the
// waves of ranges (decode_host::stream_waves). fp8_swap: of
// the fp8 swapped tile's kernel (c from decode_config with kv_bytes 1, kDecodeSwapRows; head_dim
// 64, 128 or 256), else of the 16-bit 16-row kernel (256: the swapped one).
int decode_parts(int device, const DecodeConfig& c, int64_t head_dim, int64_t num_seqs,
                 bool fp8_swap = false);

// Whether stream mode can serve `num_seqs` sequences of at most `capacity` keys.
bool decode_stream_ok(int64_t num_seqs, int64_t capacity);

// Small mode: chunks per (sequence, unit) the small-batch kernel would use on `device` for a
// 16-bit cache and sequences of at most `max_keys` keys (exactly that many each where
// `uniform`: DecodePlan::uniform_lengths), or 0 when the batch is large enough for the stream
// kernel (or small mode is off).
int decode_small_chunks(int device, int64_t num_seqs, int64_t num_kv_heads, int64_t rows,
                        int64_t head_dim, int64_t max_keys, bool uniform = false);

// Batches of uniform lengths (DecodePlan::uniform_lengths; head_dim 128, 16-bit caches, where
// CudaTuning::decode_uniform_one_chunk allows): one small-kernel CTA of 4 warps per (sequence,
// unit), no merge, instead of the stream kernel's split and merge, when those CTAs fill at
// least one wave (`slots_w4`: SMs x resident 4-warp CTAs) and each warp streams at least 16
// tiles of the `keys` keys. With lengths as uneven as a ragged batch's, one CTA a sequence
// would end as unevenly as they do; uniform ones end together. H100, session 45 (C++ bench,
// us; docs/perf/NOTES.md calls 1 and 3): 64x4096 32/8 d128 362.8 -> 351.5, 256x1024 16/8
// 363.3 -> 351.3; 8x32768 32/8 (64 CTAs, a quarter wave) and every d64 shape lose with it.
inline bool decode_uniform_one_chunk(int64_t num_seqs, int64_t units, int64_t slots_w4,
                                     int64_t keys) {
  if (num_seqs <= 0 || units <= 0 || slots_w4 <= 0 || keys <= 0) return false;
  const int64_t tiles_per_warp = (keys + kDecodeTileKeys - 1) / kDecodeTileKeys / 4;
  return num_seqs * units >= slots_w4 && tiles_per_warp >= 16;
}

// Bytes a small-mode workspace of `chunks` chunks needs: per piece row, head_dim / 2 LL words
// of values and one of LSE (8 bytes each); one gen word per (sequence, unit).
inline int64_t decode_small_ws_bytes(int64_t num_seqs, int64_t num_kv_heads, int64_t rows,
                                     int64_t head_dim, int64_t chunks) {
  const int64_t units = num_kv_heads * ((rows + kDecodeRows - 1) / kDecodeRows);
  return num_seqs * chunks * num_kv_heads * rows * (head_dim / 2 + 1) * 8 + num_seqs * units * 4;
}

// Phase stamps the small kernel writes per CTA when probed (diagnostics), 64-bit words:
// [0] globaltimer (ns) at entry, [1] at exit, [2] clock64 cycles entry -> exit; cycles from
// entry when [3] the length arrived, [4] warp 0's first tile landed, [5] warp 0's last tile
// was done, [6] all warps were done, [7] the piece was stored (published, or kept by the
// merger), [8] the merger had every piece and had merged; [9] 1 for the merger, [10] its SM.
// The split kernel's: [0] globaltimer at entry, [2 + w] when warp w finished its tiles (0: a
// warp without a unit, or a CTA without a range), [10] its SM, [11] kDecodeProbeSplit.
inline constexpr int kDecodeProbeSlots = 12;
inline constexpr unsigned long long kDecodeProbeSplit = 3;

}  // namespace kvattn::cuda
