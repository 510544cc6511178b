#!/usr/bin/env bash
# Session 23, call 1 (written in session 22, after its device time): the window / softcap /
# ALiBi kernels' tile handover (CudaTuning::prefill_sm90_mods_handover, off): its test and the
# whole prefill suite, racecheck and memcheck on the handover tests, then the feature shapes'
# bench rows (default = no handover, mods_handover = where key loops are short, mods_handover1
# = always), two rounds. Make mode 2 the default if it wins on the windowed / softcapped
# short-row shapes and loses nowhere.
# Build first (a fresh checkout has no build dirs): cmake -S . -B build-gpu -G Ninja
#   -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a -DKVATTN_BENCH=ON; cmake --build build-gpu
#   --target kernels_prefill_gpu_test gpu_prefill_bench; bash scripts/check_build_deps.sh
#   build-gpu; pack both stripped into build-carry-s23a/bins.tar.xz with debs/ (libxxhash0
#   libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0 libgomp1 libpcre2-8-0
#   libutf8proc2 libcpp-httplib0.11 libbrotli1 libssl3: scripts/device_deps.sh fetches most
#   into .deps/private; apt-get download the rest).
#   run: bash scripts/sessions/gpu_session23_first.sh > $OUT/summary.txt 2>&1; tail -n 50 $OUT/summary.txt
#   carry: build-carry-s23a
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s23a
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged prefill_suite_full "$T"
for tool in racecheck memcheck; do
  KVATTN_GPU_TEST_QUICK=1 run_logged "${tool}_handover" compute-sanitizer --tool $tool \
    --error-exitcode 9 "$T" \
    --gtest_filter='PrefillGpuFeatures.TileHandover:PrefillGpu.TileHandoverOnAndOff'
done
for round in 1 2; do
  room 450 "features bench round $round" || break
  timeout 150 "$B/gpu_prefill_bench" --features --reps 10 >"$OUT/features_r$round.log" 2>&1
  echo "features bench r$round rc=$?"
  grep -v '^{' "$OUT/features_r$round.log" | grep -E "ceiling| default | mods_handover" | head -n 40
done
echo "end ${SECONDS}s"
