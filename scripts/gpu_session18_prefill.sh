#!/usr/bin/env bash
# Session 18, call 3 (issue 15): the consumers' look-ahead tile decode as committed:
#   1. the whole prefill suite, racecheck and memcheck on the tile-edge tests (the prefill test
#      built here, carried xz'd in build-carry-s18);
#   2. the same-process peer table (cuDNN, FlashInfer's FA3 backend; graph replay and flushed):
#      scripts/gpu_prefill_peers.sh with the time left.
#   run: bash scripts/gpu_session18_prefill.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-s18 .deps .peers
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
step() { echo; echo "== $* == ($(date +%T))"; }
mkdir -p /tmp/bin && xz -dc build-carry-s18/prefill_test_new.xz > /tmp/bin/t && chmod +x /tmp/bin/t
verdict() { echo "$1 rc=$2 $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$1.log" | tr '\n' ' ')"
            grep -m5 -E "Failure|illegal|Which is" "$OUT/$1.log"; }
step "1. the whole prefill suite, then the sanitizers"
timeout 200 /tmp/bin/t >"$OUT/full.log" 2>&1; verdict full $?
for tool in racecheck memcheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/bin/t \
    --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.PagedProducerWarps:PrefillGpuFeatures.WindowTileEdges' \
    >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/$tool.log" | tail -n 1)"
done
step "2. peers (${SECONDS}s gone)"
PREFILL_PEERS_BACKENDS=fa3 PEERS_TIMEOUT=$((560 - SECONDS)) bash scripts/gpu_prefill_peers.sh
