#!/usr/bin/env bash
# Session 25, call 7: O's rescale before the GEMM turn at head_dim 256 too (call 5's one
# round: the paged prefix shapes -3.6 / -5.4%). The whole prefill suite, racecheck and
# memcheck on the head_dim 256 tiling test, and the head_dim 256 shapes twice with the
# `turnflip` row (now the rescale in the turn).
#   run: bash scripts/sessions/gpu_session25_d256.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s25d (kernels_prefill_gpu_test, gpu_prefill_bench; debs/)
# (The bench's `turnflip` row was removed after call 7, its question settled.)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${CARRY:-build-carry-s25d}"
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged prefill_suite_full "$T"
both_sanitizers d256 "$T" 'PrefillGpu.TileEdgesHeadDim256'
for round in 1 2; do
  room 150 "d256 round $round" || break
  timeout 60 "$B/gpu_prefill_bench" --d256 --reps 30 >"$OUT/d256_r$round.log" 2>&1
  echo "d256 r$round rc=$?"
  grep -v '^{' "$OUT/d256_r$round.log" | grep -E " default | turnflip " | head -n 10
done
echo "end ${SECONDS}s"
