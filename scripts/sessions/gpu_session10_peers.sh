#!/usr/bin/env bash
# Session 10's last call: the Hopper prefill feature / head_dim 256 tests (whose logs the
# previous call could not bring back: printed here), then kvattn against cuDNN and FlashInfer
# in one Python process each for decode (bench/decode_peers_same_run.py) and prefill
# (bench/prefill_peers_same_run.py), head_dim 256 first in both. Under 10 minutes on a
# 16-core H200 machine if FlashInfer's JIT builds are quick; each harness is cut at
# PEERS_TIMEOUT (default 200 s), keeping what it printed.
#   run: bash scripts/sessions/gpu_session10_peers.sh   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader

step build
kvattn_gpu_build OFF kernels_prefill_gpu_test
P=build-gpu/tests/kernels/kernels_prefill_gpu_test
T=/tmp/tlogs
mkdir -p "$T"
summary() {  # the verdict lines of a gtest log
  grep -E "^\[ +(OK|FAILED|PASSED) +\]|Failure|Which is|case [0-9]+ seed" "$1" | head -${2:-30}
}
step "prefill features, default path (Hopper kMods / d256 where eligible)"
timeout 150 "$P" --gtest_filter='PrefillGpuFeatures.*:-*BothPaths*' >"$T/f.log" 2>&1
echo "rc=$?"; summary "$T/f.log"
step "prefill features on both kernels"
timeout 120 "$P" --gtest_filter='*BothPaths*' >"$T/b.log" 2>&1
echo "rc=$?"; summary "$T/b.log"
step "prefill plain (quick)"
KVATTN_GPU_TEST_QUICK=1 timeout 60 "$P" --gtest_filter='PrefillGpu.*' >"$T/p.log" 2>&1
echo "rc=$?"; summary "$T/p.log" 20
grep -E "prefill gpu .*d256|worst" "$T/f.log" "$T/b.log" | head -12
step "memcheck: prefill feature tests (quick)"
KVATTN_GPU_TEST_QUICK=1 timeout 75 compute-sanitizer --tool memcheck --error-exitcode 9 "$P" \
  --gtest_filter='PrefillGpuFeatures.BothPathsTileEdges:PrefillGpuFeatures.WindowSkipsTilesBeforeIt' \
  >"$T/m.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$T/m.log" | tail -n 1)"

export PEERS_TIMEOUT=${PEERS_TIMEOUT:-200}
kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 30
kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 12
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
