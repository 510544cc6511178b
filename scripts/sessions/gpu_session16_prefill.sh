#!/usr/bin/env bash
# Next session (issue 15): the producer-side tile decode (Tile::kProducerDecode, written in
# session 15 without device time: prefill_sm90_tile_handover.cuh). First the whole prefill GPU
# suite on a build where every library tile takes it (-DKVATTN_PREFILL_SM90_PRODUCER_DECODE=1,
# build-gpu-pd; timeouts guard against a hang in the new protocol), memcheck and racecheck; then
# the bench's "pdecode" rows beside the default (bit-identical: err_vs_def 0).
# Prediction: +1-4% on short-row shapes (16x1024, 8x2048 d128/d64), nothing on 1x16384.
#   run: bash scripts/sessions/gpu_session16_prefill.sh > $OUT/summary.txt 2>&1; tail -n 50 $OUT/summary.txt
#   carry: .deps (and build-carry, when built here: build-carry-pf/prefill_test_pd from build-gpu-pd
#          and build-carry-pf/gpu_prefill_bench from build-gpu, stripped)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
if [ -x build-carry-pf/prefill_test_pd ] && [ -x build-carry-pf/gpu_prefill_bench ]; then
  P=build-carry-pf/prefill_test_pd B=build-carry-pf/gpu_prefill_bench
else
  P=build-gpu-pd/tests/kernels/kernels_prefill_gpu_test B=build-gpu/bench/gpu_prefill_bench
  step "build (producer decode in every tile)"
  cmake -S . -B build-gpu-pd -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a \
    -DKVATTN_BENCH=OFF -DCMAKE_CUDA_FLAGS=-DKVATTN_PREFILL_SM90_PRODUCER_DECODE=1 \
    >"$OUT/build_pd.log" 2>&1 &&
    cmake --build build-gpu-pd -j "$(nproc)" --target kernels_prefill_gpu_test >>"$OUT/build_pd.log" 2>&1
  echo "build rc=$?"; grep -E "error|C75[0-9]+" "$OUT/build_pd.log" | head -5
  kvattn_gpu_build ON gpu_prefill_bench
fi
step "tests on the handover"
run_test pd_full 240 "$P" --gtest_filter='PrefillGpu.*:PrefillGpuFeatures.*'
for tool in memcheck racecheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.PagedProducerWarps' \
    >"$OUT/pd_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/pd_$tool.log" | tail -n 1)"
done
step "timing: default vs pdecode"
timeout 150 "$B" --reps 20 >"$OUT/prefill_bench.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench.log" | grep -E "shape|default|pdecode|ceiling"
timeout 100 "$B" --d256 --reps 20 >"$OUT/prefill_bench_d256.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_d256.log" | grep -E "default|pdecode"
