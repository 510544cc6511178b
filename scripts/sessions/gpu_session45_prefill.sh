#!/usr/bin/env bash
# Session 45, call 3: the Hopper prefill's shared-memory base computed once (session 26's lead
# 2; prefill_sm90_kernel.cuh, the plain head_dim 128 kernels: -1,032 SASS instructions over
# the eight kernels, the key loops 6-11 shorter a tile, no spills). The suite (quick) on the
# new build (built here), then ROUNDS rounds alternating the carried HEAD build (base) and the
# new one on the 1x16384 d128 and paged-prefix (page 16) rows (C++ bench: graph replay and flushed).
#   run: LIMIT=400 bash scripts/sessions/gpu_session45_prefill.sh [CARRY] 2>&1 | tee $OUT/summary.txt
#   carry: CARRY (default build-carry-s45d: gpu_prefill_bench_base, HEAD's bench), .deps/private
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh
source scripts/device_carried.sh
carried_bins "${1:-build-carry-s45d}" "$B"
trap pack_out EXIT
LIMIT=${LIMIT:-400}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench
echo "built at ${SECONDS}s"
T=build-gpu/tests/kernels/kernels_prefill_gpu_test
NEW=build-gpu/bench/gpu_prefill_bench
step "prefill suite (quick)"
run_logged prefill_test timeout 150 env KVATTN_GPU_TEST_QUICK=1 "$T"
step "A/B rounds"
for round in 1 2 3; do
  for side in base new; do
    room $((LIMIT - 40)) "round $round $side" || break 2
    bin=$NEW
    [ "$side" = base ] && bin=$B/gpu_prefill_bench_base
    for shape in 16384 page16; do
      timeout 60 "$bin" --only "$shape" > "$OUT/ab_${side}_${shape}_$round.txt" 2>&1
      grep -E '"variant":"default"' "$OUT/ab_${side}_${shape}_$round.txt" | grep -v '"d":64\|d64' |
        sed -E "s/.*\"shape\":\"([^\"]*)\".*\"tflops\":([0-9.]+),\"graph_ms\":[0-9.]+,\"graph_tflops\":([0-9.]+).*/round $round $side | \1 | flushed \2 | graph \3/"
    done
  done
done
echo "end ${SECONDS}s"
