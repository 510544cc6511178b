#!/usr/bin/env bash
# Session 20, call 6: 3 stages for the fp8 swapped decode tile at head_dim 64 (was 4; call 1's
# 96x4096 9/3 d64 fp8 ran 9-10% faster forced to 3): the decode suite and memcheck on the fp8
# tests, then `gpu_decode_bench --only fp8 --quick` with three more head_dim 64 fp8 shapes
# (256x1024 8/8, 64x4096 32/8, 8x32768 9/3); its "swap s4" rows are the old default.
#   run: bash scripts/sessions/gpu_session20_sixth.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s20e
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s20e
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 timeout 150 "$B/kernels_decode_gpu_test" >"$OUT/decode_suite.log" 2>&1
echo "decode suite rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/decode_suite.log" | tr '\n' ' ')"
grep -m6 -E "Failure|Which is" "$OUT/decode_suite.log"
KVATTN_GPU_TEST_QUICK=1 timeout 120 compute-sanitizer --tool memcheck "$B/kernels_decode_gpu_test" \
  --gtest_filter='*Fp8*' >"$OUT/memcheck_fp8.log" 2>&1
echo "memcheck fp8 rc=$?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck_fp8.log" | tr '\n' ' ')"
timeout $((560 - SECONDS)) "$B/gpu_decode_bench" --only fp8 --quick >"$OUT/fp8_bench.log" 2>&1
echo "fp8 bench rc=$?"
python3 - "$OUT/fp8_bench.log" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    if not line.startswith('{'): continue
    d = json.loads(line)
    if 'fp8' not in d['shape'] or 'memset' in d['note']: continue
    rows.setdefault(d['shape'], {})[d['op'].replace('decode ', '')] = d['us']
for shape, v in rows.items():
    keys = ['default', 'swap s2', 'swap s3', 'swap s4', 'swap s6', 'default again']
    print(f"{shape:34s} " + ' '.join(f"{k}={v[k]:.2f}" for k in keys if k in v))
PY
echo "end ${SECONDS}s"
