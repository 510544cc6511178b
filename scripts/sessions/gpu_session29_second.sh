#!/usr/bin/env bash
# Session 29, the build with the copy issue picked by measurement (tuning.h decode_lean_issue /
# decode_tma = -1: TMA for fp8 caches at 128, lean elsewhere but the 16-bit 128 split kernel):
#   1. the TMA and bad-index tests, the pad / window edge tests, the decode suite (quick) on the
#      new default; memcheck and racecheck on the default over the sweeps; the cascade test;
#   2. the decode bench's quick rows: default (the pick) beside `copy` (the cp.async issue, the
#      old default), `lean`, `tma`, and each with 3 stages (d64 defaults to 2), two rounds;
#   3. the engine, two rounds: nano-vllm's workload and the single stream (random Qwen3-0.6B).
#   run: bash scripts/sessions/gpu_session29_second.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s29b (the six binaries of scripts/sessions/gpu_session29_first.sh; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s29b
trap pack_out EXIT
run_logged tma_test "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.TmaCopyIssue:DecodeGpu.BadIndicesAreCaughtByTheFaultWord:DecodeGpuFeatures.LeftpadTileEdges:DecodeGpuFeatures.WindowSkipsBlocksBeforeIt'
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite_quick "$B/kernels_decode_gpu_test" \
  --gtest_filter='-DecodeGpu.TmaCopyIssue'
sweeps='DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpu.ModerateBatchesAcrossKernelChoices:DecodeGpu.BadIndicesAreCaughtByTheFaultWord:DecodeGpuFeatures.RandomSweep'
room 420 "sanitizers" && both_sanitizers default "$B/kernels_decode_gpu_test" "$sweeps"
room 440 "cascade" && run_logged cascade "$B/engine_cascade_decode_gpu_test"
bench_round() {
  timeout 150 "$B/gpu_decode_bench" --only decode --quick --variants 'copy,copy swap,lean,tma,s3,lean s3,tma s3' \
    >"$OUT/decode_r$1.log" 2>&1
  echo "decode r$1 rc=$?"
  grep -E '"decode (default|copy|copy swap|lean|tma|s3|lean s3|tma s3)"' "$OUT/decode_r$1.log" |
    grep -E 'no flush|flush: read' |
    sed -E 's/.*"op": "decode ([^"]*)", "shape": "([^"]*)", "us": ([0-9.]+).*"TBps": ([0-9.]+).*"frac_copy": ([0-9.]+).*rel_l2 vs default ([^,]*), ([^"]*)".*/\2 | \1 | \3 us | \4 TB\/s | \5 | \6 | \7/' |
    head -n 200
}
room 300 "decode r1" && bench_round 1
random_qwen3_06b
for round in 1 2; do
  room 540 "engine r$round" || break
  timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda --single-input 16 \
    --single-output 8 --ttft-input 16 >"$OUT/nano_r$round.log" 2>&1
  echo "nano-vllm r$round rc=$?: $(tr '\r' '\n' < "$OUT/nano_r$round.log" | grep -E "Throughput" | head -n 1)"
  single_stream "r$round" kvattn 128
done
room 430 "decode r2" && bench_round 2
echo "end ${SECONDS}s"
