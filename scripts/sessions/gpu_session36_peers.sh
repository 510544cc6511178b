#!/usr/bin/env bash
# Session 36, call 1: decode and prefill against the peers in one call (the package built once),
# on whichever card the device lends: the baseline figures of issues 15 and 16 for this session.
#   run: bash scripts/sessions/gpu_session36_peers.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
PEERS_TIMEOUT=250 kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
PREFILL_PEERS_BACKENDS=fa3 PEERS_TIMEOUT=200 kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 12
echo "end ${SECONDS}s"
