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
random_smollm2
for t in "$B"/engine_*_gpu_test; do run_logged "$(basename "$t")" "$t"; done
for m in smol q06; do
  single_bench "${m}_default" /tmp/$m 128
  single_bench "${m}_off" /tmp/$m 128 KVATTN_TOKEN_KERNEL=0
done
echo "end ${SECONDS}s"
