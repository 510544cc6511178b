#!/usr/bin/env bash
# Prepared in session 45 for the next session's first call: the same-run peers on the build
# with session 45's two changes (the prefill's pinned shared-memory base, the decode's
# uniform-lengths plan), which ran only in the C++ benches, then the sanitizers they did not
# get. Everything is built here (sm_90a): the Python package for the harnesses, then the two
# test binaries.
#   1. decode peers, head_dim 128 and 64, with the "kvattn_int" rows (lengths as an int);
#   2. prefill peers (FA3 backend), head_dim 128 and 64, ROUNDS rounds (default 2);
#   3. racecheck and memcheck on DecodeGpu.UniformLengthsPromise and on PrefillGpu.TileEdges (lengths around the tiles, d64 and d128).
#   run: LIMIT=560 bash scripts/sessions/gpu_session46_peers.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private, .peers
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, kvattn_gpu_build, the peers
source scripts/device_carried.sh  # run_logged, both_sanitizers, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-560}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
DECODE_PEERS_HEAD_DIMS=128,64 PEERS_TIMEOUT=200 \
  kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
room $((LIMIT - 150)) "prefill peers" && PREFILL_PEERS_HEAD_DIMS=128,64 \
  PREFILL_PEERS_BACKENDS=fa3 PREFILL_PEERS_ROUNDS=${ROUNDS:-2} PEERS_TIMEOUT=150 \
  kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 12
room $((LIMIT - 130)) "sanitizers" && {
  step build
  kvattn_gpu_build OFF kernels_decode_gpu_test kernels_prefill_gpu_test
  both_sanitizers uniform build-gpu/tests/kernels/kernels_decode_gpu_test \
    'DecodeGpu.UniformLengthsPromise'
  room $((LIMIT - 40)) "prefill sanitizers" && both_sanitizers prefill \
    build-gpu/tests/kernels/kernels_prefill_gpu_test 'PrefillGpu.TileEdges'
}
echo "end ${SECONDS}s"
