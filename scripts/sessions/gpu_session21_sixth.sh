#!/usr/bin/env bash
# Session 21, call 6 (the last ~5 minutes of device time): one CTA a unit without a merge for
# moderate batches (KVATTN_DECODE_SMALL_MIN_CHUNKS=1; off): the decode suite (its "small min
# chunks 1" variant), the map's "small min1" rows, nano-vllm's workload off / on.
#   run: bash scripts/sessions/gpu_session21_sixth.sh > $OUT/summary.txt 2>&1; tail -n 30 $OUT/summary.txt
#   carry: build-carry-s21e
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s21e
random_qwen3_06b
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpuVariants.*:DecodeGpu.CudaGraphCaptureAndReplay'
timeout 100 "$B/gpu_decode_bench" --only small > "$OUT/small_map.log" 2>&1
echo "small map rc=$?"
for mc in 4 1; do
  room 200 "nano-vllm min chunks $mc" || break
  KVATTN_DECODE_SMALL_MIN_CHUNKS=$mc timeout 40 "$B/kvattn" bench --model /tmp/q06 --device cuda \
    --single-input 16 --single-output 8 --ttft-input 16 >"$OUT/nano_mc$mc.log" 2>&1
  echo "nano-vllm min chunks $mc rc=$?: $(tr '\r' '\n' < "$OUT/nano_mc$mc.log" | grep -E "Throughput" | head -n 1)"
done
echo "end ${SECONDS}s"
