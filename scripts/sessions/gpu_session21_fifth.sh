#!/usr/bin/env bash
# Session 21, call 5: the session's last tree (fused merge and the range floor removed, the d64
# bound off): the decode suite, the engine's PDL tests, then the random Qwen3-0.6B single
# stream twice and nano-vllm's workload once.
#   run: bash scripts/sessions/gpu_session21_fifth.sh > $OUT/summary.txt 2>&1; tail -n 30 $OUT/summary.txt
#   carry: build-carry-s21d
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s21d
random_qwen3_06b
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite "$B/kernels_decode_gpu_test"
run_logged engine_pdl "$B/engine_pdl_gpu_test"
for r in 1 2; do room 300 "single stream $r" && single_stream "r$r" kvattn; done
room 330 "nano-vllm" && timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda \
  --single-input 16 --single-output 8 --ttft-input 4096 >"$OUT/nano.log" 2>&1
echo "nano-vllm rc=$?: $(tr '\r' '\n' < "$OUT/nano.log" | grep -E "Throughput|first token" | tr '\n' ' ')"
echo "end ${SECONDS}s"
