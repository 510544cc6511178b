#!/usr/bin/env bash
# Session 44, call 2: the small decode kernel's L2 policy by size (evict-first only when a
# launch's K/V bytes exceed the L2; session 44 call 1 measured evict-normal at 1x8192 14.4 us
# warm against 20.4 evict-first, and 12.6 against cuDNN 13.0 by graph). The decode suite
# (quick) on the new default, racecheck and memcheck of two small-kernel cases, the C++ bench's
# 1x8192 row (default = by size, against both forced policies; memset / read flush and warm),
# then the peers' decode table on the new default, head_dim 128 and 64, one process.
#   run: bash scripts/sessions/gpu_session44_evict.sh [CARRY] 2>&1 | tee $OUT/summary.txt
#   carry: CARRY (default build-carry-s44a: bins.tar.xz with kernels_decode_gpu_test and
#          gpu_decode_bench), .deps/private, .peers
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, the peers' runner
source scripts/device_carried.sh  # B, run_logged, both_sanitizers, room, pack_out
carried_bins "${1:-build-carry-s44a}" "$B"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
LIMIT=${LIMIT:-560}
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
room 150 "sanitizers" && both_sanitizers small "$B/kernels_decode_gpu_test" \
  'DecodeGpu.CudaGraphCaptureAndReplay:DecodeGpu.StreamWaves'
for run in 1 2; do
  room 200 "bench run $run" || break
  timeout 40 "$B/gpu_decode_bench" --only single --warm --variants evict-first,evict-normal \
    > "$OUT/evict_$run.txt" 2>&1
  echo "bench run $run rc=$?"
  grep -E '"op": "decode (default|evict-first|evict-normal)"' "$OUT/evict_$run.txt" |
    sed -E 's/.*"op": "([^"]+)".*"us": ([0-9.]+).*"note": "([^"]*)".*/\1 \2 us (\3)/'
done
room $((LIMIT - 230)) "decode peers" && DECODE_PEERS_HEAD_DIMS=128,64 \
  PEERS_TIMEOUT=$((LIMIT - 15 - SECONDS)) kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
echo "end ${SECONDS}s"
