#!/usr/bin/env bash
# The Python package on the GPU machine, in one call: `pip install --no-build-isolation .` into
# the image's Python (CUDA, sm_90a), the pytest suite (tests/python), then the overhead benchmark
# (bench/python_overhead.py against the C++ baseline bench/decode_call_overhead).
#   run: bash scripts/gpu_run.sh --no-peers --no-memcheck && bash scripts/gpu_python.sh
#        (carry .deps; build-gpu from gpu_run.sh provides the C++ baseline, else it is built)
# Logs, junit XML and JSON go to $OUT (or ./out). Exit status: non-zero when the install, a
# test or the overhead acceptance failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
PY=${PYTHON:-python3}
jobs=$(nproc)
step() { echo; echo "== $* == ($(date +%T))"; }
status=0

step "python environment"
"$PY" - <<'EOF' 2>&1 | tee "$OUT/py_env.txt"
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for m in ("torch", "nanobind", "scikit_build_core", "numpy", "pytest", "flash_attn"):
    try:
        print("%-18s %s" % (m, getattr(importlib.import_module(m), "__version__", "?")))
    except Exception as e:  # noqa: BLE001
        print("%-18s missing (%s)" % (m, type(e).__name__))
import torch
print("torch cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("DLPack C exchange API:", hasattr(torch.Tensor, "__dlpack_c_exchange_api__"))
EOF

step "pip install --no-build-isolation ."
kvattn_pip_install "$PY" "$OUT/py_install.log"
install_rc=$?
grep -E "kvattn: CUDA|Successfully|error|Error" "$OUT/py_install.log" | tail -n 12
pythonpath=
if [ $install_rc -ne 0 ]; then
  echo "PIP INSTALL FAILED (rc $install_rc, see py_install.log); building with CMake to run the tests"
  status=1
  cmake -S . -B build-py-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a \
    -DKVATTN_PYTHON=ON -DKVATTN_ENGINE=OFF -DKVATTN_BENCH=OFF -DBUILD_TESTING=OFF \
    -DPython_EXECUTABLE="$(command -v "$PY")" >"$OUT/py_cmake.log" 2>&1 &&
    cmake --build build-py-gpu -j "$jobs" >>"$OUT/py_cmake.log" 2>&1 || {
      tail -n 30 "$OUT/py_cmake.log"; echo "CMAKE BUILD FAILED"; exit 1; }
  pythonpath=$root/build-py-gpu/python
fi
(cd /tmp && PYTHONPATH=$pythonpath "$PY" -c "import kvattn; print('kvattn', kvattn.__version__, kvattn.__file__, 'cuda', kvattn.cuda_available())")

step "kvattn.Error through the extension, torch loaded (appended to py_env.txt)"
# The first H200 run crashed (SIGSEGV) at the first kvattn.Error raised in a process with
# torch loaded; this checks that path alone, CPU (NumPy) and, if there is a GPU, CUDA.
(cd /tmp && PYTHONPATH=$pythonpath timeout 60 "$PY" -X faulthandler - <<'PY') 2>&1 | tee -a "$OUT/py_env.txt"
import numpy as np, torch, kvattn
key = np.zeros((4, 2, 8), np.float32)
kc = np.zeros((2, 4, 2, 8), np.float32)
for i in range(3):
    try:
        kvattn.store_kvcache(key, key, kc, kc.copy(), np.array([0, 8], np.int32))
        print("no error raised: WRONG")
    except kvattn.Error as e:
        print("kvattn.Error caught (cpu):", str(e)[:60])
if torch.cuda.is_available() and kvattn.cuda_available():
    k = torch.zeros(4, 2, 8, device="cuda")
    c = torch.zeros(2, 4, 2, 4, device="cuda")
    try:
        kvattn.store_kvcache(k, k, c, c, torch.zeros(4, dtype=torch.int32, device="cuda"))
        print("no error raised: WRONG")
    except kvattn.Error as e:
        print("kvattn.Error caught (cuda):", str(e)[:60])
PY

step "pytest tests/python"
PYTHONPATH=$pythonpath timeout 200 "$PY" -X faulthandler -m pytest tests/python -q -rs -p no:cacheprovider \
  --junitxml="$OUT/pytest.xml" 2>&1 | tee "$OUT/pytest.log" | tail -n 40
pytest_rc=${PIPESTATUS[0]}
[ "$pytest_rc" -eq 0 ] || { echo "PYTEST FAILED (rc $pytest_rc)"; status=1; }
if grep -q "Fatal Python error" "$OUT/pytest.log" && command -v cuda-gdb >/dev/null; then
  # A crash: the native stack of the first crashing file (cuda-gdb also debugs host-only code).
  crash_file=$(grep -m1 -oE 'tests/python/test_[a-z_]+[.]py' "$OUT/pytest.log")
  echo "native backtrace of the crash in ${crash_file:-tests/python} -> pytest_crash.log"
  PYTHONPATH=$pythonpath timeout 120 cuda-gdb -batch -ex run -ex bt -ex "info sharedlibrary" \
    --args "$(command -v "$PY")" -m pytest "${crash_file:-tests/python}" -x -q -p no:cacheprovider \
    >"$OUT/pytest_crash.log" 2>&1
  grep -E "^#[0-9]+ " "$OUT/pytest_crash.log" | head -n 25
fi

step "C++ baseline (bench/decode_call_overhead)"
cpp=build-gpu/bench/decode_call_overhead
if [ -f build-gpu/CMakeCache.txt ]; then
  cmake --build build-gpu -j "$jobs" --target decode_call_overhead >"$OUT/overhead_build.log" 2>&1
elif [ $install_rc -eq 0 ] && [ -f build-wheel/gpu/CMakeCache.txt ] &&
  cmake -DKVATTN_BENCH=ON build-wheel/gpu >"$OUT/overhead_build.log" 2>&1; then
  # The wheel's own build (the same libkvattn.a, same flags): only the benchmark is compiled.
  cmake --build build-wheel/gpu -j "$jobs" --target decode_call_overhead >>"$OUT/overhead_build.log" 2>&1
  cpp=build-wheel/gpu/bench/decode_call_overhead
else
  cpp=build-pybench/bench/decode_call_overhead
  cmake -S . -B build-pybench -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a \
    -DKVATTN_ENGINE=OFF -DBUILD_TESTING=OFF -DKVATTN_BENCH=ON >"$OUT/overhead_build.log" 2>&1 &&
    cmake --build build-pybench -j "$jobs" --target decode_call_overhead >>"$OUT/overhead_build.log" 2>&1
fi
[ -x "$cpp" ] || { tail -n 20 "$OUT/overhead_build.log"; echo "C++ baseline not built"; }

step "Python overhead (decode, batch 64)"
PYTHONPATH=$pythonpath OUT="$OUT" timeout 120 "$PY" bench/python_overhead.py --cpp "$cpp" 2>&1 |
  tee "$OUT/python_overhead.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "OVERHEAD BENCH FAILED"; status=1; }

step summary
grep -E "passed|failed" "$OUT/pytest.log" | tail -n 1
grep -E "Python adds" "$OUT/python_overhead.log" || true
echo "gpu_python: exit $status"
exit $status
