#!/usr/bin/env bash
# The Hopper prefill in the engine and under the sanitizers, one call on the GPU machine:
# builds the prefill GPU test and the kvattn command line, runs compute-sanitizer memcheck and
# racecheck on the quick prefill lists (Hopper path, then the sm_80 path under memcheck), makes
# a random Qwen3-0.6B-shaped checkpoint, and times `kvattn bench`'s time to first token for a
# 4096-token prompt with the sm_80 prefill (KVATTN_PREFILL_SM90=0) and the Hopper one,
# alternating, 3 rounds each.   run: bash scripts/gpu_prefill_engine.sh   (carry .deps)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

step build
kvattn_gpu_build OFF kernels_prefill_gpu_test kvattn_cli

t=build-gpu/tests/kernels/kernels_prefill_gpu_test
for tool in memcheck racecheck; do
  step "$tool (quick, Hopper path)"
  KVATTN_GPU_TEST_QUICK=1 timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$t" \
    >"$OUT/${tool}.log" 2>&1
  echo "$tool rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/${tool}.log" | tr '\n' ' ') $(tail -n 1 "$OUT/${tool}.log")"
done
step "memcheck (quick, sm_80 path)"
KVATTN_PREFILL_SM90=0 KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool memcheck \
  --error-exitcode 9 "$t" >"$OUT/memcheck_sm80.log" 2>&1
echo "memcheck sm80 rc=$? $(tail -n 1 "$OUT/memcheck_sm80.log")"

step "checkpoint"
PYTHONUNBUFFERED=1 timeout 300 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 2
step "engine: time to first token, 4096-token prompt"
for round in 1 2 3; do
  for sm90 in 0 1; do
    KVATTN_PREFILL_SM90=$sm90 timeout 300 build-gpu/kvattn bench --model /tmp/q06 --device cuda \
      --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
      --single-input 128 --single-output 32 --ttft-input 4096 \
      --json "$OUT/engine_sm90_${sm90}_r${round}.json" >"$OUT/engine_sm90_${sm90}_r${round}.log" 2>&1
    echo "round $round KVATTN_PREFILL_SM90=$sm90 rc=$?: $(grep 'time to first token' "$OUT/engine_sm90_${sm90}_r${round}.log")"
  done
done
