#!/usr/bin/env bash
# Session 34, call 8: after moving the bf16 group helpers (to_f8, pack8, ...) from cuda_gemv.cu
# and the token kernel into cuda_bf16_math.cuh: the GEMV's byte-equality tests, the engine's
# fused-vs-unfused logits, the token kernel's test, and the single streams once more.
#   run: bash scripts/sessions/gpu_session34_eighth.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s34i (kvattn, engine_{token_layers,fused_gemv_engine,cuda_gemv_fused,
#          gemv_rope_kv}_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s34i
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
for t in cuda_gemv_fused gemv_rope_kv fused_gemv_engine; do run_logged "$t" "$B/engine_${t}_gpu_test"; done
KVATTN_TOKEN_TEST_MODEL=/tmp/q06 run_logged token_test "$B/engine_token_layers_gpu_test"
for m in smol q06; do
  for mode in 0 1; do
    env KVATTN_TOKEN_KERNEL=$mode timeout 60 "$B/kvattn" bench --model /tmp/$m --device cuda \
      --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
      --single-input 128 --single-output 256 >"$OUT/ss_${m}_$mode.log" 2>&1
    echo "$m token=$mode rc=$?: $(tr '\r' '\n' < "$OUT/ss_${m}_$mode.log" | grep -E "single stream|rror" | tr '\n' ' ')"
  done
done
echo "end ${SECONDS}s"
