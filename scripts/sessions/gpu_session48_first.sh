#!/usr/bin/env bash
# Session 48's first call, any card; no build (binaries built on the CPU machine, sm_90a):
#  1. branch exp-fp8-tma-xor-addr (the fp8 TMA tile's fragment reads as one XOR a read,
#     rebased on main): the decode suite (quick), racecheck + memcheck on its fp8 TMA cases;
#  2. gpu_decode_bench --only fp8 of main and of the branch, three rounds alternating
#     (scripts/bench_ab_table.py: the A/B and the fp8 / bf16 twin ratios), ncu on the d128
#     split kernel of each;
#  3. the engine GPU tests (quick) on session 47's cuda_model split, memcheck on the model
#     test's fp8 cases (scripts/sessions/gpu_session48_engine_tests.sh's list).
# build-carry-s48: bins.tar.xz (gpu_decode_bench_{main,xor}, kernels_decode_gpu_test_xor),
# engine/bins.tar.xz (the engine GPU tests of main), debs/ (their runtime packages).
#   run: LIMIT=540 bash scripts/sessions/gpu_session48_first.sh 2>&1 | tee $OUT/summary.txt
#   carry: build-carry-s48
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # OUT, step
source scripts/device_carried.sh  # B, carried_unpack, carried_bins, run_logged, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
carried_unpack build-carry-s48
carried_bins build-carry-s48/engine "$B"
ldd "$B/engine_model_gpu_test" | grep "not found"
echo "unpacked at ${SECONDS}s"

step "xor: decode suite (quick), sanitizers on the fp8 TMA cases"
run_logged decode_test_xor timeout 220 env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test_xor"
room $((LIMIT - 330)) "sanitizers" && both_sanitizers xor "$B/kernels_decode_gpu_test_xor" \
  'DecodeGpu.TmaCopyIssue:DecodeGpu.Fp8CodesReadExactlySwappedTile'

step "fp8 rows beside their bf16 twins, main / xor, three rounds"
main_logs="" xor_logs=""
for round in 1 2 3; do
  room $((LIMIT - 230)) "round $round" || break
  for v in main xor; do
    f="$OUT/ab_${v}_r$round.txt"
    timeout 60 "$B/gpu_decode_bench_$v" --only fp8 --variants default > "$f" 2>&1
    echo "$v r$round rc=$?"
    if [ "$v" = main ]; then main_logs="${main_logs:+$main_logs,}$f"; else xor_logs="${xor_logs:+$xor_logs,}$f"; fi
  done
done
[ -n "$xor_logs" ] && python3 scripts/bench_ab_table.py "decode default" "main=$main_logs" "xor=$xor_logs"

step "ncu: the fp8 d128 split kernel, main / xor"
for v in main xor; do
  room $((LIMIT - 190)) "ncu $v" || break
  timeout 60 ncu --clock-control none --kernel-name-base demangled \
    -k "regex:decode_kernel<__nv_bfloat16, unsigned char, .int.128," --launch-count 1 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__inst_issued.avg.pct_of_peak_sustained_active \
    "$B/gpu_decode_bench_$v" --only fp8 --variants default > "$OUT/ncu_$v.txt" 2>&1
  echo "ncu $v rc=$?"
  grep -E "decode_kernel|duration|dram__|inst_executed|inst_issued" "$OUT/ncu_$v.txt" | head -6
done

step "engine GPU tests (quick) on the cuda_model split"
for t in model fused_gemv_engine fused_kernels cuda_serving pdl token_layers model_families \
  cascade_decode kv_calibration; do
  room $((LIMIT - 40)) "$t" || break
  run_logged "$t" timeout 150 env KVATTN_GPU_TEST_QUICK=1 "$B/engine_${t}_gpu_test"
done
room $((LIMIT - 30)) "memcheck" && KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_model_fp8 \
  compute-sanitizer --tool memcheck --error-exitcode 9 "$B/engine_model_gpu_test" \
  --gtest_filter='*Fp8*'
echo "end ${SECONDS}s"
