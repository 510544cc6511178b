#!/usr/bin/env bash
# Session 38, call 8: 1x16384 32/8 d128 causal prefill, kvattn and FA3 timed three times each in
# one process (kvattn, FA3, cuDNN, then kvattn and FA3 twice more): whether FA3's faster
# flushed figure and kvattn's slower one (sessions 29, 31, 38) follow the order of the runs.
#   run: bash scripts/sessions/gpu_session38_prefill_order.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
PREFILL_PEERS_HEAD_DIMS=128 PREFILL_PEERS_SHAPE=1x16384 PREFILL_PEERS_ROUNDS=3 \
  PREFILL_PEERS_BACKENDS=fa3 PEERS_TIMEOUT=240 \
  kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 6
echo "end ${SECONDS}s"
