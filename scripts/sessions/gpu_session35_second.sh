#!/usr/bin/env bash
# Session 35 (no device lent), written for the next session's second call: every engine GPU
# test that runs a model, with the token kernel on (KVATTN_TOKEN_KERNEL=1: the five-phase form
# with session 34's length rule), then again with the three-phase form (KVATTN_TOKEN_FLOW=1),
# then nano-vllm's workload with each (its last lone sequences take the kernel). If the first
# call (gpu_session35_first.sh) and this one pass, token_kernel_wanted()'s default can flip on
# (token_runner.cpp; the token test's "off by default" check, README, docs), and
# token_flow_wanted()'s too if the three-phase form measured faster.
#   run: bash scripts/sessions/gpu_session35_second.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s35b (kvattn and the engine GPU tests that run models; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s35b
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
random_qwen3_06b
for form in five three; do
  flow=0
  [ "$form" = three ] && flow=1
  for t in "$B"/engine_*_gpu_test; do
    room 480 "$form $(basename "$t")" || continue
    KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_FLOW=$flow run_logged "${form}_$(basename "$t")" "$t"
  done
done
for flow in 0 1; do
  room 540 "nano-vllm flow=$flow" || continue
  env KVATTN_TOKEN_KERNEL=1 KVATTN_TOKEN_FLOW=$flow timeout 90 "$B/kvattn" bench --model /tmp/q06 \
    --device cuda --no-compare >"$OUT/nano_$flow.log" 2>&1
  echo "nano-vllm token=1 flow=$flow rc=$?: $(tr '\r' '\n' < "$OUT/nano_$flow.log" | grep -E "Throughput|leak|rror" | tr '\n' ' ')"
done
echo "end ${SECONDS}s"
