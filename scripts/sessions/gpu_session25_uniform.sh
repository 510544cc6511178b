#!/usr/bin/env bash
# Next session's first prefill call (written in session 25, not run: its device time had run
# out): the consumers' warpgroup index broadcast from lane 0 (Tile::kUniformWarpgroup, the
# bench's `uniformwg` row: ptxas keeps the S = Q K^T descriptors in uniform registers, 18 -> 3
# R2UR in the head_dim 128 key loop) against the library's tiles, same process, two rounds
# of the default and head_dim 256 shapes (err_vs_def must be 0). If it wins, turn it on in
# Sm90PrefillTileFor and run the whole prefill suite and the sanitizers on that build.
#   run: bash scripts/sessions/gpu_session25_uniform.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: a build carry with gpu_prefill_bench (and debs/), e.g. CARRY=build-carry-s26a
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${CARRY:?set CARRY to the build carry folder}"
trap pack_out EXIT
for round in 1 2; do
  for set in "" --d256; do
    room 400 "bench $set r$round" || break 2
    timeout 150 "$B/gpu_prefill_bench" $set --reps 30 >"$OUT/bench${set}_r$round.log" 2>&1
    echo "bench $set r$round rc=$?"
    grep -v '^{' "$OUT/bench${set}_r$round.log" | grep -E "ceiling| default | uniformwg "
  done
done
echo "end ${SECONDS}s"
