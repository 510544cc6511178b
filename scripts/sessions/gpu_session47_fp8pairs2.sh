#!/usr/bin/env bash
# Session 47, call 3: the fp8 permute diet, three builds of gpu_decode_bench in one process
# order: old (before c239d4a), new1 (c239d4a: K's pairs adjacent at every head_dim), new2 (this
# tree, 0db6641: head_dim 64 keeps K's permutes; call 2 saw its swapped CTA-sweep kernel at 113
# registers against 102 and 8x32768 9/3 d64 fp8 +1.6-2.1%). old and new1 come in
# build-carry-s47; new2 and the decode suite are built here (sm_90a).
#   1. the decode suite (quick);
#   2. gpu_decode_bench --only fp8 --variants default, old / new1 / new2, three rounds;
#   3. Nsight Compute: instructions, time, DRAM and issue activity of the fp8 split kernels
#      at 64x4096 32/8 d128 and 96x4096 9/3 d64, old and new2.
#   run: LIMIT=470 bash scripts/sessions/gpu_session47_fp8pairs2.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private, build-carry-s47
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, kvattn_gpu_build
source scripts/device_carried.sh  # B, run_logged, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-470}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON gpu_decode_bench kernels_decode_gpu_test
mkdir -p "$B"
for v in old new1; do
  xz -dc "build-carry-s47/gpu_decode_bench_$v.xz" > "$B/gpu_decode_bench_$v" && chmod +x "$B/gpu_decode_bench_$v"
done
cp build-gpu/bench/gpu_decode_bench "$B/gpu_decode_bench_new2"
echo "built at ${SECONDS}s"
step "decode suite (quick)"
run_logged decode_test timeout 220 env KVATTN_GPU_TEST_QUICK=1 \
  build-gpu/tests/kernels/kernels_decode_gpu_test
step "fp8 rows: old / new1 / new2, three rounds"
declare -A logs
for round in 1 2 3; do
  for v in old new1 new2; do
    room $((LIMIT - 110)) "fp8 $v r$round" || break 2
    f="$OUT/fp8_${v}_r$round.txt"
    timeout 60 "$B/gpu_decode_bench_$v" --only fp8 --variants default > "$f" 2>&1
    echo "fp8 $v r$round rc=$?"
    logs[$v]="${logs[$v]:+${logs[$v]},}$f"
  done
done
python3 scripts/bench_ab_table.py "decode default" "old=${logs[old]}" "new1=${logs[new1]}" \
  "new2=${logs[new2]}"
step "ncu: fp8 split kernels, old / new2"
ncu_kernel() {  # LABEL BIN HEAD_DIM ONLY
  room $((LIMIT - 25)) "ncu $1" || return
  timeout 60 ncu --clock-control none --kernel-name-base demangled \
    -k "regex:decode_kernel<__nv_bfloat16, unsigned char, .int.$3," --launch-count 1 \
    --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active \
    "$B/$2" --only "$4" --variants default > "$OUT/ncu_$1.txt" 2>&1
  echo "ncu $1 rc=$?"
  grep -E "inst_executed|time_duration|dram__throughput|issue_active" "$OUT/ncu_$1.txt" | sed -E 's/  +/ /g'
}
for v in old new2; do
  ncu_kernel "d128_$v" "gpu_decode_bench_$v" 128 fp8
  ncu_kernel "d64_$v" "gpu_decode_bench_$v" 64 d64fp8
done
echo "end ${SECONDS}s"
