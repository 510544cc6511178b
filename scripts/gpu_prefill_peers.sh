#!/usr/bin/env bash
# Prefill against cuDNN and FlashInfer (FA3 and FA2 backends) in one run on the GPU machine:
# installs the Python package (CUDA, sm_90a) and the carried FlashInfer wheels, then
# bench/prefill_peers_same_run.py. Logs and JSON go to $OUT (or ./out).
#   here, once: python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
#     -d .peers/whl flashinfer-python==0.5.3 apache-tvm-ffi==0.1.15.post2
#   run: bash scripts/gpu_prefill_peers.sh   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 8
find /root/.cache/flashinfer -name '*.log' -newer "$OUT/py_install.log" 2>/dev/null | head -3 |
  xargs -r tail -n 20 > "$OUT/flashinfer_jit.log"
