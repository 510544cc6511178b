#!/usr/bin/env bash
# Session 26, call 1: the consumers' warpgroup index broadcast from lane 0
# (Tile::kUniformWarpgroup) measured from both sides in one call.
#   build A (build-carry-s26a): the library's tiles without it; the bench's `uniformwg` row
#     turns it on (session 25's gpu_session25_uniform.sh).
#   build B (build-carry-s26b): the library's tiles with it (head_dim 64, 128 and 256); the
#     bench's `uniformwg` row now turns it off. B also runs the whole prefill suite, the
#     sections test and both sanitizers on the Hopper tiling tests, so that if it wins the
#     default flips on a build already checked.
# err_vs_def must read 0 on every uniformwg row (the same arithmetic).
#   run: bash scripts/sessions/gpu_session26_first.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s26a (gpu_prefill_bench, read_rate), build-carry-s26b (kvattn,
#          kernels_prefill_gpu_test, kernels_prefill_sm90_sections_test, gpu_prefill_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s26b  # into $B = /tmp/bin, with the runtime packages
BA=/tmp/binA
carried_bins build-carry-s26a "$BA"
trap pack_out EXIT
# The paged decode's loading organisation without its math (bench/micro/read_rate.cu, issue 16).
timeout 60 "$BA/read_rate" >"$OUT/read_rate.log" 2>&1; echo "read_rate rc=$?"
grep -E "^paged|1024 threads" "$OUT/read_rate.log"
bench_ab() {  # LABEL BIN ARGS...
  local label=$1 bin=$2; shift 2
  timeout 150 "$bin" "$@" --reps 30 >"$OUT/bench_$label.log" 2>&1
  echo "bench $label rc=$?"
  grep -v '^{' "$OUT/bench_$label.log" | grep -E "ceiling| default | uniformwg "
}
for round in 1 2; do
  room 330 "round $round" || break
  bench_ab "A_r$round" "$BA/gpu_prefill_bench"
  bench_ab "B_r$round" "$B/gpu_prefill_bench"
  bench_ab "A_d256_r$round" "$BA/gpu_prefill_bench" --d256
  bench_ab "B_d256_r$round" "$B/gpu_prefill_bench" --d256
done
T="$B/kernels_prefill_gpu_test"
room 420 "suite" && {
  run_logged sections "$B/kernels_prefill_sm90_sections_test"
  run_logged prefill_suite_full "$T"
}
room 500 "sanitizers" && both_sanitizers tiling "$T" \
  'PrefillGpu.TileEdges:PrefillGpu.TileEdgesHeadDim256:PrefillGpu.TileHandoverOnAndOff:PrefillGpu.DynamicTileSchedule:PrefillGpuFeatures.TileHandover'
echo "end ${SECONDS}s"
