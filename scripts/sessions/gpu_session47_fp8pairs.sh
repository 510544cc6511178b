#!/usr/bin/env bash
# Session 47, call 2: the fp8 decode's conversions without byte permutes for K (the hardware
# conversion reads each 16-bit half of a word in place, so K's pairs are adjacent codes and Q's
# dims follow) and with half of V's (two permutes interleave a key pair's words). Everything
# new is built here (sm_90a); the old gpu_decode_bench (HEAD 3576928 + NOTES, built before the
# change) comes in build-carry-s47.
#   1. the decode suite (quick): every fp8 form against its float64 reference;
#   2. gpu_decode_bench --only fp8 (each fp8 shape beside its bf16 twin, default plans), old /
#      new / old / new: the bf16 twins are the control (their kernels did not change);
#   3. Nsight Compute: instructions and time of the fp8 split kernel at 64x4096 32/8 d128 and
#      96x4096 9/3 d64, old and new.
# As run (call 2), step 2's row filter and step 3's kernel regex matched nothing (the bench
# prints JSON lines; ncu's demangled names read "(int)128"): gpu_session47_fp8pairs2.sh mends
# both. The rows are in the call's logs.
#   run: LIMIT=480 bash scripts/sessions/gpu_session47_fp8pairs.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private, build-carry-s47
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, kvattn_gpu_build
source scripts/device_carried.sh  # B, bench_rows, run_logged, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-480}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON gpu_decode_bench kernels_decode_gpu_test
mkdir -p "$B"
xz -dc build-carry-s47/gpu_decode_bench_old.xz > "$B/gpu_decode_bench_old" && chmod +x "$B/gpu_decode_bench_old"
cp build-gpu/bench/gpu_decode_bench "$B/gpu_decode_bench_new"
echo "built at ${SECONDS}s"
step "decode suite (quick)"
run_logged decode_test timeout 220 env KVATTN_GPU_TEST_QUICK=1 \
  build-gpu/tests/kernels/kernels_decode_gpu_test
step "fp8 rows, old / new alternating"
ROWS='^decode default \| '
for round in 1 2; do
  for v in old new; do
    room $((LIMIT - 120)) "fp8 $v r$round" || break 2
    bench_rows "fp8_${v}_r$round" "gpu_decode_bench_$v" "$ROWS" --only fp8 --variants default
  done
done
step "ncu: fp8 split kernels, old / new"
ncu_kernel() {  # LABEL BIN REGEX ONLY
  room $((LIMIT - 25)) "ncu $1" || return
  timeout 60 ncu --clock-control none --kernel-name-base demangled -k "regex:$3" \
    --launch-count 2 --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active \
    "$B/$2" --only "$4" --variants default > "$OUT/ncu_$1.txt" 2>&1
  echo "ncu $1 rc=$?"
  grep -E "decode_kernel<|inst_executed|time_duration|dram__throughput|issue_active" "$OUT/ncu_$1.txt" |
    sed -E 's/\(DecodeParams\).*//; s/  +/ /g' | head -12
}
for v in old new; do
  ncu_kernel "d128_$v" "gpu_decode_bench_$v" 'decode_kernel<__nv_bfloat16, unsigned char, 128' fp8
  ncu_kernel "d64_$v" "gpu_decode_bench_$v" 'decode_kernel<__nv_bfloat16, unsigned char, 64' d64fp8
done
echo "end ${SECONDS}s"
