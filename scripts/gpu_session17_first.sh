#!/usr/bin/env bash
# Next session, call 1 (issues 16, 20, 15): what session 16 wrote after its device time.
#   1. the decode suite, with DecodeGpu.ProgrammaticLaunchAfterAWriter (DecodeArgs::pdl);
#   2. the engine's single stream with the decode attention launched with PDL or not
#      (KVATTN_DECODE_PDL=0/1, alternating; prediction +2-4%);
#   3. racecheck on the tile-handover build after the __syncwarp fix (session 16: 197 hazards).
#   run: bash scripts/gpu_session17_first.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
step build
kvattn_gpu_build OFF kernels_decode_gpu_test kvattn_cli
T=build-gpu/tests/kernels/kernels_decode_gpu_test
step "1. decode suite (PDL test first)"
run_test decode_pdl 120 "$T" --gtest_filter='DecodeGpu.ProgrammaticLaunchAfterAWriter'
run_test decode_all 300 "$T"
step "2. single stream (128 + 256), decode attention with PDL 0 / 1"
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 1
for round in 1 2; do
  for v in 0 1; do
    KVATTN_DECODE_PDL=$v timeout 90 build-gpu/kvattn bench --model /tmp/q06 --device cuda \
      --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
      --single-input 128 --single-output 256 >"/tmp/ss_${v}_r${round}.log" 2>&1
    echo "round $round KVATTN_DECODE_PDL=$v rc=$?: $(grep -i "single" "/tmp/ss_${v}_r${round}.log" | tail -n 1)"
  done
done
step "3. the tile handover under racecheck"
cmake -S . -B build-gpu-pd -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a \
  -DKVATTN_BENCH=OFF -DCMAKE_CUDA_FLAGS=-DKVATTN_PREFILL_SM90_PRODUCER_DECODE=1 \
  >"$OUT/build_pd.log" 2>&1 &&
  cmake --build build-gpu-pd -j "$(nproc)" --target kernels_prefill_gpu_test >>"$OUT/build_pd.log" 2>&1
echo "build rc=$?"
KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 \
  build-gpu-pd/tests/kernels/kernels_prefill_gpu_test \
  --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.PagedProducerWarps' \
  >"$OUT/pd_racecheck.log" 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/pd_racecheck.log" | tail -n 1)"
