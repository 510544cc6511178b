#!/usr/bin/env bash
# Session 17, call 1 (issues 16, 20, 15): what session 16 wrote after its device time.
#   1. the decode suite, with DecodeGpu.ProgrammaticLaunchAfterAWriter (DecodeArgs::pdl), from
#      the binary built here (build-carry-xz), while the engine builds;
#   2. the engine's single stream with the decode attention launched with PDL or not
#      (KVATTN_DECODE_PDL=0/1, alternating; prediction +2-4%);
#   3. racecheck on the tile-handover build after the __syncwarp fix (session 16: 197 hazards).
#   run: bash scripts/sessions/gpu_session17_first.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: .deps build-carry-xz (xz'd, stripped binaries built here: see the NOTES)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
mkdir -p /tmp/bin && for f in build-carry-xz/*.xz; do
  xz -dc "$f" > "/tmp/bin/$(basename "$f" .xz)" && chmod +x "/tmp/bin/$(basename "$f" .xz)"
done
T=/tmp/bin/kernels_decode_gpu_test
step "1. decode suite (PDL test first), beside the engine build"
( run_test decode_pdl 120 "$T" --gtest_filter='DecodeGpu.ProgrammaticLaunchAfterAWriter'
  run_test decode_all 300 "$T" ) > /tmp/decode_tests.txt 2>&1 &
tests=$!
step build
kvattn_gpu_build OFF kvattn_cli
wait $tests; cat /tmp/decode_tests.txt
step "2. single stream (128 + 256), decode attention with PDL 0 / 1"
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 1
for round in 1 2 3; do
  for v in 0 1; do
    KVATTN_DECODE_PDL=$v timeout 90 build-gpu/kvattn bench --model /tmp/q06 --device cuda \
      --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
      --single-input 128 --single-output 256 >"$OUT/ss_${v}_r${round}.log" 2>&1
    echo "round $round KVATTN_DECODE_PDL=$v rc=$?: $(grep -i "single" "$OUT/ss_${v}_r${round}.log" | tail -n 1)"
  done
done
step "3. the tile handover under racecheck (prefill test built here with it in every tile)"
KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 \
  /tmp/bin/prefill_test_pd \
  --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.PagedProducerWarps' \
  >"$OUT/pd_racecheck.log" 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/pd_racecheck.log" | tail -n 1)"
grep -m5 -E "Race reported|Error:|hazard" "$OUT/pd_racecheck.log"
