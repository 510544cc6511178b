#!/usr/bin/env bash
# Session 27, call 1.
# (1) Issue 15: the lean key loop (Tile::kLeanLoop: ring slot and phase stepped, the V tail's
#     zeroing peeled, one comparison for the mask test) with the uniform warpgroup index, now
#     the library's tile at every head_dim. The bench's `s26` row is session 26's library tile
#     and `leanloop` the new one with the lean loop flipped, so one process compares them; two
#     rounds. err_vs_def must read 0 on both rows (the same arithmetic). Then the whole prefill
#     suite, the sections test and both sanitizers on the tiling cases.
# (2) Issue 16: Nsight Compute (full set + source counters) of the split decode kernel on
#     96x4096 9/3 d64 page 16, the 16-row tile (default) and the swapped one
#     (KVATTN_DECODE_SWAP=1), one launch each; details and per-SASS-line pages to $OUT as CSV.
#   run: bash scripts/sessions/gpu_session27_first.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s27a (kvattn, gpu_prefill_bench, gpu_decode_bench,
#          kernels_prefill_gpu_test, kernels_prefill_sm90_sections_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s27a
trap pack_out EXIT
for round in 1 2; do
  room 330 "round $round" || break
  timeout 150 "$B/gpu_prefill_bench" --reps 30 >"$OUT/bench_r$round.log" 2>&1
  echo "bench r$round rc=$?"
  grep -v '^{' "$OUT/bench_r$round.log" | grep -E "ceiling| default | s26 | leanloop "
  timeout 100 "$B/gpu_prefill_bench" --d256 --reps 30 >"$OUT/d256_r$round.log" 2>&1
  echo "d256 r$round rc=$?"
  grep -v '^{' "$OUT/d256_r$round.log" | grep -E " default | s26 | leanloop "
done
T="$B/kernels_prefill_gpu_test"
room 420 "suite" && {
  run_logged sections "$B/kernels_prefill_sm90_sections_test"
  run_logged prefill_suite_full "$T"
}
for sw in 0 1; do
  room 480 "ncu decode swap=$sw" || break
  KVATTN_DECODE_SWAP=$sw timeout 90 ncu --clock-control none --kernel-name regex:decode_kernel \
    --launch-count 1 --set full --import-source no -o "/tmp/dec_sw$sw" -f \
    "$B/gpu_decode_bench" --only d64 --reps 5 >"$OUT/ncu_dec_sw$sw.log" 2>&1
  echo "ncu swap=$sw rc=$?"; grep -E "decode default" "$OUT/ncu_dec_sw$sw.log" | head -n 2
  ncu --import "/tmp/dec_sw$sw.ncu-rep" --page details --csv >"$OUT/dec_sw${sw}_details.csv" 2>&1
  ncu --import "/tmp/dec_sw$sw.ncu-rep" --page source --csv --print-source sass 2>/dev/null |
    xz -T0 >"$OUT/dec_sw${sw}_source.csv.xz"
  grep -E '"(Duration|Memory Throughput|DRAM Throughput|Registers Per Thread|Achieved Occupancy|Executed Ipc Active|Theoretical Occupancy|Block Limit Registers|Warp Cycles Per Issued Instruction|Issue Slots Busy)"' \
    "$OUT/dec_sw${sw}_details.csv" | cut -d, -f12- | head -n 12
done
timeout 100 "$B/gpu_decode_bench" --only d64 --reps 30 >"$OUT/decode_d64.log" 2>&1
echo "decode d64 rc=$?"; grep -v '^{' "$OUT/decode_d64.log" | grep -E "^decode" | head -n 30
room 540 "sanitizers" && both_sanitizers tiling "$T" \
  'PrefillGpu.TileEdges:PrefillGpu.TileHandoverOnAndOff:PrefillGpu.DynamicTileSchedule:PrefillGpuFeatures.TileHandover'
echo "end ${SECONDS}s"
