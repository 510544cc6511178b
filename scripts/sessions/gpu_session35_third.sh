#!/usr/bin/env bash
# Session 35, call 3: the three-phase token kernel with each o_proj-share CTA merging its own
# query head after the head's arrival count completes (no merging CTA, no merged-row flag: one
# round trip fewer than call 1's form): the token test, memcheck and racecheck over the flow
# cases, single streams five / three phases (twice) and both profiles.
#   run: bash scripts/sessions/gpu_session35_third.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s35d (kvattn, engine_token_layers_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s35d
trap pack_out EXIT
nvidia-smi --query-gpu=name --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
KVATTN_TOKEN_TEST_MODEL=/tmp/q06 run_logged token_test "$B/engine_token_layers_gpu_test"
both_sanitizers token_flow "$B/engine_token_layers_gpu_test" '*llama_flow:*qwen3_flow'
single() {  # LABEL MODEL [ENV=VALUE...]
  local label=$1 model=$2; shift 2
  env KVATTN_NOTHING=0 "$@" timeout 60 "$B/kvattn" bench --model "$model" --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input 128 --single-output 256 >"$OUT/ss_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/ss_$label.log" | grep -E "single stream|rror" | tr '\n' ' ')"
}
for m in smol q06; do
  single "${m}_prof_three" /tmp/$m KVATTN_TOKEN_FLOW=1 KVATTN_TOKEN_PROFILE=1
  grep -A21 "token kernel profile" "$OUT/ss_${m}_prof_three.log" | tr -s ' ' | tr '\n' ';'
  echo
done
for round in 1 2; do
  for m in smol q06; do
    single "${m}_off_$round" /tmp/$m KVATTN_TOKEN_KERNEL=0
    single "${m}_five_$round" /tmp/$m
    single "${m}_three_$round" /tmp/$m KVATTN_TOKEN_FLOW=1
  done
done
echo "end ${SECONDS}s"
