#!/usr/bin/env bash
# Session 10's verification call: everything written this session without a GPU, in one build
# (Release, sm_90a, benches on) and one call of under 10 minutes on a 16-core H200 machine.
#   1. decode (issue 16/18): the decode GPU suite without the 45 s edge shapes (cache_leftpad
#      on CUDA, the warp-bound heads-per-CTA rule at head_dim 256 and 80/96), memcheck on the
#      leftpad tests;
#   2. Hopper prefill features and head_dim 256 (issue 18): the feature tests on the default
#      path and on both kernels, the plain quick tests, memcheck on a quick feature list;
#   3. Gemma 2 / 3 on the CUDA engine (issue 19): the Gemma kernels against the host reference,
#      the families GPU test on the Gemma cases (HF parity, greedy, graphs on == off, features
#      applied, GPU vs CPU), a regression run of the other families' teacher-forced cases;
#   4. timings: decode at head_dim 256/80/96 (default = the new rule beside the old configs)
#      and the d128/d64 shapes; prefill features and head_dim 256 (Hopper vs sm_80 ext).
#   run: bash scripts/sessions/gpu_session10_verify.sh   (carry .deps)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader

step build
kvattn_gpu_build ON kernels_decode_gpu_test gpu_decode_bench kernels_prefill_gpu_test \
  gpu_prefill_bench engine_model_families_gpu_test engine_cuda_gemma_gpu_test
D=build-gpu/tests/kernels/kernels_decode_gpu_test
P=build-gpu/tests/kernels/kernels_prefill_gpu_test
E=build-gpu/tests/engine

step "1. decode suite (no edge shapes)"
run_test decode 150 "$D" --gtest_filter='-DecodeGpu.ShapesAtTheEdges*'
grep -E "^\[ +(OK|FAILED) +\]" "$OUT/decode.log" | head -24
step "1. memcheck: leftpad tests (quick)"
KVATTN_GPU_TEST_QUICK=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$D" \
  --gtest_filter='DecodeGpuFeatures.LeftpadTileEdges:DecodeGpuFeatures.RandomSweep' \
  >"$OUT/memcheck_decode.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_decode.log" | tail -n 1)"

step "2. prefill features, default path (Hopper kMods / d256 where eligible)"
run_test prefill_features 150 "$P" --gtest_filter='PrefillGpuFeatures.*:-*BothPaths*'
step "2. prefill features on both kernels"
run_test prefill_both 120 "$P" --gtest_filter='*BothPaths*'
step "2. prefill plain (quick)"
KVATTN_GPU_TEST_QUICK=1 run_test prefill_plain 60 "$P" --gtest_filter='PrefillGpu.*'
step "2. memcheck: prefill feature tests (quick)"
KVATTN_GPU_TEST_QUICK=1 timeout 75 compute-sanitizer --tool memcheck --error-exitcode 9 "$P" \
  --gtest_filter='PrefillGpuFeatures.BothPathsTileEdges:PrefillGpuFeatures.WindowSkipsTilesBeforeIt' \
  >"$OUT/memcheck_prefill.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_prefill.log" | tail -n 1)"

step "3. Gemma kernels vs host reference"
run_test cuda_gemma 60 $E/engine_cuda_gemma_gpu_test
step "3. families on CUDA: Gemma cases, GPU vs CPU, features"
run_test families_gemma 200 $E/engine_model_families_gpu_test \
  --gtest_filter='HF/FamilyGpu.*gemma*:FamilyGpuFeatures.*:FamilyGpuVsCpu.*'
grep -E "teacher-forced vs HF|without|gpu vs cpu|tokens equal HF|HF margin" \
  "$OUT/families_gemma.log" | head -40
step "3. families on CUDA: the others, teacher-forced (regression)"
run_test families_others 90 $E/engine_model_families_gpu_test \
  --gtest_filter='HF/FamilyGpu.TeacherForced*:-*gemma*'

step "4. timing: decode (quick, 30 reps)"
timeout 150 build-gpu/bench/gpu_decode_bench --only decode --quick --reps 30 >"$OUT/decode_bench.log" 2>&1
echo "decode bench rc=$?"
grep '^{' "$OUT/decode_bench.log" >"$OUT/decode_bench.jsonl"
python3 - "$OUT/decode_bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"us"' in l]
keep = ("decode default", "decode swap h4 s2", "decode swap h2", "decode swap h1", "decode s3",
        "decode h4 s2", "decode swap h2 s2", "decode swap h1 s2")
for r in rows:
    if r["op"] in keep and "flush: read" not in r["note"]:
        print(f"{r['shape']:32s} {r['op']:20s} {r['us']:8.2f} us {r['TBps']:5.2f} TB/s")
PY
step "4. timing: prefill features and head_dim 256"
timeout 60 build-gpu/bench/gpu_prefill_bench --features --reps 20 >"$OUT/prefill_features_bench.log" 2>&1
echo "bench rc=$?"; grep -v '^{' "$OUT/prefill_features_bench.log" | tail -n 30
timeout 45 build-gpu/bench/gpu_prefill_bench --d256 --reps 20 >"$OUT/prefill_d256_bench.log" 2>&1
echo "bench rc=$?"; grep -v '^{' "$OUT/prefill_d256_bench.log" | tail -n 20
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
