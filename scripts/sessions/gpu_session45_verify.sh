#!/usr/bin/env bash
# Session 45, call 1: session 44's L2 policy by size (decode_kv_evict_first, landed without a
# GPU run) built and run here, on HEAD's tree, then the map that decides the next decode lever.
#   1. the decode suite (quick; kernels_decode_gpu_test and gpu_decode_bench from CARRY, else
#      built here, sm_90a), racecheck and memcheck of the small kernel's graph case;
#   2. the C++ bench's lone 8192-key row: the default (by size) beside both forced policies,
#      warm and flushed;
#   3. the uniformity map: the acceptance shapes (page 16, --quick) with the small kernel at
#      one chunk (no merge: "small c1" 8 warps, "small c1 w4"), two chunks (8 and 4 warps), and the stream
#      kernel without its merge ("diag nomerge", a wrong result timed only for its cost); does
#      one CTA a (sequence, KV head) beat the split + merge where the lengths are uniform?
#   4. as time allows, the peers' whole decode table (the Python package built here; HEAD's
#      bench/paged_decode_inputs.py runs for the first time).
#   run: LIMIT=560 bash scripts/sessions/gpu_session45_verify.sh [CARRY] 2>&1 | tee $OUT/summary.txt
#   carry: CARRY (build-carry-s45a: bins.tar.xz with both binaries, HEAD 2026-12-07), .deps/private,
#          .peers
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, kvattn_gpu_build, the peers
source scripts/device_carried.sh  # run_logged, both_sanitizers, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-560}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
if [ -n "${1:-}" ]; then
  carried_bins "$1" "$B"
  T=$B/kernels_decode_gpu_test
  BENCH=$B/gpu_decode_bench
else
  step build
  kvattn_gpu_build ON kernels_decode_gpu_test gpu_decode_bench
  echo "built at ${SECONDS}s"
  T=build-gpu/tests/kernels/kernels_decode_gpu_test
  BENCH=build-gpu/bench/gpu_decode_bench
fi
ldd "$T" | grep "not found"
step "decode suite (quick)"
run_logged decode_test timeout 200 env KVATTN_GPU_TEST_QUICK=1 "$T"
step "lone 8192-key sequence: L2 policy"
for run in 1 2; do
  timeout 40 "$BENCH" --only single --warm --variants evict-first,evict-normal \
    > "$OUT/evict_$run.txt" 2>&1
  echo "bench run $run rc=$?"
  grep -E '"op": "decode (default|evict-first|evict-normal)"' "$OUT/evict_$run.txt" |
    sed -E 's/.*"op": "([^"]+)".*"shape": "([^"]*)".*"us": ([0-9.]+).*"note": "([^"]*)".*/\1 | \2 | \3 us (\4)/'
done
room $((LIMIT - 150)) "sanitizers" && both_sanitizers small "$T" 'DecodeGpu.CudaGraphCaptureAndReplay'
step "uniformity map"
room $((LIMIT - 200)) "uniformity map" && {
  timeout 150 "$BENCH" --only decode --quick \
    --variants "small c1,small c1 w4,small c2,small c2 w4,diag nomerge" > "$OUT/map.txt" 2>&1
  echo "map rc=$?"
  grep -E '"op": "decode ' "$OUT/map.txt" |
    sed -E 's/.*"op": "([^"]+)".*"shape": "([^"]*)".*"us": ([0-9.]+).*/\1 | \2 | \3/'
}
room $((LIMIT - 230)) "decode peers, whole table" && DECODE_PEERS_HEAD_DIMS=128,64 \
  PEERS_TIMEOUT=$((LIMIT - 20 - SECONDS)) kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 24
echo "end ${SECONDS}s"
