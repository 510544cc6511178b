#!/usr/bin/env bash
# Session 38, call 6: decode against the peers, same process, on the session's final code (the
# dynamic split's code out of the default kernels, the one-pass merge): issue 16's same-run
# ratios after calls 3 and 5 (call 1 ran before them).
#   run: bash scripts/sessions/gpu_session38_final_peers.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
DECODE_PEERS_HEAD_DIMS=128,64 PEERS_TIMEOUT=300 \
  kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
echo "end ${SECONDS}s"
