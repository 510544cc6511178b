#!/usr/bin/env bash
# Written in sessions 27-28 (no device ran them); the first call of the next session. Two new
# forms of the decode's copy issue, both off by default, both in twin kernels of their own:
# - the lean issue (decode_lean_issue / KVATTN_DECODE_LEAN_ISSUE, issue_tile_lean: each key's
#   row offset computed once by its lane and shuffled to its copies; ~10-15 instructions a copy
#   instead of ~55-70);
# - the TMA issue (decode_tma / KVATTN_DECODE_TMA, decode_tma.cuh: one lane's tensor-map loads
#   a tile, an mbarrier per stage; pages of whole 16-key tiles, 16-bit caches at d64-256, fp8
#   at d128, plain and extended kernels; `tma pf` rows add the next tile's L2 prefetch).
# Session 27's ncu of 96x4096 9/3 d64 counted 521 instructions a tile, ~270 in the copy issue
# and the block-id arithmetic.
#   1. the TMA test (eligible pages, GQA 1-8, q_len 1-5, all three kernels, fp8 at d128, NaN
#      page tails; asserts the TMA form launched), the bad-index test on every form and the
#      extended kernels' pad / window edge tests by copy and by TMA, first (a hang costs
#      240 s, not the call);
#   2. the decode suite, quick cases (DecodeGpuVariants runs lean and TMA variants);
#   3. the decode bench's quick rows (page 16, bf16 and fp8 shapes), `lean*`, `tma*`, `swap`
#      and `noswap` beside `default` in one process (rel_l2 vs default 0 for lean; TMA reads
#      the same bytes too);
#   4. memcheck and racecheck on the TMA form, memcheck on the lean one, the cascade test;
#   5. the engine with each form alternating, one binary: nano-vllm's workload and the single
#      stream (random Qwen3-0.6B); the bench again if time is left.
# Then: the winner on by default (tuning.h), and the same-run peers.
#   run: bash scripts/sessions/gpu_session29_first.sh > $OUT/summary.txt 2>&1; tail -n 120 $OUT/summary.txt
#   carry: build-carry-s29a (kvattn, gpu_decode_bench, kernels_decode_gpu_test,
#          engine_cascade_decode_gpu_test, gpu_prefill_bench, kernels_prefill_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s29a
trap pack_out EXIT
run_logged tma_test "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.TmaCopyIssue:DecodeGpu.BadIndicesAreCaughtByTheFaultWord:DecodeGpuFeatures.LeftpadTileEdges:DecodeGpuFeatures.WindowSkipsBlocksBeforeIt'
# A failing TMA form would stop the bench at its first row (the fault word exits it) and could
# hang the engine: without a clean TMA test, the TMA rows and runs are left out.
tma_ok=0
grep -qE '^\[  PASSED  \]' "$OUT/tma_test.log" && ! grep -qE '^\[  FAILED  \]' "$OUT/tma_test.log" &&
  tma_ok=1
[ "$tma_ok" = 1 ] || echo "TMA test not clean: the TMA bench rows, sanitizers and engine runs are left out"
variants='lean,lean swap,lean noswap,swap,noswap'
[ "$tma_ok" = 1 ] && variants="$variants,tma,tma swap,tma noswap,tma pf,tma pf swap"
forms='default lean'
[ "$tma_ok" = 1 ] && forms="$forms tma"
# (The tests that run TMA forms inside, left out too when its own test was not clean.)
suite_filter='-DecodeGpu.TmaCopyIssue'
[ "$tma_ok" = 1 ] || suite_filter="$suite_filter:DecodeGpuVariants.*:DecodeGpuFeatures.Variants:DecodeGpuFeatures.LeftpadTileEdges:DecodeGpuFeatures.WindowSkipsBlocksBeforeIt:DecodeGpu.BadIndicesAreCaughtByTheFaultWord"
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite_quick "$B/kernels_decode_gpu_test" \
  --gtest_filter="$suite_filter"
bench_round() {
  timeout 150 "$B/gpu_decode_bench" --only decode --quick \
    --variants "$variants" \
    >"$OUT/decode_r$1.log" 2>&1
  echo "decode r$1 rc=$?"
  grep -E '"decode (default|lean|lean swap|lean noswap|tma|tma swap|tma noswap|tma pf|tma pf swap|swap|noswap)"' "$OUT/decode_r$1.log" |
    grep -E 'no flush|flush: read' |
    sed -E 's/.*"op": "decode ([^"]*)", "shape": "([^"]*)", "us": ([0-9.]+).*"TBps": ([0-9.]+).*rel_l2 vs default ([^,]*), ([^"]*)".*/\2 | \1 | \3 us | \4 TB\/s | \5 | \6/' |
    head -n 400
}
room 300 "decode r1" && bench_round 1
sweeps='DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpu.ModerateBatchesAcrossKernelChoices:DecodeGpu.BadIndicesAreCaughtByTheFaultWord'
[ "$tma_ok" = 1 ] && room 380 "sanitizers" && KVATTN_DECODE_TMA=1 both_sanitizers tma "$B/kernels_decode_gpu_test" "DecodeGpu.TmaCopyIssue:DecodeGpuFeatures.RandomSweep:$sweeps"
room 420 "memcheck lean" && KVATTN_DECODE_LEAN_ISSUE=1 KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_lean \
  compute-sanitizer --tool memcheck "$B/kernels_decode_gpu_test" --gtest_filter="$sweeps"
[ "$tma_ok" = 1 ] && room 440 "cascade" && KVATTN_DECODE_TMA=1 run_logged cascade_tma "$B/engine_cascade_decode_gpu_test"
random_qwen3_06b
for round in 1 2; do
  for form in $forms; do
    room 540 "engine $form r$round" || break 2
    lean=0; tma=0
    [ "$form" = lean ] && lean=1
    [ "$form" = tma ] && tma=1
    KVATTN_DECODE_LEAN_ISSUE=$lean KVATTN_DECODE_TMA=$tma timeout 60 "$B/kvattn" bench \
      --model /tmp/q06 --device cuda --single-input 16 --single-output 8 --ttft-input 16 \
      >"$OUT/nano_${form}_r$round.log" 2>&1
    echo "nano-vllm $form r$round rc=$?: $(tr '\r' '\n' < "$OUT/nano_${form}_r$round.log" | grep -E "Throughput" | head -n 1)"
    KVATTN_DECODE_LEAN_ISSUE=$lean KVATTN_DECODE_TMA=$tma single_stream "${form}_r$round" kvattn 128
  done
done
room 430 "decode r2" && bench_round 2
echo "end ${SECONDS}s"
