#!/usr/bin/env bash
# Session 26, call 2: the uniform warpgroup index on at head_dim 256 only (build C, the new
# default), checked where call 1 did not look: the window / softcap / ALiBi (kMods) shapes,
# whose head_dim 256 kernel spills 24 bytes with it. Build A (call 1's, off everywhere) and
# build C alternate, three rounds, the features bench's head_dim 256 rows. Then the whole prefill
# suite and the sections test on build C, and the paged decode's loading pattern with a longer
# stand-in for its math (bench/micro/read_rate.cu: where does the math start to cost?).
#   run: bash scripts/sessions/gpu_session26_second.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s26a (gpu_prefill_bench), build-carry-s26c (kvattn, gpu_prefill_bench,
#          kernels_prefill_gpu_test, kernels_prefill_sm90_sections_test, read_rate; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s26c
BA=/tmp/binA
carried_bins build-carry-s26a "$BA"
trap pack_out EXIT
timeout 60 "$B/read_rate" >"$OUT/read_rate.log" 2>&1; echo "read_rate rc=$?"
grep -E "^paged|1024 threads" "$OUT/read_rate.log"
for round in 1 2 3; do
  for build in A C; do
    room 300 "features $build r$round" || break 2
    bin="$B/gpu_prefill_bench"; [ "$build" = A ] && bin="$BA/gpu_prefill_bench"
    timeout 120 "$bin" --features --only d256 --reps 20 >"$OUT/features_${build}_r$round.log" 2>&1
    echo "features $build r$round rc=$?"
    grep -v '^{' "$OUT/features_${build}_r$round.log" | grep -E "ceiling|d256.* default "
  done
done
room 420 "suite" && {
  run_logged sections "$B/kernels_prefill_sm90_sections_test"
  run_logged prefill_suite_full "$B/kernels_prefill_gpu_test"
}
echo "end ${SECONDS}s"
