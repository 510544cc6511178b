#!/usr/bin/env bash
# Session 46, last call: compute-sanitizer's racecheck and memcheck on the prefill suite's tile
# edges (lengths around the tiles, head_dim 64 and 128, pages) for session 45's pinned
# shared-memory base (prefill_sm90_kernel.cuh), which had run only functionally. The test
# binary is carried (built on the CPU machine from 413691a's prefill sources).
#   run: bash scripts/sessions/gpu_session46_sanitize.sh build-carry-s46b 2>&1 | tee $OUT/summary.txt
#   carry: build-carry-s46b, .deps/private
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh
source scripts/device_carried.sh
carried_bins "$1" "$B"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
ldd "$B/a_kernels_prefill_gpu_test" | grep "not found"
both_sanitizers prefill "$B/a_kernels_prefill_gpu_test" 'PrefillGpu.TileEdges'
echo "end ${SECONDS}s"
