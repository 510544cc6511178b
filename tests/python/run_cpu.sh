#!/usr/bin/env bash
# CI's Python step: builds kvattn._C CPU-only in build-py-ci against Debian's python3 (numpy,
# pytest and the headers from apt: scripts/setup.sh), with nanobind from PyPI when Debian's
# Python lacks it (Debian 12 has no nanobind package), then runs tests/python on the CPU.
# The torch suites skip without torch; NumPy covers the API. When a prerequisite is missing it
# says SKIPPED and exits 0 without claiming a pass; a build or test failure exits non-zero.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
jobs=${KVATTN_JOBS:-$(nproc)}
PY=${KVATTN_CI_PYTHON:-/usr/bin/python3}
bdir=build-py-ci

skip() {
  echo "python tests: SKIPPED ($*)"
  exit 0
}

[ -x "$PY" ] || skip "no $PY"
"$PY" -c "import numpy, pytest" 2>/dev/null || skip "numpy/pytest missing for $PY (apt python3-numpy python3-pytest)"
"$PY" -c "import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" ||
  skip "no Python headers for $PY (apt python3-dev)"

mkdir -p "$bdir"
nb_dir=$("$PY" -m nanobind --cmake_dir 2>/dev/null) || nb_dir=
if [ -z "$nb_dir" ]; then
  nb_dir=$(PYTHONPATH=$root/$bdir/pydeps "$PY" -m nanobind --cmake_dir 2>/dev/null) || nb_dir=
fi
if [ -z "$nb_dir" ]; then
  # nanobind is pure Python plus sources: any pip can put it in a private folder.
  pip_py=$(command -v python3 || echo "$PY")
  PIP_BREAK_SYSTEM_PACKAGES=1 "$pip_py" -m pip install --quiet --disable-pip-version-check \
    --target "$bdir/pydeps" "nanobind>=1.9" >"$bdir/pip.log" 2>&1 ||
    skip "nanobind not installable from PyPI ($(tail -n 1 "$bdir/pip.log"))"
  nb_dir=$(PYTHONPATH=$root/$bdir/pydeps "$PY" -m nanobind --cmake_dir 2>/dev/null) ||
    skip "nanobind installed but not importable"
fi

echo "python tests: building kvattn._C (CPU) with $("$PY" --version 2>&1), nanobind at $nb_dir"
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA=OFF -DKVATTN_PYTHON=ON \
  -DKVATTN_ENGINE=OFF -DKVATTN_BENCH=OFF -DBUILD_TESTING=OFF -DPython_EXECUTABLE="$PY" \
  -Dnanobind_DIR="$nb_dir" >"$bdir/configure.log" 2>&1 || {
  tail -n 30 "$bdir/configure.log"
  echo "python tests: configure FAILED"
  exit 1
}
cmake --build "$bdir" -j "$jobs" >"$bdir/build.log" 2>&1 || {
  tail -n 40 "$bdir/build.log"
  echo "python tests: build FAILED"
  exit 1
}
PYTHONPATH=$root/$bdir/python "$PY" -m pytest tests/python -q -rs -p no:cacheprovider
