#!/usr/bin/env bash
# Session 17, call 2 (issues 20, 16, 15):
#   1. does racecheck take mbarrier waits as ordering? bench/micro/mbar_handoff_race.cu, four
#      handoff forms (plain mbarrier, expect_tx + bulk copy, named barriers, st.async);
#   2. the decode suite with the early dependent-launch consent (decode_pdl_trigger) and the
#      engine's PDL tests with the decode attention launched with PDL by default;
#   3. single stream with KVATTN_DECODE_PDL_TRIGGER=0 / 1 alternating, and KVATTN_DECODE_PDL=0;
#   4. the prefill tile handover written by st.async (a build with it in every tile, made here):
#      the whole prefill suite (in step 2) and racecheck on the handover's tests.
#   run: bash scripts/sessions/gpu_session17_trigger.sh > $OUT/summary.txt 2>&1; tail -n 45 $OUT/summary.txt
#   carry: build-carry-xz (xz'd stripped binaries built here, and the runtime .debs they load)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
step "1. racecheck and the mbarrier handoff"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc bench/micro/mbar_handoff_race.cu \
  -o /tmp/mbar_race 2>&1 | tail -n 3
for m in 0 1 2 3; do
  timeout 60 compute-sanitizer --tool racecheck /tmp/mbar_race $m > "$OUT/mbar_race_$m.log" 2>&1
  echo "rc=$? $(grep -E '^mode' "$OUT/mbar_race_$m.log") | $(grep -E 'RACECHECK SUMMARY' "$OUT/mbar_race_$m.log")"
done
step "unpack the carried binaries"
mkdir -p /tmp/bin /opt/kvrun && for f in build-carry-xz/*.xz; do
  xz -dc "$f" > "/tmp/bin/$(basename "$f" .xz)" && chmod +x "/tmp/bin/$(basename "$f" .xz)"
done
for f in build-carry-xz/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ldd /tmp/bin/kvattn | grep "not found"
# The engine tests find tests/data under the source path they were built in (/work/main).
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
T=/tmp/bin/kernels_decode_gpu_test
step "2. decode suite (PDL test first), engine PDL tests"
run_test decode_pdl 120 "$T" --gtest_filter='DecodeGpu.ProgrammaticLaunchAfterAWriter'
run_test decode_all 300 "$T" &
run_test prefill_pd_all 300 /tmp/bin/prefill_test_pd &
run_test engine_pdl 300 /tmp/bin/engine_pdl_gpu_test
wait
step "3. single stream (128 + 256): the decode's early consent 0 / 1, and no decode PDL"
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 1
ss() {  # ss LABEL ENV...
  env "${@:2}" timeout 90 /tmp/bin/kvattn bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(grep -i "single" "$OUT/ss_$1.log" | tail -n 1)"
}
for round in 1 2 3; do
  ss "trigger0_r$round" KVATTN_DECODE_PDL_TRIGGER=0
  ss "trigger1_r$round" KVATTN_DECODE_PDL_TRIGGER=1
done
ss "nodecodepdl" KVATTN_DECODE_PDL=0
step "4. the st.async tile handover under racecheck"
KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 \
  /tmp/bin/prefill_test_pd \
  --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.PagedProducerWarps' \
  >"$OUT/pd_racecheck.log" 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/pd_racecheck.log" | tail -n 1)"
grep -m4 -E "Race reported|Error:" "$OUT/pd_racecheck.log"
