#!/usr/bin/env bash
# Written in session 27 (its device time ended before this ran); the first call of the next
# session. The decode's lean copy issue (decode_lean_issue / KVATTN_DECODE_LEAN_ISSUE,
# issue_tile_lean in decode_warp_tile.cuh: each key's row offset computed once by its lane and
# shuffled to its copies; ~10 instructions a copy instead of ~55-70). Session 27's ncu of
# 96x4096 9/3 d64 counted 521 instructions a tile, over half in the copy issue; the SASS of the
# d128 kernels has ~70 a copy, 8 copies a tile.
#   1. the decode suite in full (DecodeGpuVariants runs three lean variants over the sweeps,
#      which now include pages 12 and 48 and K / V block strides that differ; the bad-index test
#      runs both forms), memcheck on the lean variants;
#   2. the decode bench's quick rows: `lean`, `lean swap`, `lean noswap` beside `default` in
#      one process (rel_l2 vs default must read 0 for lean: the same copies), twice;
#   3. the engine with KVATTN_DECODE_LEAN_ISSUE=0 / 1 alternating, one binary: nano-vllm's
#      workload and the single stream (random Qwen3-0.6B).
# If all holds and lean wins: decode_lean_issue = 1 in tuning.h, then the same-run peers.
#   run: bash scripts/sessions/gpu_session28_first.sh > $OUT/summary.txt 2>&1; tail -n 100 $OUT/summary.txt
#   carry: build-carry-s28a (kvattn, gpu_decode_bench, kernels_decode_gpu_test,
#          engine_cascade_decode_gpu_test; debs/), packed as in docs/perf/NOTES.md session 27
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s28a
trap pack_out EXIT
run_logged decode_suite "$B/kernels_decode_gpu_test"
KVATTN_DECODE_LEAN_ISSUE=1 KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_lean \
  compute-sanitizer --tool memcheck "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpu.ModerateBatchesAcrossKernelChoices:DecodeGpu.BadIndicesAreCaughtByTheFaultWord:DecodeGpu.Fp8CacheSweepAgainstReferenceOnStoredBytes'
KVATTN_DECODE_LEAN_ISSUE=1 run_logged cascade_lean "$B/engine_cascade_decode_gpu_test"
for round in 1 2; do
  room 330 "decode r$round" || break
  timeout 120 "$B/gpu_decode_bench" --only decode --quick >"$OUT/decode_r$round.log" 2>&1
  echo "decode r$round rc=$?"
  grep -E '"decode (default|lean|lean swap|lean noswap)"' "$OUT/decode_r$round.log" |
    grep -E 'no flush' |
    sed -E 's/.*"op": "decode ([^"]*)", "shape": "([^"]*)", "us": ([0-9.]+).*"TBps": ([0-9.]+).*rel_l2 vs default ([^,]*),.*/\2 | \1 | \3 us | \4 TB\/s | \5/' |
    head -n 80
done
random_qwen3_06b
for round in 1 2; do
  for lean in 0 1; do
    room 520 "engine lean=$lean r$round" || break 2
    KVATTN_DECODE_LEAN_ISSUE=$lean timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda \
      --single-input 16 --single-output 8 --ttft-input 16 >"$OUT/nano_l${lean}_r$round.log" 2>&1
    echo "nano-vllm lean=$lean r$round rc=$?: $(tr '\r' '\n' < "$OUT/nano_l${lean}_r$round.log" | grep -E "Throughput" | head -n 1)"
    KVATTN_DECODE_LEAN_ISSUE=$lean single_stream "l${lean}_r$round" kvattn 128
  done
done
echo "end ${SECONDS}s"
