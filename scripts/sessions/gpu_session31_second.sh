#!/usr/bin/env bash
# Written in session 30 without a device: stream mode's fused merge (decode_fused_merge /
# KVATTN_DECODE_FUSED_MERGE, off by default; decode_split_kernel.cuh, "fused merge"): the warp
# of each sequence's last piece waits for the other pieces' tags and merges them at the end of
# its range, so no merge kernel runs. The merge kernel took 5.8-6.0 us of 121 at 96x4096 9/3 d64
# on the H100 (session 30: ncu, and "diag nomerge" 115.1 against 121.1).
#   1. the decode suite (quick) with the fused merge on everywhere (the env knob; its
#      "fused merge" variants are in the suite's variant sweep too), then memcheck over the
#      sweeps and the CUDA-graph replay test (the tags chain from replay to replay);
#   2. the bench's stream-mode rows, default against "fused merge" and "diag nomerge" (the merge
#      priced from both sides), one process, twice.
# If 1 passes and 2 gains: decode_fused_merge = 1 by default, and the same-run peers.
#   run: bash scripts/sessions/gpu_session31_second.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s31a
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s31a
trap pack_out EXIT
nvidia-smi --query-gpu=name --format=csv,noheader
KVATTN_DECODE_FUSED_MERGE=1 KVATTN_GPU_TEST_QUICK=1 run_logged fused_suite "$B/kernels_decode_gpu_test"
sweeps='DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpu.ModerateBatchesAcrossKernelChoices:DecodeGpu.Fp8CacheSweepAgainstReferenceOnStoredBytes:DecodeGpu.CudaGraphCaptureAndReplay:DecodeGpu.BadIndicesAreCaughtByTheFaultWord'
room 200 "memcheck" && KVATTN_DECODE_FUSED_MERGE=1 KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_fused \
  compute-sanitizer --tool memcheck --error-exitcode 9 "$B/kernels_decode_gpu_test" --gtest_filter="$sweeps"
room 260 "cascade" && KVATTN_DECODE_FUSED_MERGE=1 KVATTN_GPU_TEST_QUICK=1 run_logged cascade_fused \
  "$B/engine_cascade_decode_gpu_test"
for r in 1 2; do
  room 420 "bench r$r" || break
  timeout 120 "$B/gpu_decode_bench" --only decode --quick --variants 'fused merge,diag nomerge' \
    >"$OUT/fused_r$r.log" 2>&1
  echo "bench r$r rc=$?"
  grep -E '"(decode default|decode fused merge|diag nomerge)"' "$OUT/fused_r$r.log" |
    grep -E 'no flush|flush: read' |
    sed -E 's/.*"op": "([^"]*)", "shape": "([^"]*)", "us": ([0-9.]+).*"frac_copy": ([0-9.]+).*rel_l2 vs default ([^,]*), ([^"]*)".*/\2 | \1 | \3 us | \4 | \5 | \6/'
done
room 480 "fp8 bench" && {
  timeout 60 "$B/gpu_decode_bench" --only fp8 --reps 30 --variants 'fused merge' >"$OUT/fused_fp8.log" 2>&1
  echo "fp8 rc=$?"; grep -v '^{' "$OUT/fused_fp8.log" | grep -E "^decode (default|fused)" | head -n 24
}
echo "end ${SECONDS}s"
