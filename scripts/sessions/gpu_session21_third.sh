#!/usr/bin/env bash
# Session 21, call 3: the stream kernel's fewest tiles a range (decode_stream_min_tiles; the map's
# "rt" rows) beside the small kernel's d64 bound of call 2: decode suite, memcheck, map, quick bench.
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
