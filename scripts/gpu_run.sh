#!/usr/bin/env bash
# The one call on the GPU machine: build with CUDA, run the GPU tests, compute-sanitizer
# memcheck, kvattn's GPU benchmarks and the peers, then print one table.
#   run: bash scripts/gpu_run.sh [--full] [--no-peers] [--no-memcheck] [--engine] [--store-seed]
#        (carry .deps .peers)
# --store-seed: also installs the Python package and times store_kv against the seed's Triton
# kernel in one harness (bench/store_kv_vs_seed.py, 10 alternating rounds).
# By default only the kernel tests and the GPU benchmarks are built and the kernel GPU tests
# run (the peers need most of a 10-minute call); --full builds everything and runs every GPU
# test (engine included).
# Logs and JSON go to $OUT (or ./out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
peers=1 memcheck=1 engine=0 full=0 store_seed=0
for a in "$@"; do
  case "$a" in
    --full) full=1 ;;
    --no-peers) peers=0 ;;
    --no-memcheck) memcheck=0 ;;
    --engine) engine=1 ;;
    --store-seed) store_seed=1 ;;
  esac
done
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"

step() { echo; echo "== $* == ($(date +%T))"; }

step build
targets=()
[ $full -eq 1 ] || targets=(--target kernels_decode_gpu_test kernels_store_kv_gpu_test
                             kernels_prefill_gpu_test gpu_decode_bench gpu_prefill_bench)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a \
  -DKVATTN_BENCH=ON >"$OUT/build.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" "${targets[@]}" >>"$OUT/build.log" 2>&1
build_rc=$?
tail -n 30 "$OUT/build.log"
[ $build_rc -eq 0 ] || { echo "BUILD FAILED"; exit 1; }

step "gpu tests"
filter=()
[ $full -eq 1 ] || filter=(-R kernels_)
ctest --test-dir build-gpu -L gpu "${filter[@]}" --output-on-failure --timeout 300 2>&1 |
  tee "$OUT/gpu_tests.log" | tail -n 40

if [ $memcheck -eq 1 ]; then
  step memcheck
  for t in build-gpu/tests/kernels/kernels_*_gpu_test; do
    [ -x "$t" ] || continue
    KVATTN_GPU_TEST_QUICK=1 timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$t" \
      >"$OUT/memcheck_$(basename "$t").log" 2>&1
    echo "$(basename "$t"): memcheck rc=$? ($(grep -c 'Invalid' "$OUT/memcheck_$(basename "$t").log") invalid accesses)"
    tail -n 3 "$OUT/memcheck_$(basename "$t").log"
  done
fi

step "kvattn benchmarks"
for b in build-gpu/bench/gpu_decode_bench build-gpu/bench/gpu_prefill_bench; do
  [ -x "$b" ] || continue
  "$b" 2>&1 | tee "$OUT/$(basename "$b").log" | tail -n 25
done

if [ $engine -eq 1 ] && [ -x build-gpu/kvattn ]; then
  step engine
  bash scripts/gpu_engine.sh 2>&1 | tee "$OUT/engine.log" | tail -n 30
fi

if [ $peers -eq 1 ]; then
  step "prefill peers (FA2 on the prefix-hit shape, GEMM ceiling)"
  PYTHONUNBUFFERED=1 OUT="$OUT" timeout 180 python3 bench/gpu_prefill_peers.py 2>&1 | tail -n 8
fi
if [ $peers -eq 1 ] && [ -f .peers/peers_h200.py ]; then
  step peers
  PYTHONUNBUFFERED=1 OUT="$OUT" timeout 420 python3 .peers/peers_h200.py >"$OUT/peers.log" 2>&1
  sed -n '/=== SUMMARY ===/,$p' "$OUT/peers.log"
fi

step table
python3 scripts/perf_table.py "$OUT"

if [ $store_seed -eq 1 ] && [ -f .peers/peers_h200.py ]; then
  step "store_kv vs the seed, one harness"
  kvattn_pip_install python3 "$OUT/py_install.log" || tail -n 20 "$OUT/py_install.log"
  PYTHONUNBUFFERED=1 timeout 240 python3 bench/store_kv_vs_seed.py --rounds 10 \
    --json "$OUT/store_kv_vs_seed.json" 2>&1 | tail -n 6
fi
