#!/usr/bin/env bash
# Session 20, call 4: the decode merge kernel launched with PDL after the split kernel (which
# consents right after its own wait; KVATTN_DECODE_MERGE_PDL, on): the decode suite, memcheck
# of the stream + merge paths, the engine's PDL tests, then the decode bench and nano-vllm's
# workload with it off and on (one binary).
#   run: bash scripts/sessions/gpu_session20_fourth.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s20d
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s20d
random_qwen3_06b
trap pack_out EXIT
t() {  # $1: label, then the command
  local name=$1; shift
  timeout 240 "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$?: $(grep -E "PASSED|FAILED|ERROR SUMMARY" "$OUT/$name.log" | head -n 4 | tr '\n' ' ')"
  grep -m6 -E "Failure|Which is|error:" "$OUT/$name.log"
}
KVATTN_GPU_TEST_QUICK=1 t decode_suite "$B/kernels_decode_gpu_test"
KVATTN_GPU_TEST_QUICK=1 t memcheck_merge compute-sanitizer --tool memcheck "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.ProgrammaticLaunchAfterAWriter:DecodeGpu.CudaGraphCaptureAndReplay:DecodeGpuVariants.Sweep'
t engine_pdl "$B/engine_pdl_gpu_test"
room() { [ $SECONDS -lt "$1" ] || { echo "skipped ($2): ${SECONDS}s gone"; return 1; }; }
for mp in 0 1; do
  room 300 "nano-vllm mp$mp" || break
  KVATTN_DECODE_MERGE_PDL=$mp timeout 90 "$B/kvattn" bench --model /tmp/q06 --device cuda \
    --single-input 16 --single-output 8 >"$OUT/nano_mp$mp.log" 2>&1
  echo "nano-vllm mp$mp rc=$?: $(tr '\r' '\n' < "$OUT/nano_mp$mp.log" | grep -E "Throughput" | head -n 1)"
done
round=0
for mp in 0 1 0 1; do
  round=$((round + 1))
  room 470 "decode bench mp$mp" || break
  log="$OUT/decode_r${round}_mp$mp.log"
  KVATTN_DECODE_MERGE_PDL=$mp timeout $((580 - SECONDS)) "$B/gpu_decode_bench" --only decode --quick \
    > "$log" 2>&1
  echo "decode round $round mp$mp rc=$?"
  grep '"decode default"' "$log" | grep -E "no flush|read" |
    sed -E 's/"bytes.*"note": "(splits [0-9]+).*(no flush|L2 flush: read).*/\1 \2/' | head -n 24
done
echo "end ${SECONDS}s"
