#!/usr/bin/env bash
# The decode tiles in one GPU call: builds the decode GPU suite and bench/gpu_decode_bench, runs
# the tests that cover the swapped tile (decode_swap_tile.cuh) and the head dims it brought
# (every edge shape with the tile on and off, the variant sweep, the default sweep and the
# feature tests with head_dim 80/96/256), memcheck on quick runs of the edge shapes and the
# sweeps, then times the decode variants side by side on the issue's shapes (page 16; bf16
# d64/80/96/128/256; --quick). About 5 minutes. Logs to $OUT.
#   run: bash scripts/gpu_decode_swap.sh   (carry .deps)
#   env: EDGES= leaves the edge shapes (45 s) out of the main test run; REPS (default 60)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

step build
kvattn_gpu_build ON kernels_decode_gpu_test gpu_decode_bench
T=build-gpu/tests/kernels/kernels_decode_gpu_test

step "decode tests: both tiles, head_dim 64/80/96/128/256"
run_test decode_swap 240 "$T" \
  --gtest_filter="${EDGES-DecodeGpu.ShapesAtTheEdgesBothTiles:}DecodeGpuVariants.*:DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpu.CudaGraph*:DecodeGpu.BadIndices*:DecodeGpuFeatures.*:DecodeGpu.Unsupported*:DecodeGpu.Fp8*"
grep -E "^\[ +(OK|FAILED) +\]" "$OUT/decode_swap.log" | head -20
grep -E "  decode gpu " "$OUT/decode_swap.log" | head -24

step "memcheck: edge shapes with both tiles, sweeps (quick)"
KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$T" --gtest_filter="${EDGES-DecodeGpu.ShapesAtTheEdgesBothTiles:}DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpuFeatures.RandomSweep" >"$OUT/memcheck_swap.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_swap.log" | tail -n 1)"

step "timing: decode variants, page 16"
timeout 240 build-gpu/bench/gpu_decode_bench --only decode --quick --reps "${REPS:-60}" >"$OUT/decode_bench.log" 2>&1
echo "bench rc=$?"
grep '^{' "$OUT/decode_bench.log" >"$OUT/decode_bench.jsonl"
python3 - "$OUT/decode_bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"us"' in l]
shapes = []
for r in rows:
    if r["shape"] not in shapes: shapes.append(r["shape"])
for s in shapes:
    rs = [r for r in rows if r["shape"] == s and r["op"].startswith("decode")]
    if not rs: continue
    print(f"\n{s}")
    for r in rs:
        if not any(k in r["op"] for k in ("default", "swap", "h4")): continue
        parts = r["note"].split(", ")
        flush = parts[-1]
        base = [x["us"] for x in rs if x["op"] == "decode default" and x["note"].endswith(flush)]
        rel = r["us"] / base[0] if base else float("nan")
        print(f"  {r['op']:28s} {flush:10s} {r['us']:9.2f} us {r['TBps']:5.2f} TB/s x{rel:5.3f}  {parts[1]}")
PY
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
