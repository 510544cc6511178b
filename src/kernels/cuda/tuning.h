// Process-wide switches for kernel variants, so that a benchmark (or a user) can time them
// beside the default in one run. The defaults are the variants measured best on the H200
// (docs/perf/NOTES.md, "CUDA store_kv and decode"). Initialised once from the environment;
// the benchmark and the tests set them directly. Not thread-safe to change while kernels are
// being launched from other threads.
#pragma once

namespace kvattn::cuda {

struct CudaTuning {
  // Prefill: 1 = the Hopper kernel (wgmma + TMA, hopper/prefill_sm90_*) wherever it applies
  // (prefill_sm90_eligible), 0 = the sm_80 mma.sync kernel everywhere. Env KVATTN_PREFILL_SM90.
  int prefill_sm90 = 1;
  // Hopper prefill: 1 = a persistent grid (one CTA per SM walking the tile list), 0 = one CTA
  // per tile. Env KVATTN_PREFILL_SM90_PERSISTENT.
  int prefill_sm90_persistent = 1;
  // Hopper prefill, paged K/V whose pages are not whole 128-key tiles: 1 = the producer
  // warpgroup gathers rows with cp.async (hopper/prefill_sm90_gather.cuh; EXPERIMENTAL: not yet
  // run on a GPU), 0 = one TMA box per page piece. Env KVATTN_PREFILL_SM90_PAGED_GATHER.
  int prefill_sm90_paged_gather = 0;
  // Hopper prefill: 1 = the consumer warpgroups' turns to issue GEMMs run on across tiles
  // (primed once per CTA, FlashAttention-3's order), so one warpgroup starts the next tile
  // while the last one is still in its epilogue; 0 = the turns restart with every tile (the
  // last warpgroup re-primes after its epilogue). On by default since session 11 (H200,
  // docs/perf/NOTES.md: flushed 1x16384 +11%, 16x1024 +3.5%, the rest within noise; racecheck
  // and memcheck clean). Env KVATTN_PREFILL_SM90_TURNS.
  int prefill_sm90_turns = 1;
  // Hopper prefill over pages smaller than a key tile: how many producer warps issue a tile's
  // TMA boxes (1-4; hopper/prefill_sm90_producer.cuh). Env KVATTN_PREFILL_SM90_PRODUCER_WARPS.
  // 4 since session 15 (H200, prefix 8 x (512 over 4096) d128 page 16: 429 -> 591 TFLOP/s
  // flushed, 432 -> 532 graph; page 256 and packed K/V never take it).
  int prefill_sm90_producer_warps = 4;
  // Hopper prefill consumers decode their tiles in 32-bit arithmetic where the schedule fits
  // (hopper/prefill_sm90_schedule.cuh; the same tiles, CPU-tested). Env
  // KVATTN_PREFILL_SM90_NARROW_DECODE. 1 since session 15 (H200: 0 to +2% on the d64/d128
  // shapes, +9% graph on 8 x 2048 d256, nothing slower beyond noise).
  int prefill_sm90_narrow_decode = 1;
  // Hopper prefill, plain kernels (no window / softcap / ALiBi): the producer's warp 0 decodes
  // the tiles and hands each one to the consumers with its Q (Tile::kProducerDecode,
  // hopper/prefill_sm90_tile_handover.cuh). 0 = never (the consumers decode), 1 = always,
  // 2 = where a tile's key loop is short (kSm90HandoverMaxRowKeys, prefill_sm90_launch.cuh);
  // 1 and 2 only where each CTA's tiles fit the handover's slot ring. Default 2 since session
  // 22, when the handed tiles came by the async proxy into slots written once (racecheck and
  // memcheck clean; until then off: racecheck flagged the reused slot). H200, session 22, same
  // binary: 16x1024 d128 -2.5-3.5%, 8x2048 32/8 d64 -3.6-4.4%, 4x4096 9/3 d64 -3-4%, others even.
  // Env KVATTN_PREFILL_SM90_HANDOVER.
  int prefill_sm90_handover = 2;
  // The same for the window / softcap / ALiBi kernels (kMods): 0 = never, 1 = always, 2 = where
  // key loops are short (a window bounds them too), 3 (default) = 2 at head_dim 128, else never.
  // H200, session 23 (docs/perf/NOTES.md), mode 2 against 0, two rounds, graph / flushed: d128
  // 8x2048 32/8 softcap50 -2.4 / -2.5%, alibi -4 / -3% (one flushed round +1.5%), win1024 -8.5 /
  // -2 to -8%; d64 4x4096 9/3 win1024 alibi -2 / -3% but 8x2048 32/8 softcap50 +1.5 / +1.4%; d256
  // 8x2048 16/8 softcap50 -2 / +3 to +7% (flushed slower); long windows decline (even). Env
  // KVATTN_PREFILL_SM90_MODS_HANDOVER.
  int prefill_sm90_mods_handover = 3;
  // Hopper prefill: the dynamic tile schedule (hopper/prefill_sm90_schedule.cuh,
  // for_each_claimed_tile: a CTA claims the next tile from a counter when it frees up, as
  // FlashAttention-3's scheduler, instead of every gridDim-th tile of the snake deal). It rides
  // on the tile handover (the producer decides, the consumers follow the handed tiles), with one
  // producer warp, on batches of at least prefill_sm90_dynamic_min_rounds rounds of the grid
  // whose row blocks mostly have rows (sm90::prefill_sm90_claims_tiles). 0 = never; 1 (default)
  // = the plain kernels where they take the handover by their own rule, the window / softcap /
  // ALiBi kernels wherever it applies (taking the handover for it); 2 = the plain kernels too.
  // H200, session 24 (docs/perf/NOTES.md calls 1-2), against 0, flushed: 8x2048 32/8 d128
  // -1.3 to -2.8%, 16x1024 -1.0 to -2.0%, 8x2048 32/8 d64 -2.4 to -2.8%; the kMods kernels
  // taking the handover for it -2 to -10% (1x16384 d256 win4096 softcap50 -10%, 8x2048 d256
  // softcap50 -5%); the plain kernels on long key loops (mode 2) +1.6-2.3% slower. Env
  // KVATTN_PREFILL_SM90_DYNAMIC.
  int prefill_sm90_dynamic = 1;
  // ... and the fewest rounds of the persistent grid (tiles / grid) a launch needs for it (over
  // fewer the snake deal balances better). Env KVATTN_PREFILL_SM90_DYNAMIC_MIN_ROUNDS.
  int prefill_sm90_dynamic_min_rounds = 8;
  // Hopper prefill: megabytes of L2 the K/V of one tile-schedule section may take
  // (prefill_sm90_schedule.cuh): the (sequence, head) pairs are cut into sections whose K/V
  // fit, and every row block of a section runs before the next section starts, so a K/V tile
  // is read from DRAM about once rather than once per row block. 0 = one section (the order
  // before session 13: all pairs of one row block, then the next). FlashAttention-3 budgets
  // 32 MB of the 50 MB L2 the same way. Env KVATTN_PREFILL_SM90_L2_MB.
  int prefill_sm90_l2_mb = 32;
  // Decode: most KV heads one CTA holds (one warp each). Env KVATTN_DECODE_HEADS_PER_CTA. At
  // 8 (no cap), head_dim 256 and the padded 80/96 take the count that keeps the most warps
  // busy (decode_config); a lower value is taken as the cap, as for the other head dims.
  int decode_heads_per_cta = 8;
  // Decode: pipeline stages per warp (0: as many as ~192 KB per CTA of 8 warps allow).
  // Env KVATTN_DECODE_STAGES.
  int decode_stages = 0;
  // Decode: stages of the 16-row tile over 16-bit caches at head_dim 64 (where decode_stages is
  // 0). 3 (default since session 30): faster where a sequence is long (H200, session 29, one
  // process: 8 x 32768 9/3 65.3 -> 59.0 us, 1 x 8192 9/3 15.2 -> 14.1; H100, session 30:
  // 83.9 -> 79.6-79.9 and 14.8 -> 14.4), even elsewhere (96 x 4096 9/3 and 256 x 1024 8/8:
  // H200 +0.4-0.8%, H100 -0.9% and 0.0%); the tile's 118-120 registers hold two 8-warp CTAs an
  // SM, which 3 stages' 96 KB still allow. 2 was the pick from session 9 (6 stages lost 18-32%).
  // The suite, memcheck and racecheck ran at 3 (session 30). Env KVATTN_DECODE_D64_STAGES.
  int decode_d64_stages = 3;
  // Decode, stream/whole-sequence kernel: the swapped tile (S^T = K Q^T, decode_swap_tile.cuh)
  // for units of <= 8 query rows over 16-bit caches without window, softcap or ALiBi, and over
  // float8_e4m3 caches at head_dim 64/128 with or without them (decode_use_swap). -1 = 16-bit
  // caches at head_dim 128 (measured 2-4% faster there on the H200, and no faster at 64:
  // docs/perf/NOTES.md, session 9), fp8 caches per kDecodeFp8SwapDefault (on: 1.45x the
  // 16-row fp8 tile at 64 x 4096 d128, session 11);
  // 1 = at every head_dim and for fp8 caches; 0 = never. Env KVATTN_DECODE_SWAP.
  int decode_swap = -1;
  // Decode, small batches (few sequences x KV heads for the SMs): 1 = each CTA holds one KV
  // head and its warps split a chunk of one sequence's keys, combined on chip; the last CTA
  // of a (sequence, head) merges the chunks (no merge kernel). 0 = the stream-K kernel for
  // every batch. Env KVATTN_DECODE_SMALL.
  int decode_small = 1;
  // Decode, small-batch kernel: warps per CTA; 0 = 8 when the batch gives 4+ chunks per unit
  // with 8, else 4 (decode_attention.cu, small_choice). Env KVATTN_DECODE_SMALL_WARPS.
  int decode_small_warps = 0;
  // Decode, small-batch kernel: most chunks per (sequence, unit); 0 = as many as fill the SMs.
  // Env KVATTN_DECODE_SMALL_MAX_CHUNKS.
  int decode_small_max_chunks = 0;
  // Decode, small-batch kernel for every batch it can take (head_dim 64/128): exactly this
  // many chunks per (sequence, unit), instead of the occupancy rule (chunks that fill the SMs,
  // small mode only at 4 or more). 1 = one CTA per (sequence, KV head) whose warps split all
  // its keys and combine on chip: no workspace pieces and no merge for uniform batches.
  // 0 = the rule. Env KVATTN_DECODE_SMALL_CHUNKS.
  int decode_small_chunks = 0;
  // Decode, small-batch kernel: 1 = the K/V copies carry an L2 evict-first policy (read
  // once; after do_bench's memset flush the L2 then recycles their lines instead of writing
  // back the flush's dirty ones: 1x8192 19.7 vs 21.0 us on the H200), 0 = normal priority,
  // -1 = by size (decode_kv_evict_first in decode_params.h): evict-first only when the
  // launch's K/V bytes exceed the L2, so that a launch whose K/V fit can find them there again
  // (graph replay, a second call over the same cache).
  // Env KVATTN_DECODE_KV_EVICT_FIRST.
  int decode_kv_evict_first = -1;
  // Decode, small-batch kernel: 1 = a chunk's tiles interleave (chunk c takes tiles c, c + C,
  // ...; decode_small_kernel.cuh), so each warp's first block ids load with the length instead
  // of after it when the length guess is wrong (always, in the engine's graphs: the guess is the
  // table's width); 0 = contiguous ranges. Off until it has run on a GPU (written in session
  // 12). Env KVATTN_DECODE_SMALL_INTERLEAVE.
  int decode_small_interleave = 0;
  // Decode, small-batch kernel: a sequence with fewer than C x warps x this many tiles of 16
  // keys uses only as many of its C chunks as give each warp this many (at least one chunk);
  // the CTAs of the other chunks exit at once and the merger waits for fewer pieces (none at
  // one chunk). C is fixed per launch (a CUDA graph's plan guesses the table's width), so short
  // contexts in the engine's graphs otherwise pay the whole merge of C mostly empty pieces.
  // 0 = every chunk always (before session 16). Contiguous chunks only (not with interleave).
  // 1 since session 16 (H200, same process, a table of 4096 keys: 1x130 16/8 d128 13.98 ->
  // 11.01 us, 1x130 9/3 d64 15.62 -> 10.05; 1x600, 1x2048, 1x8192 within +-0.3 us; random
  // Qwen3-0.6B single stream 902.5 / 908.6 -> 935.5 / 936.5 tok/s; 2 and 4 lost at 600-2048
  // keys). Env KVATTN_DECODE_SMALL_MIN_TILES.
  int decode_small_min_tiles = 1;
  // Decode, small-batch kernel over 16-bit caches at head_dim 64: only for batches whose K and
  // V at their longest length (the plan's bound) are at most this many MiB; larger ones take
  // the stream kernel, which streams faster there past ~78 MB of real K/V (decode_attention.cu,
  // small_choice; H200, session 21: 64 cuts 8x32768 9/3 d64 74.6 -> 62.0 us). 0 = no bound, the
  // default: an engine's graphs plan with the table's width, not the lengths, and there the
  // bound costs short contexts more (16x512 9/3 in a table of 8192 keys 13.9 -> 16.0 us) than
  // it gains on long ones (16x8192: 42.9 -> 40.5). Env KVATTN_DECODE_SMALL_D64_MAX_MB.
  int decode_small_d64_max_mb = 0;
  // Decode, small-batch kernel: the fewest chunks a unit (SMs x CTAs an SM / units) for which
  // the batch takes the small kernel instead of the stream kernel. 4 = the rule since session 3;
  // 1 = also one CTA a unit without a merge whenever the units fit one wave (8 warps, else 4):
  // session 21's map found it 15-32% faster on short contexts at moderate batch (16x512 16/8
  // in a table of 8192 keys 17.1 vs 25.2 us) and 14-35% slower on long d64 batches, so 4 stays
  // (decode_small_one_wave is the d128-only form).
  // Env KVATTN_DECODE_SMALL_MIN_CHUNKS.
  int decode_small_min_chunks = 4;
  // Decode, small-batch kernel at head_dim 128 over 16-bit caches: 1 = a batch that gets fewer
  // than decode_small_min_chunks chunks at both warp counts but whose units fit one wave at one
  // chunk (8 warps, else 4) takes one CTA a unit, no merge, instead of the stream kernel. The
  // configurations it picks ran as decode_small_min_chunks = 1 in session 21 (call 6, short
  // contexts in tables of 8192 keys: 16x512 16/8 25.0 -> 17.1 us, 32x1000 16/8 51.3 -> 38.8;
  // 64x300 16/8 unchanged) without the long-d64 losses (head_dim 64 is left out); 0 (default)
  // until this form has run. Env KVATTN_DECODE_SMALL_ONE_WAVE.
  int decode_small_one_wave = 0;
  // Decode at head_dim 128 over 16-bit caches, for plans whose lengths are uniform
  // (DecodePlan::uniform_lengths: flash-attn's int cache_seqlens, plan_decode's flag): 1 = one
  // small-kernel CTA of 4 warps per (sequence, unit), no merge, where decode_uniform_one_chunk
  // (decode_params.h, with the measurements) says so; 0 = the stream kernel as without the
  // promise. Env KVATTN_DECODE_UNIFORM_ONE_CHUNK.
  int decode_uniform_one_chunk = 1;
  // Decode's copy issue (CopyIssue), -1 = by measurement (default), 0 = off, 1 = on wherever
  // it can serve. The lean issue (issue_tile_lean: each key's row offset computed once by its
  // lane and shuffled to the copies, ~10-15 instructions a copy instead of ~55-70; the plain
  // kernels over 16-byte aligned caches): by default everywhere but the split / stream kernel
  // over 16-bit caches at the 128 tile. The TMA issue (decode_tma.cuh: one lane's tensor-map
  // loads a tile, an mbarrier per stage; sm_90a, pages of a multiple of 16 keys, 16-bit caches
  // at 64-256 and fp8 at 128; takes precedence over the lean one): by default for fp8 caches at
  // 128 only. H200, session 29, one process, rows flushed where < 4x L2, else not; TMA / lean
  // against the cp.async issue: fp8 d128 TMA 1.02-1.06 on five shapes (lean 1.00-1.02); 16-bit
  // d128 TMA 0.90-0.96, lean 0.98-0.99 on the split / stream kernel; d64 lean 1.01-1.13 (fp8
  // 1.05-1.08), TMA 0.96-1.13; d256 lean 1.03-1.04, TMA 0.95. The small kernel's short contexts:
  // the engine's single stream (Qwen3-0.6B, d128) +1.3-2.1% with lean, 1,012-1,023 against
  // 997-1,000 tok/s (its one-tile bench rows move +-5-10% between identical runs).
  // docs/perf/NOTES.md "Session 29". Env KVATTN_DECODE_LEAN_ISSUE, KVATTN_DECODE_TMA.
  int decode_lean_issue = -1;
  int decode_tma = -1;
  // Decode's split kernel over float8_e4m3 caches at head_dim 64: 1 = the CTA copies a tile's
  // rows of all its KV heads together, consecutive threads on consecutive cache bytes
  // (decode_cta_sweep.cuh; where every warp of the CTA has a unit), instead of each warp its
  // head's strided 64-byte rows. 1 (default since session 33; H100, one bench process: 256 x
  // 1024 8/8 138.2 -> 124.5 us, 64 x 4096 32/8 d64 141.7 -> 124.7, the 9/3 shapes within 1%;
  // suite, memcheck and racecheck passed); 0: the per-warp issue. Env KVATTN_DECODE_CTA_SWEEP.
  int decode_cta_sweep = 1;
  // Decode's TMA form: 1 = each tile's issue also asks L2 for the next tile of the warp
  // (cp.async.bulk.prefetch.tensor), a deeper look-ahead than the shared-memory stages hold.
  // 0 (default): it lost 13-27% on every bandwidth-bound shape (H200, session 29: 64x4096 32/8
  // d128 0.76 of the TMA form without it; the L2 hints of sessions 17-19 lost 3-7% too). Env
  // KVATTN_DECODE_TMA_PREFETCH.
  int decode_tma_prefetch = 0;
  // Decode over float8_e4m3 caches: 1 = V (and K, for f16 queries) converted by the hardware
  // instruction (cvt.rn.f16x2.e4m3x2) and P V run in f16 (decode_fp8.cuh), 0 = the integer
  // conversion into the query type. Session 15's ncu: the fp8 decode is near issue bound
  // (31% no-eligible cycles, not-selected and math-pipe-throttle stalls), and the hardware form
  // needs ~half the instructions a V tile. 1 since session 15 (H200, same process: 64x4096 d128
  // 177.2 -> 163.7 us, 8x32768 176-186 -> 161.7, 96x4096 d64 +4-5%, nothing slower).
  // Env KVATTN_DECODE_FP8_HW_CVT.
  int decode_fp8_hw_cvt = 1;
  // Decode over float8_e4m3 caches, bf16 queries, head_dim 64 and 128: 1 = each warp
  // rewrites its Q in f16 (scaled by a power of two so that nothing overflows; the scale folds
  // into the softmax scale: fp8_q_to_f16) so that K too takes the hardware conversion and
  // S = Q K^T runs in f16 (the other half of the conversions; f16 queries do this with
  // decode_fp8_hw_cvt alone). Head_dim 64 since session 40 (with the CTA sweep's copy diet:
  // H100, fp8 d64 -2.4 to -5%; the lone 8192-key d64 sequence 15.2-15.5 us against 15.9-16.0
  // with the queries kept in bf16, same binary). 1 since session 16 (H200, same process: 64x4096 32/8 165.2 us vs 167.5-180.0,
  // 8x32768 162.8 vs 168.3-170.3, 256x1024 16/8 165.4 vs 165.1-167.7, 4x8192 -1.5%; outputs
  // equal to the bf16-Q form on the bench's data: bf16 values convert to f16 exactly after
  // the power-of-two prescale unless they are below ~2^-28 of the warp's largest |q|, and the
  // products are exact in fp32 either way).
  // Env KVATTN_DECODE_FP8_Q_F16.
  int decode_fp8_q_f16 = 1;
  // Decode: 1 = every CTA consents to the dependent launch (griddepcontrol.launch_dependents)
  // right after its grid-dependency wait, so a successor launched with PDL (the engine's
  // o_proj GEMV) is scheduled while the attention runs and fetches its weights meanwhile; it
  // still waits for the attention's completion before reading its output. 0 = no consent (the
  // successor starts at completion). 0: H200, session 17, random Qwen3-0.6B single stream,
  // alternating in one call: 1 = 919.4 / 935.6 / 928.9 tok/s, 0 = 959.6 / 959.6 / 969.4 (-3.5%;
  // the GEMV's one-wave grid placed beside the attention's CTAs is the likely cost, not timed).
  // Env KVATTN_DECODE_PDL_TRIGGER.
  int decode_pdl_trigger = 0;
  // Decode, stream mode (split kernel + merge kernel): 1 = the merge kernel is launched with
  // PDL (sm_90+) and every split CTA consents to it right after its own grid-dependency wait,
  // so the merge's launch and CTA scheduling overlap the split kernel's tail instead of
  // following its drain; the merge computes each row's meta (first slot, pieces) from the
  // lengths meanwhile (session 39: -0.4 to -1.6% on the H100) and waits (griddepcontrol.wait)
  // for the split kernel's completion before it reads the pieces. Outputs bit-identical either
  // way. Merging before the split kernel's completion was measured slower in three forms and
  // removed: a split warp waiting for the other pieces (sessions 21, 31), the last arriver
  // merging (session 21), and a merge grid polling tagged pieces while the split kernel runs
  // (session 39, H100: bf16 +0.5-1.2% at the d64 / d128 acceptance shapes, fp8 +1-15%;
  // docs/notes/decode-next.md).
  // Env KVATTN_DECODE_MERGE_PDL.
  int decode_merge_pdl = 1;
  // Decode, stream mode: ranges per resident CTA. 1 (default): one wave of CTAs, each one
  // range of the batch's tiles (stream-K). W > 1: W waves of ranges W times shorter, so that
  // the hardware's block scheduler hands the later ranges to whichever SM frees first (a
  // dynamic balance between SMs that read at different rates, for more pieces to merge and a
  // pipeline ramp a range). Measured slower everywhere (H100, session 36, one bench process:
  // 64x4096 32/8 d128 375.5 -> 387.4 / 396.6 us at 2 / 4 waves, 148 ragged rows of [100, 2048] keys 249.5 -> 256.0 / 261.5): each range pays a CTA
  // start and more pieces to merge, and a few ranges an SM are too coarse to balance the SMs'
  // rates (docs/notes/decode-next.md "Session 36": the dynamic split that would). 1 stays.
  // Env KVATTN_DECODE_STREAM_WAVES.
  int decode_stream_waves = 1;
  // Decode, stream mode: the dynamic split (decode_stream_ranges.cuh). 1: the resident CTAs
  // take equal ranges of 3/4 of the batch's tiles, then claim ranges of decreasing size of the
  // last quarter as they finish (a counter a slice in the workspace), so that SMs that stream
  // faster take more. 0 (default): one equal range a CTA. Plain kernels only (not the extended
  // ones: window, softcap, ALiBi, leftpad); above
  // decode_stream_waves. Measured slower on every shape (H100, session 37, three forms, one
  // bench process each; the last: 64x4096 32/8 d128 367.9 -> 390.2 us, engine batches of 64 /
  // 148 / 256 rows of [100, 2048] keys 118.9 -> 137.4, 246.2 -> 259.2, 409.1 -> 422.1,
  // nano-vllm -3.7%): it ends the CTAs together, but the early-ending SMs of the static split
  // did not leave DRAM idle, and each claimed range costs a pipeline refill, a Q load and a
  // piece to merge (docs/notes/decode-next.md "Session 37"). 0 stays. Takes effect only in a
  // build with -DKVATTN_DECODE_DYNAMIC_SPLIT_BUILD=ON (decode_params.h: its code cost the
  // default kernels registers and spills); otherwise ignored. Env KVATTN_DECODE_DYNAMIC_SPLIT.
  int decode_dynamic_split = 0;
  // Diagnostics only (wrong results): skip the stream kernel's merge launch, to time the split
  // kernel alone. Set by the benchmark, never from the environment.
  int decode_debug_no_merge = 0;
  // float8_e4m3 caches in the forms written in session 30: decode at head_dim 256 (the swapped
  // tile over fp8 codes) and the paged prefill with window, softcap, ALiBi or head_dim 80 / 96
  // / 256 (the extended sm_80 kernel over fp8 codes). 1 (default since session 31: the decode
  // and prefill suites, memcheck and racecheck passed on the H200, and fp8 d256 decodes 64x4096
  // 16/8 in 279.5 us against 487.3 for bf16); 0: refused by name. Env KVATTN_FP8_EXTENDED_FORMS.
  int fp8_extended_forms = 1;
  // float8_e4m3 caches: decode at head_dim 80 / 96 on the padded 128 tiles (session 32). 1
  // (default since session 33: the fp8 decode sweeps over those dims, memcheck and racecheck
  // passed on the H100); 0: refused by name. Needs fp8_extended_forms too. Env
  // KVATTN_FP8_PADDED_DECODE.
  int fp8_padded_decode = 1;
  // store_kv launch, a warp per (token, part): 1 = CTAs of 256 threads, 0 or 2 = CTAs of 128
  // threads (the default). Env KVATTN_STORE_KV_VARIANT.
  int store_kv_variant = 0;
  // Diagnostics only: when set, the small-batch decode kernel writes kDecodeProbeSlots phase
  // stamps per CTA here, the split kernel its CTAs' entry and warps' end times
  // (decode_params.h); room for every CTA of the grid. Set by the benchmark, never from the
  // environment.
  unsigned long long* decode_probe = nullptr;
};

CudaTuning& cuda_tuning();

}  // namespace kvattn::cuda
