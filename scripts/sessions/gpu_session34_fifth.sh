#!/usr/bin/env bash
# Session 34, call 5: where the token kernel's first K/V round is copied in
# (KVATTN_TOKEN_PREFETCH: 0 in phase B, 1 in phase A after the input norm, 2 in the previous
# layer's phase E). Call 4's profile: the barrier after phase A waits ~4.5 us (the others
# ~1.2): is it the K/V copies in flight? Test (mode 2 too), then profiles and single streams.
#   run: bash scripts/sessions/gpu_session34_fifth.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s34f (kvattn, engine_token_layers_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s34f
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
for mode in 0 2; do
  KVATTN_TOKEN_PREFETCH=$mode KVATTN_TOKEN_TEST_MODEL=/tmp/q06 run_logged "token_test_pf$mode" "$B/engine_token_layers_gpu_test"
done
single() {  # LABEL MODEL [ENV=VALUE...]
  local label=$1 model=$2; shift 2
  env KVATTN_NOTHING=0 "$@" timeout 60 "$B/kvattn" bench --model "$model" --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input 128 --single-output 256 >"$OUT/ss_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/ss_$label.log" | grep -E "single stream|rror" | tr '\n' ' ')"
}
for mode in 0 1 2; do
  for m in smol q06; do
    single "${m}_prof_pf$mode" /tmp/$m KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_PROFILE=1 KVATTN_TOKEN_PREFETCH=$mode
    grep -E "barrier|prepare|keys|merge|launch" "$OUT/ss_${m}_prof_pf$mode.log" | tr -s ' ' | tr '\n' ';'
    echo
  done
done
for round in 1 2; do
  single "smol_off_$round" /tmp/smol
  for mode in 0 1 2; do single "smol_pf${mode}_$round" /tmp/smol KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_PREFETCH=$mode; done
  single "q06_off_$round" /tmp/q06
  for mode in 0 1 2; do single "q06_pf${mode}_$round" /tmp/q06 KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_PREFETCH=$mode; done
done
echo "end ${SECONDS}s"
