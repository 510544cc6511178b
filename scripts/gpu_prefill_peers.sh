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
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
source scripts/device_env.sh

step "pip install kvattn (sm_90a)"
kvattn_pip_install python3 "$OUT/py_install.log" || { tail -n 30 "$OUT/py_install.log"; exit 1; }
if ls .peers/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/peers_site .peers/whl/*.whl &&
    export PYTHONPATH=/tmp/peers_site
fi
step "prefill peers, same run"
# FlashInfer JIT-compiles its kernels with nvcc: keep the carried Debian headers (CPATH) out of
# those builds (the first run's JIT builds failed with them in the environment).
unset CPATH LIBRARY_PATH
cd /tmp && PYTHONUNBUFFERED=1 OUT="$OUT" MAX_JOBS=$(nproc) FLASHINFER_CUDA_ARCH_LIST=9.0a \
  timeout 480 python3 "$OLDPWD/bench/prefill_peers_same_run.py" 2>&1 | grep -v Warning | tee "$OUT/prefill_peers.log" | tail -n 8
find /root/.cache/flashinfer -name '*.log' -newer "$OUT/py_install.log" 2>/dev/null | head -3 |
  xargs -r tail -n 20 > "$OUT/flashinfer_jit.log"
