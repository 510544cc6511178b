#!/usr/bin/env bash
# Session 38, call 1: decode and prefill against the peers in one call (the package built once),
# head_dim 128 and 64 only (the acceptance shapes of issues 15 and 16), with decode's page-256
# rows at head_dim 64 beside page 16: whether the d64 gap to cuDNN (contiguous K/V) is the
# page-16 layout's reads.
#   run: bash scripts/sessions/gpu_session38_peers.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
DECODE_PEERS_HEAD_DIMS=128,64 PEERS_TIMEOUT=270 \
  kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
PREFILL_PEERS_HEAD_DIMS=128,64 PREFILL_PEERS_BACKENDS=fa3 PEERS_TIMEOUT=200 \
  kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 10
echo "end ${SECONDS}s"
