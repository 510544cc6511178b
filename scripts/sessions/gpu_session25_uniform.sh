#!/usr/bin/env bash
# The consumers' warpgroup index broadcast from lane 0 (KVATTN_PREFILL_SM90_UNIFORM_WG=1:
# ptxas then keeps the S = Q K^T descriptors in uniform registers, 18 -> 3 R2UR in the head_dim
# 128 key loop) against the default build, two binaries alternating, the default rows of
# 8x2048 and 16x1024 d128. Written in session 25, not run (its device time had run out);
# build the new binary with -DCMAKE_CUDA_FLAGS=-DKVATTN_PREFILL_SM90_UNIFORM_WG=1 in a build
# folder of its own, and run the prefill suite on it before making it the default.
#   run: bash scripts/sessions/gpu_session25_uniform.sh > $OUT/summary.txt 2>&1; tail -n 30 $OUT/summary.txt
#   carry: build-carry-s25e (gpu_prefill_bench = new, gpu_prefill_bench_old; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${CARRY:-build-carry-s25e}"
for round in 1 2; do
  for shape in "8x2048 32/8" "16x1024 16/8"; do
    for bin in gpu_prefill_bench_old gpu_prefill_bench; do
      room 70 "$bin $shape r$round" || break 3
      timeout 20 "$B/$bin" --reps 20 --only "$shape" 2>&1 | grep -E " default " | grep -v d64 |
        sed "s/^/$bin r$round: /"
    done
  done
done
echo "end ${SECONDS}s"
