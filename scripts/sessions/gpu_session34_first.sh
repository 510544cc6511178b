#!/usr/bin/env bash
# Session 34, call 1: the token kernel (src/engine/model/token_layers; KVATTN_TOKEN_KERNEL=1):
# one decode token of one sequence through every layer in one persistent cooperative kernel.
# Its engine test first (teacher-forced logits against the layered path on the tiny
# checkpoints, and on a random Qwen3-0.6B for head_dim 128), memcheck over a short case, then
# single streams (128 + 256, graphs) with it off / on, alternating, on the random SmolLM2-135M
# and Qwen3-0.6B shapes.
#   run: bash scripts/sessions/gpu_session34_first.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s34a (kvattn, engine_token_layers_gpu_test, engine_prompt_logprobs_test
#          (on CUDA: prompt log-probabilities through the CUDA engine), engine_fused_gemv_engine_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s34a
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
KVATTN_TOKEN_TEST_MODEL=/tmp/q06 run_logged token_test "$B/engine_token_layers_gpu_test"
grep -E "argmax agree|Failure|differ|kernel" "$OUT/token_test.log" | head -n 40
KVATTN_TEST_DEVICE=cuda run_logged prompt_logprobs_cuda "$B/engine_prompt_logprobs_test"
single() {  # LABEL MODEL [ENV=VALUE]
  env ${3:-KVATTN_NOTHING=0} timeout 60 "$B/kvattn" bench --model "$2" --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single stream|rror" | tr '\n' ' ')"
}
for round in 1 2; do
  single "smol_off_$round" /tmp/smol
  single "smol_on_$round" /tmp/smol KVATTN_TOKEN_KERNEL=1
  single "q06_off_$round" /tmp/q06
  single "q06_on_$round" /tmp/q06 KVATTN_TOKEN_KERNEL=1
done
room 330 "memcheck" && {
  KVATTN_TOKEN_TEST_MODEL= timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$B/engine_token_layers_gpu_test" --gtest_filter='Tiny/TokenLayers.*/0' >"$OUT/memcheck_token.log" 2>&1
  echo "memcheck token rc=$? $(grep -E "ERROR SUMMARY" "$OUT/memcheck_token.log" | tail -n 1)"
}
room 420 "fused gemv engine test" && run_logged fused_gemv "$B/engine_fused_gemv_engine_gpu_test"
echo "end ${SECONDS}s"
