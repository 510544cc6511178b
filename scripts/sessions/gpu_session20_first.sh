#!/usr/bin/env bash
# Session 20, call 1 (prepared in session 19; binaries built then at bc012e2 and carried):
# (1) the RoPE kernel's early cache-slot load (written after session 19's device time): the
# tests of the kernels it touches, memcheck, and the single stream alternating with session
# 19's call-5 binary (kvattn_s19); the CUDA model's fp8 calibration test (then the CLI's
# --kv-calibration-prompt gate on CUDA can go: apps/engine_options.cpp); (2) the small
# decode kernel at 4 warps a CTA on the decode bench's rows (quick: page 16), default beside
# KVATTN_DECODE_SMALL_WARPS=4, for an engine-side choice at short contexts (single stream
# +0.9% with it in session 19); (3) ncu of the rope epilogue's kernel against the pair it
# replaces.
#   run: bash scripts/sessions/gpu_session20_first.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s20a
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s20a
random_qwen3_06b
t() {  # $1: label, then the command
  local name=$1; shift
  timeout 300 "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$?: $(grep -E "PASSED|FAILED|ERROR SUMMARY" "$OUT/$name.log" | head -n 4 | tr '\n' ' ')"
}
for tb in engine_fused_rope_kv_gpu_test engine_row_kernels_gpu_test engine_gemv_rope_kv_gpu_test \
          engine_fused_gemv_engine_gpu_test engine_pdl_gpu_test engine_kv_calibration_gpu_test; do
  t "$tb" "$B/$tb"
done
t memcheck_rope compute-sanitizer --tool memcheck "$B/engine_fused_rope_kv_gpu_test"
t memcheck_calibration compute-sanitizer --tool memcheck "$B/engine_kv_calibration_gpu_test" \
  --gtest_filter='KvAmaxRecord.*'
for round in 1 2 3; do single_stream "s19_r$round" kvattn_s19; single_stream "new_r$round" kvattn; done
for round in 1 2; do KVATTN_DECODE_SMALL_WARPS=4 single_stream "w4_r$round" kvattn; done
room() { [ $SECONDS -lt "$1" ] || { echo "skipped ($2): ${SECONDS}s gone"; return 1; }; }
# (3) Why the rope epilogue (KVATTN_FUSED_ROPE=1) lost 11%: ncu's kernel durations of a few
# decode steps with it (session 19's call 1 has the same list without it): the fused qkv
# GEMV against the GEMV + RoPE kernel pair it replaces.
if room 330 "ncu"; then
  KVATTN_FUSED_ROPE=1 timeout 150 ncu --clock-control none --cache-control none --csv \
    --print-units base --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__cluster_dim_x \
    "$B/kvattn" bench --model /tmp/q06 --device cuda --num-seqs 1 --min-input 16 --max-input 16 \
    --min-output 2 --max-output 2 --single-input 16 --single-output 6 > "$OUT/ncu_rope1.csv" 2>&1
  echo "ncu rope1 rc=$? lines $(wc -l < "$OUT/ncu_rope1.csv")"
fi
# (2) The decode bench (page 16 rows, fp8 rows too): the default rule (8 warps where that
# gives 4+ chunks, else 4), then 4 warps a small CTA everywhere.
for w in default 4; do
  room 480 "decode bench $w" || break
  ( [ "$w" = 4 ] && export KVATTN_DECODE_SMALL_WARPS=4
    timeout $((585 - SECONDS)) "$B/gpu_decode_bench" --only decode --quick > "$OUT/decode_$w.log" 2>&1
    echo "decode $w rc=$?")
  sed -n '/^SUMMARY/,$p' "$OUT/decode_$w.log" | head -n 30
done
echo "end ${SECONDS}s"
