#!/usr/bin/env bash
# Session 46: how many of the Hopper prefill's softmax exponentials go to the FMA pipe
# (exp2_fma.h; KVATTN_PREFILL_SM90_POLY_EXP_D64 / _D128: of a key tile's 16 column tiles).
# Four C++ benches built on the CPU machine from one tree, differing only in that number
# (0 = the MUFU alone, as before; 2, 3, 4: the d64 and d128 kernels alike), run in alternating
# rounds on the head_dim 64 and 128 plain shapes (graph replay and flushed, as the bench times);
# then the prefill suite (quick) on the N-variant test binary and the sanitizers on its tile
# edges.
# Ran once (docs/perf/NOTES.md session 46 call 1); the exponentials were then removed: the
# binaries need b876047 (its CMake knobs KVATTN_PREFILL_SM90_POLY_EXP_D64 / _D128).
#   run: LIMIT=300 bash scripts/sessions/gpu_session46_poly.sh CARRY 2>&1 | tee $OUT/summary.txt
#   carry: CARRY (bins.tar.xz: a_bench_p0, b_bench_p2, c_bench_p3, d_bench_p4,
#          e_kernels_prefill_gpu_test: the variant named in CARRY/README), .deps/private
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh
source scripts/device_carried.sh
carried_bins "$1" "$B"
trap pack_out EXIT
LIMIT=${LIMIT:-300}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
cat "$1/README" 2>/dev/null
ldd "$B/a_bench_p0" | grep "not found"
step "prefill suite (quick), the carried variant"
run_logged prefill_test timeout 150 env KVATTN_GPU_TEST_QUICK=1 "$B/e_kernels_prefill_gpu_test"
step "rounds"
for round in 1 2 3; do
  for v in a_bench_p0 b_bench_p2 c_bench_p3 d_bench_p4; do
    room $((LIMIT - 90)) "round $round $v" || break 2
    for shape in d64 "8x2048 32/8" 1x16384; do
      timeout 60 "$B/$v" --only "$shape" > "$OUT/r${round}_${v}_${shape%% *}.txt" 2>&1
      grep -E '"variant":"default"' "$OUT/r${round}_${v}_${shape%% *}.txt" | grep -v d256 |
        sed -E "s/.*\"shape\":\"([^\"]*)\".*\"tflops\":([0-9.]+),\"graph_ms\":[0-9.]+,\"graph_tflops\":([0-9.]+).*/r$round ${v#*_bench_} | \1 | flushed \2 | graph \3/"
    done
  done
done
step sanitizers
room $((LIMIT - 70)) "sanitizers" &&
  both_sanitizers prefill "$B/e_kernels_prefill_gpu_test" 'PrefillGpu.TileEdges'
echo "end ${SECONDS}s"
