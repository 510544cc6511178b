#!/usr/bin/env bash
# Session 46, call 2: session 45's prepared call (the same-run peers on session 45's build, then
# the sanitizers), with the prefill suite first. Ran on b876047's tree with the FMA-pipe
# exponentials at 0 column tiles (call 1 had measured them slower), i.e. 413691a's kernels.
# Everything is built here (sm_90a).
#   1. the prefill suite (quick) and the decode suite's uniform-lengths test;
#   2. decode peers, head_dim 128 and 64, with the "kvattn_int" rows (lengths as an int);
#   3. prefill peers (FA3 backend), head_dim 128 and 64, ROUNDS rounds (default 2);
#   4. racecheck and memcheck on DecodeGpu.UniformLengthsPromise and PrefillGpu.TileEdges.
#   run: LIMIT=570 bash scripts/sessions/gpu_session46_first.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private, .peers
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, kvattn_gpu_build, the peers
source scripts/device_carried.sh  # run_logged, both_sanitizers, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-570}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build OFF kernels_decode_gpu_test kernels_prefill_gpu_test
echo "built at ${SECONDS}s"
step "prefill suite (quick)"
run_logged prefill_test timeout 150 env KVATTN_GPU_TEST_QUICK=1 \
  build-gpu/tests/kernels/kernels_prefill_gpu_test
run_logged uniform_test timeout 60 env KVATTN_GPU_TEST_QUICK=1 \
  build-gpu/tests/kernels/kernels_decode_gpu_test --gtest_filter='DecodeGpu.UniformLengthsPromise'
room $((LIMIT - 330)) "decode peers" && DECODE_PEERS_HEAD_DIMS=128,64 PEERS_TIMEOUT=170 \
  kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
room $((LIMIT - 120)) "prefill peers" && PREFILL_PEERS_HEAD_DIMS=128,64 \
  PREFILL_PEERS_BACKENDS=fa3 PREFILL_PEERS_ROUNDS=${ROUNDS:-2} PEERS_TIMEOUT=$((LIMIT - 60 - SECONDS)) \
  kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 12
room $((LIMIT - 50)) "sanitizers" && {
  both_sanitizers uniform build-gpu/tests/kernels/kernels_decode_gpu_test \
    'DecodeGpu.UniformLengthsPromise'
  room $((LIMIT - 25)) "prefill sanitizers" && both_sanitizers prefill \
    build-gpu/tests/kernels/kernels_prefill_gpu_test 'PrefillGpu.TileEdges'
}
echo "end ${SECONDS}s"
