#!/usr/bin/env bash
# Session 34, call 9: the token kernel at long single contexts (its attention reads a KV head
# in at most 32 pieces of 64-key rounds): single streams off / on at 16,384 (Qwen3-0.6B) and
# 8,000 (SmolLM2) prompt tokens, 64 new.
#   run: bash scripts/sessions/gpu_session34_ninth.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s34j (kvattn; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s34j
trap pack_out EXIT
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
for spec in "q06 16384" "smol 8000" "q06 4096"; do
  set -- $spec
  for mode in 0 1; do
    env KVATTN_TOKEN_KERNEL=$mode timeout 60 "$B/kvattn" bench --model /tmp/$1 --device cuda \
      --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
      --single-input "$2" --single-output 64 >"$OUT/long_$1_$2_$mode.log" 2>&1
    echo "$1 $2 token=$mode rc=$?: $(tr '\r' '\n' < "$OUT/long_$1_$2_$mode.log" | grep -E "single stream|rror" | tr '\n' ' ')"
  done
done
echo "end ${SECONDS}s"
