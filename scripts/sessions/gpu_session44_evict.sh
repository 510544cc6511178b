#!/usr/bin/env bash
# Session 44, call 3: the small decode kernel's L2 policy by size (evict-first only when a
# launch's K/V bytes exceed the L2; session 44 call 1 measured evict-normal at 1x8192 14.4 us
# warm against 20.4 evict-first, and 12.6 against cuDNN 13.0 by graph). The decode suite
# (quick) on the new default, the C++ bench's 1x8192 row (default = by size, against both
# forced policies; memset / read flush and warm), racecheck and memcheck of a small-kernel
# case, then as time allows: the peers' 1x8192 row on the new default (two processes), the
# whole decode table (head_dim 128 and 64, one process), and the ncu harness once without
# the profiler (both harnesses now share bench/paged_decode_inputs.py). LIMIT: the call's
# seconds (default 560).
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
ldd "$B/kernels_decode_gpu_test" | grep "not found"
run_logged decode_test timeout $((LIMIT - 80)) env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
for run in 1 2; do
  room $((LIMIT - 60)) "bench run $run" || break
  timeout 40 "$B/gpu_decode_bench" --only single --warm --variants evict-first,evict-normal \
    > "$OUT/evict_$run.txt" 2>&1
  echo "bench run $run rc=$?"
  grep -E '"op": "decode (default|evict-first|evict-normal)"' "$OUT/evict_$run.txt" |
    sed -E 's/.*"op": "([^"]+)".*"us": ([0-9.]+).*"note": "([^"]*)".*/\1 \2 us (\3)/'
done
room $((LIMIT - 120)) "sanitizers" && both_sanitizers small "$B/kernels_decode_gpu_test" \
  'DecodeGpu.CudaGraphCaptureAndReplay'
# The 1x8192 row on the new default first (two processes), then the whole table if time is left.
for round in 1 2; do
  room $((LIMIT - 150)) "1x8192 peers round $round" || break
  DECODE_PEERS_CASES=1x8192 DECODE_PEERS_HEAD_DIMS=128 PEERS_TIMEOUT=120 \
    kvattn_run_peers bench/decode_peers_same_run.py "decode_1x8192_r$round.log" 1
done
room $((LIMIT - 220)) "decode peers, whole table" && DECODE_PEERS_HEAD_DIMS=128,64 \
  PEERS_TIMEOUT=$((LIMIT - 60 - SECONDS)) kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
# bench/paged_decode_inputs.py is new (both harnesses' inputs): the ncu harness once, unprofiled.
[ -n "${KVATTN_PEERS_READY:-}" ] && room $((LIMIT - 25)) "ncu harness smoke run" &&
  DECODE_NCU_CASES=1x8192 PEERS_TIMEOUT=20 \
  kvattn_run_peers bench/decode_ncu_peers.py ncu_harness.log 4
echo "end ${SECONDS}s"
