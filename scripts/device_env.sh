# Sourced on the GPU machine: unpacks the Debian packages carried in .deps/ (the machine has
# no package registry) into a private prefix, never over the system, and points CMake,
# pkg-config, the compiler and the loader at it.
#   .deps/*.deb and .deps/private/*.deb come from `scripts/device_deps.sh` run here.
# Where a script's logs and results go: the device tool's $OUT, else ./out (created here).
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"

kvdeps=/opt/kvdeps
mkdir -p "$kvdeps"
for f in .deps/*.deb .deps/private/*.deb; do
  [ -f "$f" ] && dpkg -x "$f" "$kvdeps"
done
export CMAKE_PREFIX_PATH="$kvdeps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export PKG_CONFIG_LIBDIR="$kvdeps/usr/lib/x86_64-linux-gnu/pkgconfig:$kvdeps/usr/share/pkgconfig:$kvdeps/usr/lib/x86_64-linux-gnu/openblas-pthread/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$kvdeps"
export CPATH="$kvdeps/usr/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$kvdeps/usr/lib/x86_64-linux-gnu:$kvdeps/usr/lib/x86_64-linux-gnu/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$kvdeps/usr/lib/x86_64-linux-gnu:$kvdeps/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Installs the Python package (CUDA, sm_90a) into python ($1, default python3), log to $2; the
# image's Python may be marked externally managed (PEP 668): this installs into it anyway.
kvattn_pip_install() {
  PIP_BREAK_SYSTEM_PACKAGES=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "${1:-python3}" -m pip install \
    --no-build-isolation --no-deps -v -Ccmake.define.KVATTN_CUDA_ARCHS=90a \
    -Cbuild-dir=build-wheel/gpu . >"$2" 2>&1
}

# A heading per step of a GPU script, with the time.
step() { echo; echo "== $* == ($(date +%T))"; }

# Builds build-gpu (Release, sm_90a, KVATTN_BENCH=$1) for the targets $2..., logging to
# $OUT/build.log; on failure prints the errors and exits the calling script.
kvattn_gpu_build() {
  local bench=$1
  shift
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a \
    -DKVATTN_BENCH="$bench" >"$OUT/build.log" 2>&1 &&
    cmake --build build-gpu -j "$(nproc)" --target "$@" >>"$OUT/build.log" 2>&1
  local rc=$?
  tail -n 3 "$OUT/build.log"
  [ $rc -eq 0 ] || { grep -B2 -A12 "error" "$OUT/build.log" | head -80; echo "BUILD FAILED"; exit 1; }
  # ptxas serialising wgmma (C7520: a register use it cannot order, e.g. in a divergent path)
  # costs the Hopper kernels 20-40% (session 14); say so loudly.
  grep -m3 "C7520" "$OUT/build.log" | sed 's/^/WARNING wgmma serialized: /'
  return 0
}

# Installs kvattn's Python package (CUDA, sm_90a) and the carried FlashInfer wheels
# (.peers/whl; PYTHONPATH then points at them). Returns 1, printing the log's tail, when the
# package does not build.
kvattn_install_python_and_peers() {
  step "pip install kvattn (sm_90a)"
  kvattn_pip_install python3 "$OUT/py_install.log" || { tail -n 30 "$OUT/py_install.log"; return 1; }
  if ls .peers/whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/peers_site .peers/whl/*.whl &&
      export PYTHONPATH=/tmp/peers_site
  fi
}

# The peers' side of a same-run script: kvattn_install_python_and_peers, then runs the Python
# harness $1 from /tmp with FlashInfer's JIT settings, its log to $OUT/$2 (last $3 lines
# printed; timeout $PEERS_TIMEOUT, default 420 s). FlashInfer's JIT builds fail with the
# carried Debian headers in CPATH.
kvattn_run_peers() {
  local harness=$1 log=$2 tail_lines=${3:-8}
  # Installed once per script: a second harness in the same call reuses the package.
  if [ -z "${KVATTN_PEERS_READY:-}" ]; then
    kvattn_install_python_and_peers || return 1
    KVATTN_PEERS_READY=1
  fi
  step "peers, same run: $harness"
  (unset CPATH LIBRARY_PATH
   cd /tmp && PYTHONUNBUFFERED=1 OUT="$OUT" MAX_JOBS=$(nproc) FLASHINFER_CUDA_ARCH_LIST=9.0a \
     timeout "${PEERS_TIMEOUT:-420}" python3 "$OLDPWD/$harness" 2>&1 | grep -v Warning |
     tee "$OUT/$log" | tail -n "$tail_lines")
}

# Runs a test binary under a time limit, its log to $OUT/$name.log; prints the exit code, the
# gtest verdict and the first failure lines.   run_test NAME SECONDS BINARY [ARGS...]
run_test() {
  local name=$1 limit=$2 bin=$3
  shift 3
  timeout "$limit" "$bin" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$name.log" | tr '\n' ' ')"
  grep -E "Failure|Which is|differs|case [0-9]+ seed|worst|skipping|round" "$OUT/$name.log" | head -12
}
