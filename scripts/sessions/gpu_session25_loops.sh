#!/usr/bin/env bash
# Session 25, call 4: the consumers' key loop forms (Tile::kConsumerLoop, bench rows loop0-3,
# all launched by the bench's own path, loop0 the library's loop: call 3 compared them with
# the library's entry, whose row came out 2% slower for every form alike): 1 O's rescale
# before the GEMM turn, 2 the unmasked key tiles in a loop of their own, 3 both; three rounds
# on the head_dim 128 packed shapes (err_vs_def must be 0: the same arithmetic).
#   run: bash scripts/sessions/gpu_session25_loops.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-s25b (gpu_prefill_bench; debs/)
# (After the call: form 1 became Tile::kRescaleBeforeTurn, form 2 was removed, and the bench's
# loop rows gave way to `turnflip`; this script documents calls 3-4 and no longer runs as is.)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${CARRY:-build-carry-s25b}"
trap pack_out EXIT
for round in 1 2 3; do
  for shape in "1x16384 32/8" "8x2048 32/8" "16x1024 16/8"; do
    room 420 "bench $shape r$round" || break
    timeout 120 "$B/gpu_prefill_bench" --reps 50 --only "$shape" >"$OUT/bench.log" 2>&1
    echo "[$shape r$round rc=$?]"
    grep -v '^{' "$OUT/bench.log" | grep -E " default | loop[0123] " | sed 's/^prefix 8x(512\/4096) 32\/8 /prefix /'
  done
done

echo "end ${SECONDS}s"
