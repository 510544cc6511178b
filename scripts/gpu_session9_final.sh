#!/usr/bin/env bash
# Session 9's last GPU call: the decode suite with head_dim 80/96/256 (after the merge fix),
# memcheck on quick sweeps, the decode variants' timings (page 16, --quick), then the CUDA
# model-family tests (scripts/gpu_model_families.sh) when present. About 8 minutes.
#   run: bash scripts/gpu_session9_final.sh   (carry .deps)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
source scripts/device_env.sh

step build
kvattn_gpu_build ON kernels_decode_gpu_test gpu_decode_bench
T=build-gpu/tests/kernels/kernels_decode_gpu_test

step "decode tests: sweeps with head_dim 80/96/256, features, variants"
run_test decode_final 200 "$T" \
  --gtest_filter='DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpuVariants.*:DecodeGpuFeatures.*:DecodeGpu.Unsupported*:DecodeGpu.CudaGraph*:DecodeGpu.BadIndices*:DecodeGpu.Fp8*'
grep -E "^\[ +(OK|FAILED) +\]" "$OUT/decode_final.log" | head -20
grep -E "  decode gpu " "$OUT/decode_final.log" | head -24

step "memcheck: quick sweeps (80/96/256 included)"
KVATTN_GPU_TEST_QUICK=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$T" --gtest_filter='DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpuFeatures.RandomSweep' >"$OUT/memcheck_final.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_final.log" | tail -n 1)"

step "timing: decode variants, page 16"
timeout 150 build-gpu/bench/gpu_decode_bench --only decode --quick --reps 40 >"$OUT/decode_bench.log" 2>&1
echo "bench rc=$?"
grep '^{' "$OUT/decode_bench.log" >"$OUT/decode_bench.jsonl"
python3 - "$OUT/decode_bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"us"' in l]
for r in rows:
    if r["op"] in ("ceiling", "decode default", "decode noswap", "decode h4", "decode s3"):
        flush = r["note"].split(", ")[-1]
        print(f"  {r['shape'][:30]:30s} {r['op']:16s} {flush:17s} {r['us']:9.2f} us {r['TBps']:5.2f} TB/s")
PY

if [ -f scripts/gpu_model_families.sh ]; then
  step "model families on CUDA (scripts/gpu_model_families.sh)"
  bash scripts/gpu_model_families.sh
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
