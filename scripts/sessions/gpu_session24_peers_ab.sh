#!/usr/bin/env bash
# Session 24, call 4: the prefill peers' harness (bench/prefill_peers_same_run.py, FA3 backend)
# twice on one machine, the dynamic tile schedule off (KVATTN_PREFILL_SM90_DYNAMIC=0) and at its
# default, to see it in the harness's own timing (its kvattn figures sit below the C++ bench's).
#   run: bash scripts/sessions/gpu_session24_peers_ab.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PREFILL_PEERS_BACKENDS=fa3 PEERS_TIMEOUT=240
for dyn in 0 1; do
  echo "=== KVATTN_PREFILL_SM90_DYNAMIC=$dyn ==="
  KVATTN_PREFILL_SM90_DYNAMIC=$dyn bash scripts/gpu_prefill_peers.sh 2>&1 | grep -E "causal|ceiling|==="
  mv "${OUT:-out}/prefill_peers_same_run.json" "${OUT:-out}/peers_dyn$dyn.json" 2>/dev/null
done
