#!/usr/bin/env bash
# Session 35, call 4: the final code with the token kernel on by default: the two bit-equality
# tests (they pin it off), the serving and model tests, the token test, and single streams with
# the default and with KVATTN_TOKEN_KERNEL=0.
#   run: bash scripts/sessions/gpu_session35_fourth.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s35e (kvattn and those five tests; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s35e
trap pack_out EXIT
nvidia-smi --query-gpu=name --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
for t in "$B"/engine_*_gpu_test; do run_logged "$(basename "$t")" "$t"; done
for m in smol q06; do
  for mode in default off; do
    extra=()
    [ "$mode" = off ] && extra=(KVATTN_TOKEN_KERNEL=0)
    env KVATTN_NOTHING=0 "${extra[@]}" timeout 60 "$B/kvattn" bench --model /tmp/$m --device cuda \
      --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
      --single-input 128 --single-output 256 >"$OUT/ss_${m}_$mode.log" 2>&1
    echo "${m}_$mode rc=$?: $(tr '\r' '\n' < "$OUT/ss_${m}_$mode.log" | grep -E "single stream|first token|rror" | tr '\n' ' ')"
  done
done
echo "end ${SECONDS}s"
