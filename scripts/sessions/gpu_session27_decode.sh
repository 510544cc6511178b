#!/usr/bin/env bash
# Session 27, call 2: the decode's lean copy issue (issue_tile: each key's row offset computed
# once by its lane and shuffled to the copies; page_of's shift for power-of-two pages). Call 1's
# ncu put over half of the d64 tile's ~520 instructions in the copy issue. Build B has it, build
# A (call 1's) not: the decode suite and memcheck on B, then the decode bench's quick rows and
# SmolLM2's shape with A and B alternating, and the engine (nano-vllm's workload and the single
# stream, random Qwen3-0.6B) with A and B.
#   run: bash scripts/sessions/gpu_session27_decode.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s27a (call 1's), build-carry-s27b (kvattn, gpu_decode_bench,
#          gpu_prefill_bench, kernels_decode_gpu_test, kernels_prefill_gpu_test,
#          engine_cascade_decode_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s27b
BA=/tmp/binA
carried_bins build-carry-s27a "$BA"
ln -sf "$BA/kvattn" "$B/kvattn_before"
trap pack_out EXIT
run_logged decode_suite "$B/kernels_decode_gpu_test"
KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_decode compute-sanitizer --tool memcheck \
  "$B/kernels_decode_gpu_test" --gtest_filter='DecodeGpu.ModerateBatchesAcrossKernelChoices:DecodeGpu.BadBlockIds*:DecodeGpuFp8.*'
run_logged cascade "$B/engine_cascade_decode_gpu_test"
for round in 1 2; do
  for build in A B; do
    room 330 "decode $build r$round" || break 2
    bin="$B/gpu_decode_bench"; [ "$build" = A ] && bin="$BA/gpu_decode_bench"
    timeout 90 "$bin" --only decode --quick >"$OUT/decode_${build}_r$round.log" 2>&1
    echo "decode $build r$round rc=$?"
    grep -E '"decode default"' "$OUT/decode_${build}_r$round.log" |
      sed -E 's/.*"shape": "([^"]*)", "us": ([0-9.]+).*"TBps": ([0-9.]+).*(no flush|memset flush|read flush).*/\1 | \2 us | \3 TB\/s | \4/' |
      head -n 40
  done
done
random_qwen3_06b
for build in A B; do
  room 480 "engine $build" || break
  bin=kvattn; [ "$build" = A ] && bin=kvattn_before
  timeout 60 "$B/$bin" bench --model /tmp/q06 --device cuda \
    --single-input 16 --single-output 8 --ttft-input 16 >"$OUT/nano_$build.log" 2>&1
  echo "nano-vllm $build rc=$?: $(tr '\r' '\n' < "$OUT/nano_$build.log" | grep -E "Throughput" | head -n 1)"
  single_stream "$build" "$bin" 128
done
echo "end ${SECONDS}s"
