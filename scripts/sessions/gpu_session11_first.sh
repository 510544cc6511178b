#!/usr/bin/env bash
# The first GPU call of the session after session 10: everything session 10 wrote after its
# device time ran out, correctness first, in one build (Release, sm_90a, benches on):
#   1. decode: the fp8 swapped tile (issue 16; off by default, decode_swap = 1 turns it on):
#      the fp8 tests on both tiles, the variant sweeps (which include the swapped fp8 tile),
#      memcheck on the new tests; then `gpu_decode_bench --only fp8` (old vs swapped fp8 tile
#      beside the bf16 twin of each shape);
#   2. Hopper prefill with the GEMM turns across tiles (KVATTN_PREFILL_SM90_TURNS=1; off by
#      default): the full prefill suite and the feature suite with it on, racecheck and
#      memcheck on a quick list; then `gpu_prefill_bench` (variant "turns" beside "default");
#   0. first, the engine: the 16-bit weight load (issue 19; the LLM's default on CUDA, and its
#      uploader serves both load paths, so it is on the default path untested):
#      engine_load_16bit_gpu_test (logits bit-identical either way), the tiny-model and
#      fused-kernel tests as regressions; then PDL (issue 20; off by default, KVATTN_PDL=1):
#      engine_pdl_gpu_test.
# Per-test logs stay on the machine (/tmp/t); the verdicts and figures go to stdout, so run it
# as   bash scripts/sessions/gpu_session11_first.sh > $OUT/summary.txt 2>&1; tail -n 120 $OUT/summary.txt
# (a call cut at its limit still brings summary.txt back). About 8-9 minutes on a 16-core H200.
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
T=/tmp/t
mkdir -p "$T"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
verdict() {  # NAME LOG: the gtest verdict lines of a log
  echo "-- $1: $(grep -E '^\[  (PASSED|FAILED)' "$2" | tr '\n' ' ')"
  grep -E "^\[ +FAILED +\]|Failure|Which is|case [0-9]+ seed" "$2" | head -12
}
t() {  # NAME SECONDS BINARY ARGS...: runs a test binary, log in /tmp/t, verdict to stdout
  local name=$1 limit=$2 bin=$3
  shift 3
  timeout "$limit" "$bin" "$@" >"$T/$name.log" 2>&1
  echo "   rc=$?"
  verdict "$name" "$T/$name.log"
}

step build
kvattn_gpu_build ON kernels_decode_gpu_test gpu_decode_bench kernels_prefill_gpu_test \
  gpu_prefill_bench engine_pdl_gpu_test engine_load_16bit_gpu_test engine_model_gpu_test \
  engine_fused_kernels_gpu_test kvattn_cli
D=build-gpu/tests/kernels/kernels_decode_gpu_test
P=build-gpu/tests/kernels/kernels_prefill_gpu_test
E=build-gpu/tests/engine

step "0. engine first (the 16-bit load and its uploader are on the default CUDA path): 16-bit load == float32 load, regressions, PDL == plain"
t load16 120 $E/engine_load_16bit_gpu_test --gtest_filter='-*LoadTime*'
t model 120 $E/engine_model_gpu_test
t fused 90 $E/engine_fused_kernels_gpu_test
t pdl 200 $E/engine_pdl_gpu_test

step "1. decode: fp8 on both tiles, variant sweeps"
t decode_fp8 200 "$D" --gtest_filter='DecodeGpu.Fp8*:DecodeGpuFeatures.Fp8*:DecodeGpuVariants.*:DecodeGpuFeatures.Variants'
step "1. decode: the rest of the suite (quick)"
KVATTN_GPU_TEST_QUICK=1 t decode_rest 90 "$D" --gtest_filter='-DecodeGpu.Fp8*:DecodeGpuFeatures.Fp8*:DecodeGpuVariants.*:DecodeGpuFeatures.Variants'
step "1. memcheck: the swapped fp8 tile's tests (quick)"
KVATTN_GPU_TEST_QUICK=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$D" \
  --gtest_filter='*SwappedTile*' >"$T/memcheck_decode.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$T/memcheck_decode.log" | tail -n 1)"

step "2. prefill with KVATTN_PREFILL_SM90_TURNS=1: plain suite (quick) and features"
KVATTN_PREFILL_SM90_TURNS=1 KVATTN_GPU_TEST_QUICK=1 t prefill_turns 90 "$P" --gtest_filter='PrefillGpu.*'
KVATTN_PREFILL_SM90_TURNS=1 t prefill_turns_features 120 "$P" --gtest_filter='PrefillGpuFeatures.*:-*BothPaths*'
step "2. racecheck + memcheck with the turns across tiles (quick)"
KVATTN_PREFILL_SM90_TURNS=1 KVATTN_GPU_TEST_QUICK=1 timeout 90 compute-sanitizer --tool racecheck \
  --error-exitcode 9 "$P" --gtest_filter='PrefillGpu.TileEdges' >"$T/racecheck_prefill.log" 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$T/racecheck_prefill.log" | tail -n 1)"
KVATTN_PREFILL_SM90_TURNS=1 KVATTN_GPU_TEST_QUICK=1 timeout 60 compute-sanitizer --tool memcheck \
  --error-exitcode 9 "$P" --gtest_filter='PrefillGpu.TileEdges' >"$T/memcheck_prefill.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$T/memcheck_prefill.log" | tail -n 1)"

step "4. timing: decode fp8, old vs swapped tile (and the bf16 twins)"
timeout 150 build-gpu/bench/gpu_decode_bench --only fp8 --reps 40 >"$T/fp8_bench.log" 2>&1
echo "rc=$?"
grep '^{' "$T/fp8_bench.log" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if "us" in r and "flush: read" not in r.get("note", ""):
        print(f"{r[\"shape\"]:34s} {r[\"op\"]:22s} {r[\"us\"]:8.2f} us {r[\"TBps\"]:5.2f} TB/s")'
step "4. timing: prefill, turns across tiles (variant turns) beside the default"
timeout 150 build-gpu/bench/gpu_prefill_bench --reps 20 >"$T/prefill_bench.log" 2>&1
echo "rc=$?"; grep -v '^{' "$T/prefill_bench.log" | tail -n 45
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
