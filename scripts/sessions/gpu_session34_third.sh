#!/usr/bin/env bash
# Session 34, call 3-4: the token kernel after call 2-3 profiles (merge loads batched, fewer and
# longer attention pieces, two keys a step with the group's heads unrolled, the GEMV's rows
# four at a time, norm weights staged a phase ahead, the RoPE table once a launch): its test,
# then the profile and single streams off / on, alternating.
#   run: bash scripts/sessions/gpu_session34_third.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s34e (kvattn, engine_token_layers_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s34e
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
KVATTN_TOKEN_TEST_MODEL=/tmp/q06 run_logged token_test "$B/engine_token_layers_gpu_test"
grep -E "Failure|differs" "$OUT/token_test.log" | head -n 12
grep -E "argmax agree" "$OUT/token_test.log" | awk '{print $NF, $0}' | sort -rn | head -n 4
single() {  # LABEL MODEL [ENV=VALUE...]
  local label=$1 model=$2; shift 2
  env KVATTN_NOTHING=0 "$@" timeout 60 "$B/kvattn" bench --model "$model" --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input 128 --single-output 256 >"$OUT/ss_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/ss_$label.log" | grep -E "single stream|rror" | tr '\n' ' ')"
  grep -A21 "token kernel profile" "$OUT/ss_$label.log" | head -n 21
}
single smol_prof /tmp/smol KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_PROFILE=1
single q06_prof /tmp/q06 KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_PROFILE=1
for round in 1 2; do
  single "smol_off_$round" /tmp/smol
  single "smol_on_$round" /tmp/smol KVATTN_TOKEN_KERNEL=1
  single "q06_off_$round" /tmp/q06
  single "q06_on_$round" /tmp/q06 KVATTN_TOKEN_KERNEL=1
done
echo "end ${SECONDS}s"
