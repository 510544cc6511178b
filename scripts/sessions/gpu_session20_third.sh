#!/usr/bin/env bash
# Session 20, call 3: the small decode kernel's pre-wait work (its length's split and block-id
# reload moved before the PDL wait; the first two tiles' K/V rows asked of L2 there,
# KVATTN_DECODE_PREWAIT_PREFETCH, on): the decode suite and memcheck, the engine's PDL tests,
# then the single stream and nano-vllm's workload with the prefetch off and on, alternating
# (one binary).
#   run: bash scripts/sessions/gpu_session20_third.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s20c
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s20c
random_qwen3_06b
trap pack_out EXIT
t() {  # $1: label, then the command
  local name=$1; shift
  timeout 240 "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$?: $(grep -E "PASSED|FAILED|ERROR SUMMARY" "$OUT/$name.log" | head -n 4 | tr '\n' ' ')"
  grep -m6 -E "Failure|Which is|error:" "$OUT/$name.log"
}
KVATTN_GPU_TEST_QUICK=1 t decode_suite "$B/kernels_decode_gpu_test"
t memcheck_decode_pdl compute-sanitizer --tool memcheck "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.ProgrammaticLaunchAfterAWriter:DecodeGpu.CudaGraphCaptureAndReplay:DecodeGpu.BadIndicesAreCaughtByTheFaultWord'
t engine_pdl "$B/engine_pdl_gpu_test"
t engine_fused "$B/engine_fused_gemv_engine_gpu_test"
for round in 1 2 3 4; do
  for pf in 0 1; do KVATTN_DECODE_PREWAIT_PREFETCH=$pf single_stream "pf${pf}_r$round" kvattn; done
done
room() { [ $SECONDS -lt "$1" ] || { echo "skipped ($2): ${SECONDS}s gone"; return 1; }; }
for pf in 0 1; do
  room 420 "nano-vllm pf$pf" || break
  KVATTN_DECODE_PREWAIT_PREFETCH=$pf timeout 90 "$B/kvattn" bench --model /tmp/q06 --device cuda \
    >"$OUT/nano_pf$pf.log" 2>&1
  echo "nano-vllm pf$pf rc=$?: $(tr '\r' '\n' < "$OUT/nano_pf$pf.log" | grep -E "tok/s" | head -n 3 | tr '\n' ' ')"
done
echo "end ${SECONDS}s"
