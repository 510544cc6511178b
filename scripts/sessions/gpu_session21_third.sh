#!/usr/bin/env bash
# Session 21, call 3: the stream kernel's fewest tiles a range (decode_stream_min_tiles, "rt" rows of the map)
# bounded at head_dim 64 (16-bit caches: batches of at most 64 MiB of K/V, decode_small_d64_max_mb):
#   run: bash scripts/sessions/gpu_session21_third.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s21c
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s21c
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite "$B/kernels_decode_gpu_test"
KVATTN_GPU_TEST_QUICK=1 run_logged memcheck compute-sanitizer --tool memcheck "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.ProgrammaticLaunchAfterAWriter:DecodeGpu.CudaGraphCaptureAndReplay'
room 400 "small map" && timeout 200 "$B/gpu_decode_bench" --only small > "$OUT/small_map.log" 2>&1
echo "small map rc=$?"
room 420 "decode quick" && timeout 170 "$B/gpu_decode_bench" --only decode --quick > "$OUT/decode_quick.log" 2>&1
echo "decode quick rc=$?"
grep '"decode default"' "$OUT/decode_quick.log" | grep -E "no flush" |
  sed -E 's/"bytes.*"note": "(splits [0-9]+).*(no flush).*/\1/' | head -n 14
echo "end ${SECONDS}s"
