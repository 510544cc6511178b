#!/usr/bin/env bash
# Session 33, call 2: where the default model's single-stream token goes (issue 20: SmolLM2-135M
# at 2,000 tok/s on the H200; 1,389 on the H100 in call 1). The random SmolLM2-shaped Llama
# (CUDA dequantises the GGUF to bf16, so the same network) and random Qwen3-0.6B by graph replay
# (128 + 256), with PDL off once; then ncu's kernel durations over ~3 eager decode tokens of
# SmolLM2 (scripts/gpu_ncu_single_stream.sh with the carried binary).
#   run: bash scripts/sessions/gpu_session33_second.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s33a (kvattn from the session 33 defaults commit; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s33a
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
single() {  # LABEL MODEL [ENV=VALUE]
  env ${3:-KVATTN_NOTHING=0} timeout 60 "$B/kvattn" bench --model "$2" --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single stream" | tr '\n' ' ')"
}
single smol_a /tmp/smol
single q06_a /tmp/q06
single smol_b /tmp/smol
single smol_nopdl /tmp/smol KVATTN_PDL=0
single q06_b /tmp/q06
room 420 "ncu" && KVATTN_BIN="$B/kvattn" MODEL=/tmp/smol TAG=smol COUNT=600 \
  bash scripts/gpu_ncu_single_stream.sh 2>&1 | tail -n 40
echo "end ${SECONDS}s"
