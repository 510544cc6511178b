#!/usr/bin/env bash
# Session 34, call 7: the token kernel as the default (KVATTN_TOKEN_KERNEL=0 turns it off): its
# test, single streams off / on and profiles, nano-vllm's workload off / on, memcheck and
# racecheck over the tiny Llama cases, then every engine GPU test with the new default (the
# two that compare bit for bit against the unfused / unfused-GEMV path pin it off).
#   run: bash scripts/sessions/gpu_session34_seventh.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s34h (kvattn and the engine GPU tests that run models: 16 of them; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s34h
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
KVATTN_TOKEN_TEST_MODEL=/tmp/q06 run_logged token_test "$B/engine_token_layers_gpu_test"
grep -E "argmax agree" "$OUT/token_test.log" | awk '{print $NF, $0}' | sort -rn | head -n 3
single() {  # LABEL MODEL [ENV=VALUE...]
  local label=$1 model=$2; shift 2
  env KVATTN_NOTHING=0 "$@" timeout 60 "$B/kvattn" bench --model "$model" --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input 128 --single-output 256 >"$OUT/ss_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/ss_$label.log" | grep -E "single stream|first token|rror" | tr '\n' ' ')"
}
for m in smol q06; do
  single "${m}_prof" /tmp/$m KVATTN_TOKEN_PROFILE=1
  grep -A21 "token kernel profile" "$OUT/ss_${m}_prof.log" | tr -s ' ' | tr '\n' ';'
  echo
done
for round in 1 2; do
  for m in smol q06; do
    single "${m}_off_$round" /tmp/$m KVATTN_TOKEN_KERNEL=0
    single "${m}_on_$round" /tmp/$m
  done
done
for mode in 0 1; do
  env KVATTN_TOKEN_KERNEL=$mode timeout 90 "$B/kvattn" bench --model /tmp/q06 --device cuda \
    --no-compare >"$OUT/nano_$mode.log" 2>&1
  echo "nano-vllm token=$mode rc=$?: $(tr '\r' '\n' < "$OUT/nano_$mode.log" | grep -E "Throughput|leak|rror" | tr '\n' ' ')"
done
KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$B/engine_token_layers_gpu_test" --gtest_filter='Tiny/TokenLayers.*/0' >"$OUT/memcheck_token.log" 2>&1
echo "memcheck token rc=$? $(grep -E "ERROR SUMMARY" "$OUT/memcheck_token.log" | tail -n 1)"
for t in "$B"/engine_*_gpu_test; do
  name=$(basename "$t")
  [ "$name" = engine_token_layers_gpu_test ] && continue
  room 500 "$name" || continue
  run_logged "$name" "$t"
done
room 470 "racecheck" && {
  KVATTN_GPU_TEST_QUICK=1 timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$B/engine_token_layers_gpu_test" --gtest_filter='Tiny/TokenLayers.*/0' >"$OUT/racecheck_token.log" 2>&1
  echo "racecheck token rc=$? $(grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$OUT/racecheck_token.log" | tail -n 1)"
}
echo "end ${SECONDS}s"
