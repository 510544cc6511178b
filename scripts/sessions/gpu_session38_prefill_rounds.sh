#!/usr/bin/env bash
# Session 38, call 9: issue 15's five prefill shapes against the peers, kvattn and FA3 twice each
# in one process (PREFILL_PEERS_ROUNDS=2): ratios from the second round, after call 8 showed
# the first graph figure of a shape low for every kernel.
#   run: bash scripts/sessions/gpu_session38_prefill_rounds.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
PREFILL_PEERS_HEAD_DIMS=128,64 PREFILL_PEERS_ROUNDS=2 PREFILL_PEERS_BACKENDS=fa3 PEERS_TIMEOUT=230 \
  kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 8
echo "end ${SECONDS}s"
