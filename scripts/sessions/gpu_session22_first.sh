#!/usr/bin/env bash
# Session 22, call 1 (written in session 21, after its device time): one CTA a unit in one wave
# at head_dim 128 (KVATTN_DECODE_SMALL_ONE_WAVE=1, off): the decode suite with its new
# ModerateBatchesAcrossKernelChoices test and memcheck of it, the map's "small one wave" rows
# (`gpu_decode_bench --only small`), the acceptance shapes with it off and on, then the engine:
# nano-vllm's workload and the single stream off / on alternating. Make it the default if the
# map's d128 rows win (16x512 16/8, 32x1000 16/8 in tables of 8192) and nothing else loses.
# Build first (a fresh checkout has no build dirs): cmake -S . -B build-gpu -G Ninja
#   -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a -DKVATTN_BENCH=ON; cmake --build build-gpu
#   --target kvattn_cli kernels_decode_gpu_test gpu_decode_bench; bash scripts/check_build_deps.sh;
#   pack kvattn, kernels_decode_gpu_test, gpu_decode_bench stripped into build-carry-s22a/bins.tar.xz
#   with debs/ (libxxhash0 libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0 libgomp1
#   libpcre2-8-0 libutf8proc2 libcpp-httplib0.11 libbrotli1 libssl3: scripts/device_deps.sh
#   fetches most into .deps/private; apt-get download the rest).
#   run: bash scripts/sessions/gpu_session22_first.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s22a
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s22a
random_qwen3_06b
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite "$B/kernels_decode_gpu_test"
KVATTN_GPU_TEST_QUICK=1 run_logged memcheck compute-sanitizer --tool memcheck \
  "$B/kernels_decode_gpu_test" --gtest_filter='DecodeGpu.ModerateBatchesAcrossKernelChoices'
room 200 "small map" && timeout 150 "$B/gpu_decode_bench" --only small > "$OUT/small_map.log" 2>&1
echo "small map rc=$?"
round=0
for ow in 0 1 0 1; do
  round=$((round + 1))
  room 420 "engine ow$ow" || break
  KVATTN_DECODE_SMALL_ONE_WAVE=$ow timeout 40 "$B/kvattn" bench --model /tmp/q06 --device cuda \
    --single-input 16 --single-output 8 --ttft-input 16 >"$OUT/nano_r${round}_ow$ow.log" 2>&1
  echo "nano-vllm r$round ow$ow rc=$?: $(tr '\r' '\n' < "$OUT/nano_r${round}_ow$ow.log" | grep -E "Throughput" | head -n 1)"
  KVATTN_DECODE_SMALL_ONE_WAVE=$ow single_stream "r${round}_ow$ow" kvattn
done
for ow in 0 1; do
  room 500 "decode quick ow$ow" || break
  KVATTN_DECODE_SMALL_ONE_WAVE=$ow timeout 80 "$B/gpu_decode_bench" --only decode --quick \
    > "$OUT/decode_ow$ow.log" 2>&1
  echo "decode quick ow$ow rc=$?"
  grep '"decode default"' "$OUT/decode_ow$ow.log" | grep -E "no flush" |
    sed -E 's/"bytes.*"note": "(splits [0-9]+).*(no flush).*/\1/' | head -n 14
done
echo "end ${SECONDS}s"
