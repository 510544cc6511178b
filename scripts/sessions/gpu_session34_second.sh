#!/usr/bin/env bash
# Session 34, call 2: where the token kernel's time goes (call 1: correct, but SmolLM2's single
# stream 1,379 -> 1,056 tok/s and Qwen3-0.6B's 953 -> 592 with it). KVATTN_TOKEN_PROFILE=1
# prints the phases' mean / max durations per layer (clock64 stamps of the last launch) when
# the model goes.
#   run: bash scripts/sessions/gpu_session34_second.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s34b (kvattn; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s34b
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
single() {  # LABEL MODEL [ENV=VALUE...]
  local label=$1 model=$2; shift 2
  env KVATTN_NOTHING=0 "$@" timeout 60 "$B/kvattn" bench --model "$model" --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input 128 --single-output 256 >"$OUT/ss_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/ss_$label.log" | grep -E "single stream|rror" | tr '\n' ' ')"
  grep -A24 "token kernel profile" "$OUT/ss_$label.log" | head -n 24
}
single smol_prof /tmp/smol KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_PROFILE=1
single q06_prof /tmp/q06 KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_PROFILE=1
single smol_on /tmp/smol KVATTN_TOKEN_KERNEL=1
echo "end ${SECONDS}s"
