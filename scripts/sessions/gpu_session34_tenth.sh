#!/usr/bin/env bash
# Session 34, call 10: the length rule (one sequence longer than the token kernel's
# single-round capacity, max_pieces x 64 keys, replays rung 1's layered twin graph): the token
# kernel's test (which now checks per case which steps took it), the serving test (graph
# counts), and single streams off / on at 128, 4,096 and 16,384 prompt tokens.
#   run: bash scripts/sessions/gpu_session34_tenth.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s34k (kvattn, engine_token_layers_gpu_test, engine_cuda_serving_gpu_test; debs/),
#          rebuilt from the final session-34 code (not run in session 34: no device time left)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s34k
trap pack_out EXIT
random_qwen3_06b
KVATTN_TOKEN_TEST_MODEL=/tmp/q06 run_logged token_test "$B/engine_token_layers_gpu_test"
run_logged cuda_serving "$B/engine_cuda_serving_gpu_test"
for n in 128 4096 16384; do
  for mode in 0 1; do
    env KVATTN_TOKEN_KERNEL=$mode timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda \
      --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
      --single-input "$n" --single-output 128 >"$OUT/q06_${n}_$mode.log" 2>&1
    echo "q06 $n token=$mode rc=$?: $(tr '\r' '\n' < "$OUT/q06_${n}_$mode.log" | grep -E "single stream|rror" | tr '\n' ' ')"
  done
done
echo "end ${SECONDS}s"
