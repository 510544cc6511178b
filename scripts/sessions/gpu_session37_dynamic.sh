#!/usr/bin/env bash
# Session 37, calls 1 and 2: the dynamic split of the stream decode kernel (decode_dynamic_split,
# decode_stream_ranges.cuh), first run. Correctness first (its tests, then the decode suite,
# then racecheck and memcheck of its graph replay), then its balance (gpu_decode_probe --only
# split: CTA end times, static then dynamic rows), its speed beside the static split in one
# bench process (uniform d128 and the engine's ragged batches, bf16 and fp8), the decode sweep's
# shapes, and the engine (nano-vllm's workload) with KVATTN_DECODE_DYNAMIC_SPLIT 0 / 1.
#   run: bash scripts/sessions/gpu_session37_dynamic.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s37 (kvattn, gpu_decode_probe, gpu_decode_bench,
#          kernels_decode_gpu_test; debs/); call 2 carried build-carry-s37c
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s37}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged dyn_tests env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.DynamicSplit*:DecodeGpu.CudaGraphCaptureAndReplay'
timeout 150 "$B/gpu_decode_probe" --only split --reps 10 > "$OUT/probe_split.txt" 2>&1
echo "probe rc=$?"; grep -v '^{' "$OUT/probe_split.txt" | grep -E "^##|flush"
bench() {  # LABEL ARGS...
  local label=$1; shift
  timeout 150 "$B/gpu_decode_bench" "$@" > "$OUT/bench_$label.txt" 2>&1
  echo "bench $label rc=$?"
  grep -o '"op": "[^"]*", "shape": "[^"]*", "us": [0-9.]*' "$OUT/bench_$label.txt" | head -60
  grep -A40 '^SUMMARY' "$OUT/bench_$label.txt" | head -40
}
room 260 "bench d128" && bench d128 --only d128 --variants 'dynamic,swap h4 s3,swap h4 s3 dynamic'
room 300 "bench engine" && bench engine --only engine --variants 'dynamic'
room 330 "decode test" && run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
room 400 "sanitizers" && both_sanitizers dyn "$B/kernels_decode_gpu_test" 'DecodeGpu.DynamicSplitGraphReplay'
random_qwen3_06b
nano() {  # LABEL ENV=VALUE...
  local label=$1; shift
  env "$@" timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda --no-compare \
    --single-input 16 --single-output 8 --ttft-input 64 > "$OUT/nano_$label.log" 2>&1
  echo "nano $label rc=$?: $(tr '\r' '\n' < "$OUT/nano_$label.log" | grep -E "Throughput|decode K/V|rror" | tr '\n' ' ')"
}
for round in 1 2; do
  room 480 "nano-vllm" && nano "static$round" KVATTN_DECODE_DYNAMIC_SPLIT=0
  room 500 "nano-vllm" && nano "dynamic$round" KVATTN_DECODE_DYNAMIC_SPLIT=1
done
room 500 "bench decode" && bench decode --only decode --quick --variants 'dynamic'
echo "end ${SECONDS}s"
