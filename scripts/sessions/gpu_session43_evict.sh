#!/usr/bin/env bash
# Session 43, the short form of the evict-first A/B (for a budget too small for the package
# build of gpu_session43_ncu_peers.sh): the C++ bench's 1x8192 32/8 d128 page-16 row with the
# small kernel's K/V copies evict-first (the default) and normal, timed after a memset flush,
# after a read flush and warm (no flush: the K/V stay in L2, as the peers' graph replay sees
# them), three runs alternating.
#   run: bash scripts/sessions/gpu_session43_evict.sh [CARRY] 2>&1 | tee $OUT/summary.txt
#   carry: CARRY (default build-carry-s43a: bins.tar.xz with gpu_decode_bench)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh  # B, carried_bins, room, pack_out
carried_bins "${1:-build-carry-s43a}" "$B"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for run in 1 2 3; do
  room 100 "run $run" || break
  timeout 40 "$B/gpu_decode_bench" --only single --warm --variants evict-first,evict-normal \
    > "$OUT/evict_$run.txt" 2>&1
  echo "run $run rc=$?"
  grep -E '"op": "decode (default|evict-first|evict-normal)"' "$OUT/evict_$run.txt" |
    sed -E 's/.*"op": "([^"]+)".*"us": ([0-9.]+).*"note": "([^"]*)".*/\1 \2 us (\3)/'
done
echo "end ${SECONDS}s"
