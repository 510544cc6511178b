#!/usr/bin/env bash
# Session 25, call 2: Nsight Compute counters of kvattn's Hopper prefill and FA3 (FlashInfer
# 0.5.3) on 1x16384 32/8 d128, where call 1 found FA3 doing 10% more work per SM cycle under
# the power cap; and FlashInfer's JIT-built FA3 module copied out for cuobjdump here.
#   run: bash scripts/sessions/gpu_session25_stalls.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
SHAPE=1,16384,32,8,128 bash scripts/gpu_prefill_stalls.sh
OUT=${OUT:-out}
so=$(find /root/.cache/flashinfer -name '*.so' -newer "$OUT/py_install.log" 2>/dev/null | xargs -r ls -S | head -1)
echo "FlashInfer module: $so ($(stat -c %s "$so" 2>/dev/null) bytes)"
[ -n "$so" ] && xz -T0 -c "$so" > "$OUT/fa3_module.so.xz" && ls -la "$OUT/fa3_module.so.xz"
find /root/.cache/flashinfer -name '*.so' -newer "$OUT/py_install.log" 2>/dev/null | head -5
