#!/usr/bin/env bash
# Decode and the fp8 engine in one call on the GPU machine: the decode/store/prefill GPU
# suites, the engine's fp8 tests (teacher-forced GPU vs CPU with a split prefill, the LLM
# prefix-hit round trip, and teacher-forced on the random Qwen3-0.6B), `kvattn bench` on
# nano-vllm's workload with a bf16 and an fp8 cache, then Nsight Compute on three decode
# shapes (bf16 d128, bf16 d64, fp8 d128): speed of light, occupancy, warp stalls, issue slots.
#   run: bash scripts/gpu_decode_profile.sh   (carry .deps)   env: NCU=0 skips the profiles
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

step build
kvattn_gpu_build OFF kernels_decode_gpu_test kernels_store_kv_gpu_test kernels_prefill_gpu_test \
  engine_model_gpu_test kvattn_cli

step "kernel GPU suites"
run_test decode 240 build-gpu/tests/kernels/kernels_decode_gpu_test
KVATTN_GPU_TEST_QUICK=1 run_test store_kv 120 build-gpu/tests/kernels/kernels_store_kv_gpu_test
KVATTN_GPU_TEST_QUICK=1 run_test prefill 120 build-gpu/tests/kernels/kernels_prefill_gpu_test

step "checkpoint (random Qwen3-0.6B)"
PYTHONUNBUFFERED=1 timeout 200 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 2

step "engine fp8"
KVATTN_FP8_TEACHER_CHECKPOINT=/tmp/q06 run_test engine_fp8 300 \
  build-gpu/tests/engine/engine_model_gpu_test --gtest_filter='*Fp8*'
grep -E "^\[|argmax agree|split-prefill|round" "$OUT/engine_fp8.log" | grep -v "^\[ *(RUN|OK) " | head -40

step "kvattn bench, nano-vllm workload: bf16 vs fp8 cache"
for dt in bf16 fp8; do
  timeout 200 build-gpu/kvattn bench --model /tmp/q06 \
    --device cuda --kv-cache-dtype "$dt" --json "$OUT/bench_$dt.json" 2>&1 | tr '\r' '\n' |
    grep -E "Throughput|kv cache|KV|tokens|rror" | head -8
done

[ "${NCU:-1}" = 0 ] && exit 0
step "pip install kvattn (sm_90a)"
kvattn_pip_install python3 "$OUT/py_install.log" || { tail -n 30 "$OUT/py_install.log"; exit 1; }
step "ncu: decode kernels"
for c in "64 4096 32 8 128" "96 4096 9 3 64" "64 4096 32 8 128 --fp8"; do
  tag=$(echo "$c" | tr ' ' '_' | tr -d '-')
  (cd /tmp && timeout 150 ncu --clock-control none -k regex:decode_kernel --launch-skip 3 \
    --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    python3 "$OLDPWD/bench/decode_profile_case.py" $c >"$OUT/ncu_$tag.txt" 2>&1)
  echo "--- $c (rc=$?)"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Block Limit|Grid Size|Block Size|Dynamic Shared|L2 Hit|Mem Busy|Max Bandwidth" \
    "$OUT/ncu_$tag.txt" | sed 's/  */ /g' | head -30
  grep -iE "stall|est\. speedup" "$OUT/ncu_$tag.txt" | head -8
done
