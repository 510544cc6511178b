#!/usr/bin/env bash
# Decode with bulk-copy stages (sm_90) in one call on the GPU machine: the decode GPU suite
# (bulk by default; quick with KVATTN_DECODE_BULK=0 for the cp.async form), memcheck (quick),
# the copy forms timed side by side (bench/decode_copy_forms.py, graph replay, bf16 and fp8),
# then the same-run table against cuDNN and FlashInfer (bench/decode_peers_same_run.py).
#   run: bash scripts/gpu_decode_bulk.sh   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
source scripts/device_env.sh

step build
kvattn_gpu_build OFF kernels_decode_gpu_test
run_test() {  # name, timeout, binary, extra args...
  local name=$1 limit=$2 bin=$3
  shift 3
  timeout "$limit" "$bin" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$name.log" | tr '\n' ' ')"
  grep -E "Failure|Which is|case [0-9]+ seed|rel_l2" "$OUT/$name.log" | head -8
}
step "decode GPU suite (bulk), quick cp.async form, memcheck"
run_test decode_bulk 200 build-gpu/tests/kernels/kernels_decode_gpu_test
KVATTN_DECODE_BULK=0 KVATTN_GPU_TEST_QUICK=1 run_test decode_async 120 \
  build-gpu/tests/kernels/kernels_decode_gpu_test
KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
  build-gpu/tests/kernels/kernels_decode_gpu_test >"$OUT/memcheck_decode.log" 2>&1
echo "memcheck rc=$? $(tail -n 1 "$OUT/memcheck_decode.log")"

step "pip install kvattn (sm_90a)"
kvattn_pip_install python3 "$OUT/py_install.log" || { tail -n 30 "$OUT/py_install.log"; exit 1; }
step "copy forms, same call"
for bulk in 1 0 1; do
  (cd /tmp && KVATTN_DECODE_BULK=$bulk timeout 90 python3 "$OLDPWD/bench/decode_copy_forms.py" 2>&1 |
    tee -a "$OUT/copy_forms.log")
done
if ls .peers/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/peers_site .peers/whl/*.whl &&
    export PYTHONPATH=/tmp/peers_site
fi
step "peers, same run"
(unset CPATH LIBRARY_PATH
 cd /tmp && PYTHONUNBUFFERED=1 OUT="$OUT" MAX_JOBS=$(nproc) FLASHINFER_CUDA_ARCH_LIST=9.0a \
   timeout 300 python3 "$OLDPWD/bench/decode_peers_same_run.py" 2>&1 | grep -v Warning |
   tee "$OUT/decode_peers.log" | tail -n 14)
