#!/usr/bin/env bash
# Written at the end of session 29 (its device time ran out before this ran). 3 stages for the
# 16-bit d64 16-row tile (decode_d64_stages / KVATTN_DECODE_D64_STAGES=3; 2 by default until
# this passes): session 29's bench had it at 8x32768 9/3 65.3 -> 59.0 us, 1x8192 9/3 15.2 ->
# 14.1, 96x4096 and 256x1024 d64 +0.4-0.8%.
#   0. bench/micro/read_rate.cu's paged part: the decode's loading order (warp rows) against
#      whole pages swept by the CTA, loads only and with stand-in math (the d64 lead of
#      docs/notes/decode-next.md, session 29);
#   1. the decode suite (quick) with KVATTN_DECODE_D64_STAGES=3 (and its new "s3" variant,
#      3 stages at every head_dim), memcheck and racecheck under it over the sweeps;
#   1b. the engine over fp8 caches (TMA by default since session 29): engine_model_gpu_test
#      (carried as build-carry-s30a/engine_model_gpu_test.xz) and nano-vllm at bf16 and fp8;
#   2. the bench's quick rows with the knob at 3 against the default (2), one process: `s3`
#      is the same configuration at d64 (the d64 rows are what to read);
#   3. where 96x4096 9/3 d64 spends its time (0.87 of cuDNN in session 29, and neither TMA nor
#      3 stages moved it): the merge left out ("diag nomerge"), the swapped tile, heads per
#      CTA, the small kernel at 1-2 chunks; ncu of its split and merge kernels.
# If 1 passes and 2 holds: decode_d64_stages = 3 in tuning.h, and the same-run peers.
#   run: bash scripts/sessions/gpu_session30_first.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s30a (kernels_decode_gpu_test, gpu_decode_bench, kvattn,
#          engine_cascade_decode_gpu_test, gpu_prefill_bench, kernels_prefill_gpu_test; debs/;
#          engine_model_gpu_test.xz and read_rate beside them, the latter built by
#          `nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc
#          bench/micro/read_rate.cu`)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s30a
trap pack_out EXIT
timeout 90 build-carry-s30a/read_rate paged >"$OUT/read_rate.log" 2>&1; echo "read_rate rc=$?"
grep -E "^paged" "$OUT/read_rate.log"
sweeps='DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpu.ModerateBatchesAcrossKernelChoices:DecodeGpu.BadIndicesAreCaughtByTheFaultWord:DecodeGpuFeatures.RandomSweep'
KVATTN_DECODE_D64_STAGES=3 KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite_d64s3 "$B/kernels_decode_gpu_test"
room 200 "sanitizers" && KVATTN_DECODE_D64_STAGES=3 both_sanitizers d64s3 "$B/kernels_decode_gpu_test" "$sweeps"
# The engine over fp8 caches now decodes by the TMA issue (session 29's pick): the model tests
# (fp8 against bf16 greedy agreement, twice the blocks, prefix hits) and nano-vllm's workload
# at bf16 and fp8 (issue 16: fp8 >= bf16 there).
xz -dc build-carry-s30a/engine_model_gpu_test.xz >"$B/engine_model_gpu_test" &&
  chmod +x "$B/engine_model_gpu_test"
room 260 "engine model test" && run_logged engine_model "$B/engine_model_gpu_test"
random_qwen3_06b
for kv in bf16 fp8; do
  room 300 "nano-vllm $kv" || break
  timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda --kv-cache-dtype $kv \
    --single-input 16 --single-output 8 --ttft-input 16 >"$OUT/nano_$kv.log" 2>&1
  echo "nano-vllm $kv rc=$?: $(tr '\r' '\n' < "$OUT/nano_$kv.log" | grep -E "Throughput|KV pool|blocks|single stream" | head -n 4 | tr '\n' ' ')"
done
for r in 1 2; do
  room 330 "decode r$r" || break
  timeout 120 "$B/gpu_decode_bench" --only decode --quick --variants 's3,copy' >"$OUT/decode_r$r.log" 2>&1
  echo "decode r$r rc=$?"
  grep -E '"decode (default|s3|copy)"' "$OUT/decode_r$r.log" | grep -E 'd64' | grep -E 'no flush|flush: read' |
    sed -E 's/.*"op": "decode ([^"]*)", "shape": "([^"]*)", "us": ([0-9.]+).*"frac_copy": ([0-9.]+).*rel_l2 vs default ([^,]*), ([^"]*)".*/\2 | \1 | \3 us | \4 | \5 | \6/'
done
room 400 "d64 sweep" && {
  timeout 60 "$B/gpu_decode_bench" --only d64 --reps 30 \
    --variants 'diag nomerge,s3,s4,swap,swap s3,h4,h4 s2,small c1,small c2,small c1 w4' \
    >"$OUT/decode_d64.log" 2>&1
  echo "d64 sweep rc=$?"; grep -v '^{' "$OUT/decode_d64.log" | grep -E "^decode" | head -n 30
}
room 430 "ncu d64" && {
  timeout 80 ncu --clock-control none --kernel-name regex:'decode_kernel|merge_kernel' \
    --launch-count 2 --set full --import-source no -o /tmp/dec_d64 -f \
    "$B/gpu_decode_bench" --only d64 --reps 3 --variants default >"$OUT/ncu_d64.log" 2>&1
  echo "ncu d64 rc=$?"
  ncu --import /tmp/dec_d64.ncu-rep --page details --csv >"$OUT/dec_d64_details.csv" 2>&1
  grep -E '"(Duration|DRAM Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Block Limit Registers|Block Limit Shared Mem|Warp Cycles Per Issued Instruction|Issue Slots Busy|Grid Size|Block Size)"' \
    "$OUT/dec_d64_details.csv" | awk -F'","' '{k=$5; sub(/[<(].*/, "", k); print k " | " $(NF-2) " | " $(NF-1) " | " $NF}' | head -n 30
}
echo "end ${SECONDS}s"
