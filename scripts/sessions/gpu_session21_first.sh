#!/usr/bin/env bash
# Session 21, call 1 (prepared in session 20; binaries built in session 21 and carried): the decode
# split kernel's merge inside the kernel (KVATTN_DECODE_FUSED_MERGE=1, off by default; written
# after session 20's device time): the decode suite (its fused-merge variants, the graph-replay
# and PDL tests with it), memcheck of those, then the decode bench and nano-vllm's workload
# with it off and on, alternating (one binary). Watch the registers: the fused instantiations
# take 40-60 more a thread than the plain ones (cuobjdump --dump-resource-usage), which may
# cost CTAs per SM (decode-next.md, session 20).
#   run: bash scripts/sessions/gpu_session21_first.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s21a
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s21a
random_qwen3_06b
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite "$B/kernels_decode_gpu_test"
KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_fused compute-sanitizer --tool memcheck "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.ProgrammaticLaunchAfterAWriter:DecodeGpu.CudaGraphCaptureAndReplay'
KVATTN_DECODE_FUSED_MERGE=1 run_logged engine_pdl_fused "$B/engine_pdl_gpu_test"
round=0
for fm in 0 1 0 1; do
  round=$((round + 1))
  room 300 "nano-vllm fm$fm" || break
  log="$OUT/nano_r${round}_fm$fm.log"
  KVATTN_DECODE_FUSED_MERGE=$fm timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda \
    --single-input 16 --single-output 8 --ttft-input 16 >"$log" 2>&1
  echo "nano-vllm round $round fm$fm rc=$?: $(tr '\r' '\n' < "$log" | grep -E "Throughput" | head -n 1)"
done
round=0
for fm in 0 1 0 1; do
  round=$((round + 1))
  room 470 "decode bench fm$fm" || break
  log="$OUT/decode_r${round}_fm$fm.log"
  KVATTN_DECODE_FUSED_MERGE=$fm timeout $((580 - SECONDS)) "$B/gpu_decode_bench" --only decode --quick \
    > "$log" 2>&1
  echo "decode round $round fm$fm rc=$?"
  grep '"decode default"' "$log" | grep -E "no flush" |
    sed -E 's/"bytes.*"note": "(splits [0-9]+).*(no flush).*/\1/' | head -n 14
done
# The small kernel against the stream kernel on few-unit batches of long sequences (added in
# session 21: `gpu_decode_bench --only small`), with the fused merge off and on.
for fm in 0 1; do
  room 540 "small map fm$fm" || break
  KVATTN_DECODE_FUSED_MERGE=$fm timeout $((590 - SECONDS)) "$B/gpu_decode_bench" --only small \
    > "$OUT/small_map_fm$fm.log" 2>&1
  echo "small map fm$fm rc=$?"
done
echo "end ${SECONDS}s"
