#!/usr/bin/env bash
# Session 42, call 2: the current code's same-run figures on whatever card comes. First
# issue 20's engine figures with the carried CLI (HEAD's build: nano-vllm's workload with the
# Qwen3-0.6B shape, random weights, bf16 and fp8, each with its single stream and TTFT;
# SmolLM2-135M's single stream), then decode and prefill against the peers in one process each
# (the Python package built here, FlashInfer from .peers), head_dim 128 and 64: the acceptance
# shapes of issues 15 and 16.
#   run: bash scripts/sessions/gpu_session42_peers.sh [CARRY] 2>&1 | tee $OUT/summary.txt
#   carry: CARRY (default build-carry-s42b: bins.tar.xz with kvattn), .deps/private, .peers
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages (build and run), OUT, step, the peers' runner
source scripts/device_carried.sh  # B, engine_bench, single_bench, pack_out
carried_bins "${1:-build-carry-s42b}" "$B"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
ldd "$B/kvattn" | grep "not found"
random_qwen3_06b
random_smollm2
room 120 "qwen3 bf16" && engine_bench q06_bf16 /tmp/q06
room 200 "qwen3 fp8" && engine_bench q06_fp8 /tmp/q06 --kv-cache-dtype fp8
room 260 "smollm2 single" && single_bench smol /tmp/smol 128
# LIMIT: the call's limit in seconds (the device budget left bounds it).
LIMIT=${LIMIT:-580}
room $((LIMIT - 200)) "decode peers" && DECODE_PEERS_HEAD_DIMS=128,64 \
  PEERS_TIMEOUT=$((LIMIT - 15 - SECONDS)) kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
room $((LIMIT - 110)) "prefill peers" && PREFILL_PEERS_HEAD_DIMS=128,64 PREFILL_PEERS_BACKENDS=fa3 \
  PEERS_TIMEOUT=$((LIMIT - 10 - SECONDS)) kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 10
echo "end ${SECONDS}s"
