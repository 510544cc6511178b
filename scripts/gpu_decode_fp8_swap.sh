#!/usr/bin/env bash
# The swapped fp8 decode tile (decode_fp8.cuh fp8_qk_swap / fp8_pv_swap, behind
# cuda_tuning().decode_swap = 1; written without a GPU) in one GPU call: builds the decode GPU
# suite and bench/gpu_decode_bench, runs the fp8 tests on both fp8 tiles (the new *SwappedTile
# tests, the variant sweeps whose "swap" variants now take it, the edge shapes with the tile on
# and off), memcheck on quick runs of the new tests, then times the fp8 rows beside their bf16
# twins (`--only fp8`: default = the 16-row fp8 tile, "swap" = the new one, "swap sN" its stage
# neighbours, "swap nosmall" where small mode takes the batch). About 6 minutes. Logs to $OUT.
#   run: bash scripts/gpu_decode_fp8_swap.sh   (carry .deps)
#   env: REPS (default 40)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

step build
kvattn_gpu_build ON kernels_decode_gpu_test gpu_decode_bench
T=build-gpu/tests/kernels/kernels_decode_gpu_test

step "decode tests: fp8 on both tiles"
run_test decode_fp8_swap 300 "$T" \
  --gtest_filter="DecodeGpu.Fp8*:DecodeGpuFeatures.Fp8*:DecodeGpuVariants.*:DecodeGpu.ShapesAtTheEdgesBothTiles:DecodeGpuFeatures.Variants"
grep -E "^\[ +(OK|FAILED) +\]" "$OUT/decode_fp8_swap.log" | head -20
grep -E "  decode gpu .*fp8" "$OUT/decode_fp8_swap.log" | head -12

step "memcheck: the swapped fp8 tile (quick)"
KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter="DecodeGpu.Fp8CacheSweepSwappedTile:DecodeGpuFeatures.Fp8CacheRandomSweepSwappedTile:DecodeGpu.Fp8CodesReadExactlySwappedTile" \
  >"$OUT/memcheck_fp8_swap.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_fp8_swap.log" | tail -n 1)"

step "timing: fp8 rows beside bf16, page 16"
timeout 200 build-gpu/bench/gpu_decode_bench --only fp8 --reps "${REPS:-40}" >"$OUT/decode_fp8_bench.log" 2>&1
echo "bench rc=$?"
grep '^{' "$OUT/decode_fp8_bench.log" >"$OUT/decode_fp8_bench.jsonl"
python3 - "$OUT/decode_fp8_bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"us"' in l and l.startswith('{"op": "decode')]
def key(r): return (r["shape"].replace(" fp8", ""), r["note"].split(", ")[-1])
bf16 = {}  # shape -> {flush: us} of the bf16 default (the fp8 rows may have other flushes)
for r in rows:
    if r["op"] == "decode default" and not r["shape"].endswith("fp8"):
        bf16.setdefault(key(r)[0], {})[key(r)[1]] = r["us"]
for r in rows:
    if not r["shape"].endswith("fp8"): continue
    k = key(r)
    twin = bf16.get(k[0], {})
    base = twin.get(k[1], next(iter(twin.values()), float("nan")))
    ratio = base / r["us"]
    print(f"  {r['shape']:34s} {r['op']:22s} {k[1]:8s} {r['us']:9.2f} us  {r['TBps']:5.2f} TB/s"
          f"  x{ratio:4.2f} of bf16 default  ({r['note'].split(', ')[1]})")
PY
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
