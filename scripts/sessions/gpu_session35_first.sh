#!/usr/bin/env bash
# Session 35 (no device lent), written for the next session's first call: the three-phase token
# kernel (KVATTN_TOKEN_FLOW=1, token_flow.cu: three grid barriers a layer instead of five) and
# session 34's length rule, neither run on a GPU yet.
#   1. the token kernel's test (both forms, tiny models + a random Qwen3-0.6B; graphs vs eager
#      bit-equal), memcheck and racecheck over the flow cases, the serving test with the kernel on;
#   2. single streams (128 + 256) off / five-phase / three-phase, twice each, and both forms'
#      phase profiles (SmolLM2-135M and Qwen3-0.6B shapes, random weights);
#   3. the length rule: Qwen3-0.6B at 1,024 / 4,096 prompt tokens, off / five / three.
#   run: bash scripts/sessions/gpu_session35_first.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s35a (kvattn, engine_token_layers_gpu_test, engine_cuda_serving_gpu_test;
#          debs/), built from the session-35 code
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s35a
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
KVATTN_TOKEN_TEST_MODEL=/tmp/q06 run_logged token_test "$B/engine_token_layers_gpu_test"
grep -E "argmax agree" "$OUT/token_test.log" | awk '{print $NF, $0}' | sort -rn | head -n 3
both_sanitizers token_flow "$B/engine_token_layers_gpu_test" '*llama_flow:*qwen3_flow'
KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_FLOW=1 run_logged serving_flow "$B/engine_cuda_serving_gpu_test"
single() {  # LABEL MODEL PROMPT [ENV=VALUE...]
  local label=$1 model=$2 prompt=$3; shift 3
  env KVATTN_NOTHING=0 "$@" timeout 60 "$B/kvattn" bench --model "$model" --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input "$prompt" --single-output 256 >"$OUT/ss_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/ss_$label.log" | grep -E "single stream|first token|rror" | tr '\n' ' ')"
}
for m in smol q06; do
  for form in 0 1; do
    single "${m}_prof_$form" /tmp/$m 128 KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_FLOW=$form KVATTN_TOKEN_PROFILE=1
    grep -A21 "token kernel profile" "$OUT/ss_${m}_prof_$form.log" | tr -s ' ' | tr '\n' ';'
    echo
  done
done
for round in 1 2; do
  for m in smol q06; do
    single "${m}_off_$round" /tmp/$m 128 KVATTN_TOKEN_KERNEL=0
    single "${m}_five_$round" /tmp/$m 128 KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_FLOW=0
    single "${m}_three_$round" /tmp/$m 128 KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_FLOW=1
  done
done
for n in 1024 4096; do
  room 540 "length rule $n" || continue
  single "q06_${n}_off" /tmp/q06 "$n" KVATTN_TOKEN_KERNEL=0
  single "q06_${n}_five" /tmp/q06 "$n" KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_FLOW=0
  single "q06_${n}_three" /tmp/q06 "$n" KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_FLOW=1
done
echo "end ${SECONDS}s"
