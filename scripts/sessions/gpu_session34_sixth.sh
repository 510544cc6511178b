#!/usr/bin/env bash
# Session 34, call 6: the token kernel with its defaults (first K/V round copied in the
# previous phase E, a warp per head for the merge weights, 16 pieces' loads in flight): its
# test, memcheck and racecheck over the tiny Llama cases, profiles, single streams off / on,
# and nano-vllm's workload and TTFT with it on (batch 1 only takes it).
#   run: bash scripts/sessions/gpu_session34_sixth.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s34g (kvattn, engine_token_layers_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s34g
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
  single "${m}_prof" /tmp/$m KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_PROFILE=1
  grep -A21 "token kernel profile" "$OUT/ss_${m}_prof.log" | head -n 21
done
for round in 1 2; do
  for m in smol q06; do
    single "${m}_off_$round" /tmp/$m
    single "${m}_on_$round" /tmp/$m KVATTN_TOKEN_KERNEL=1
  done
done
for mode in 0 1; do
  env KVATTN_TOKEN_KERNEL=$mode timeout 90 "$B/kvattn" bench --model /tmp/q06 --device cuda \
    --no-compare >"$OUT/nano_$mode.log" 2>&1
  echo "nano-vllm token=$mode rc=$?: $(tr '\r' '\n' < "$OUT/nano_$mode.log" | grep -E "Throughput|leak|rror" | tr '\n' ' ')"
done
room 300 "sanitizers" && KVATTN_TOKEN_KERNEL=1 both_sanitizers token "$B/engine_token_layers_gpu_test" 'Tiny/TokenLayers.*/0'
echo "end ${SECONDS}s"
