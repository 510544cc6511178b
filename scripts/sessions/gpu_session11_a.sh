#!/usr/bin/env bash
# Session 11, second GPU call: the fp8 swapped decode tile on by default (and the planner that
# sizes its stream ranges where a 16-bit cache would take the small kernel), the prefill GEMM
# turns across tiles on by default; the whole decode suite, the engine tests the first call
# failed on (the planner asked for the fp8 swapped tile at head_dim 256), memcheck; then the
# decode peers in one process (bf16 and fp8 rows). Starts the 8B-shaped checkpoint for the
# next call (scripts/gpu_load_time.sh reuses it) in the background.
#   run: bash scripts/sessions/gpu_session11_a.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
T=/tmp/t
mkdir -p "$T"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
verdict() {
  echo "-- $1: $(grep -E '^\[  (PASSED|FAILED)' "$2" | tr '\n' ' ')"
  grep -E -A2 "^\[ +FAILED +\]|Failure|Which is|case [0-9]+ seed" "$2" | head -16
}
t() {
  local name=$1 limit=$2 bin=$3
  shift 3
  timeout "$limit" "$bin" "$@" >"$T/$name.log" 2>&1
  echo "   rc=$?"
  verdict "$name" "$T/$name.log"
}
CKPT=/tmp/q8b_L36
if [ ! -f "$CKPT/model.safetensors" ]; then
  (PYTHONUNBUFFERED=1 timeout 900 python3 scripts/make_random_qwen3.py --shape 8b --layers 36 \
     --out "$CKPT" >/tmp/checkpoint.log 2>&1) &
fi

step build
kvattn_gpu_build ON kernels_decode_gpu_test gpu_decode_bench kernels_prefill_gpu_test \
  engine_pdl_gpu_test engine_load_16bit_gpu_test engine_load_16bit_test engine_model_gpu_test \
  kvattn_cli gpu_load_time_bench
D=build-gpu/tests/kernels/kernels_decode_gpu_test
P=build-gpu/tests/kernels/kernels_prefill_gpu_test
E=build-gpu/tests/engine

step "engine: 16-bit load == float32 load; PDL == plain; model"
t load16 120 $E/engine_load_16bit_gpu_test
grep -E "logits differ" "$T/load16.log" | head -8
t pdl 200 $E/engine_pdl_gpu_test
t model 120 $E/engine_model_gpu_test
step "decode: the whole suite (fp8 on the swapped tile by default)"
t decode 300 "$D"
step "decode with the fp8 swapped tile off (KVATTN_DECODE_SWAP=0), fp8 tests"
KVATTN_DECODE_SWAP=0 t decode_noswap 120 "$D" --gtest_filter='*Fp8*'
step "memcheck: decode fp8 + sweeps (quick)"
KVATTN_GPU_TEST_QUICK=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$D" \
  --gtest_filter='DecodeGpu.Fp8*:DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpuFeatures.LeftpadTileEdges' >"$T/memcheck_decode.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$T/memcheck_decode.log" | tail -n 1)"
step "prefill (turns across tiles now the default): plain suite (quick), features"
KVATTN_GPU_TEST_QUICK=1 t prefill 90 "$P" --gtest_filter='PrefillGpu.*'
t prefill_features 150 "$P" --gtest_filter='PrefillGpuFeatures.*'

step "decode bench: fp8 shapes (swapped tile default) beside bf16"
timeout 150 build-gpu/bench/gpu_decode_bench --only fp8 --reps 40 >"$T/fp8_bench.log" 2>&1
echo "rc=$?"
grep '^{' "$T/fp8_bench.log" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if "us" in r and "flush: read" not in r.get("note", "") and r["op"] in ("decode default", "decode noswap", "decode swap nosmall", "ceiling"):
        print("%-34s %-22s %8.2f us %5.2f TB/s %s" % (r["shape"], r["op"], r["us"], r.get("TBps", 0), r.get("note", "")))'
cp "$T/fp8_bench.log" "$OUT/" 2>/dev/null

export PEERS_TIMEOUT=${PEERS_TIMEOUT:-240}
kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 40
ls -la "$CKPT" 2>/dev/null | tail -3
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
