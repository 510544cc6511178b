#!/usr/bin/env bash
# Issue 20's "other" kernels in one call on the GPU machine (written without a GPU; not yet
# run): builds the row-kernel tests, the kernel bench and the command line; runs
# engine_row_kernels_gpu_test (add_rmsnorm, embed, embed_rmsnorm, silu_mul, add_bias: float64
# model + byte-equal to the legacy kernels) and engine_fused_rope_kv_gpu_test (the token
# q/k-norm + RoPE (+ KV write) kernel byte-equal to the legacy one and to qk_norm_rope then
# store_kv), the engine's greedy tests (fused == unfused, graphs == eager; PDL on == off),
# compute-sanitizer memcheck on the two kernel tests (quick case lists); then
# gpu_engine_kernels_bench (each kernel new vs legacy, T = 1..16384, Qwen3-0.6B and SmolLM2,
# against the copy ceiling), and `kvattn bench` on nano-vllm's workload (random Qwen3-0.6B), new kernels and KVATTN_LEGACY_KERNELS=1, with
# graphs and once each with --breakdown, printing the time-to-first-token and Throughput lines.
# Logs and JSON under $OUT.
#   run: bash scripts/gpu_engine_kernels.sh [all|tests|memcheck|bench]   (carry .deps; default all)
# `all` may not fit one 10-minute call after a cold build: run `tests`, `memcheck` and `bench`
# as separate calls (build-gpu stays).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
what=${1:-all}

step build
kvattn_gpu_build ON engine_row_kernels_gpu_test engine_fused_rope_kv_gpu_test \
  engine_fused_kernels_gpu_test engine_pdl_gpu_test gpu_engine_kernels_bench kvattn_cli
if [ "$what" = all ] || [ "$what" = bench ]; then
  [ -f /tmp/q06/config.json ] ||
    (PYTHONUNBUFFERED=1 timeout 240 python3 scripts/make_random_qwen3.py --shape 0.6b \
      --out /tmp/q06 >"$OUT/checkpoint.log" 2>&1 &)
fi

if [ "$what" = all ] || [ "$what" = tests ]; then
  step "row kernels: float64 model, byte-equal to the legacy kernels"
  run_test row_kernels 240 build-gpu/tests/engine/engine_row_kernels_gpu_test
  step "q/k norm + RoPE + KV write: token kernel == legacy == qk_norm_rope + store_kv"
  run_test fused_rope_kv 240 build-gpu/tests/engine/engine_fused_rope_kv_gpu_test
  step "engine: greedy fused == unfused, graphs == eager (batch 1, 3, 17, 100)"
  run_test fused_greedy 240 build-gpu/tests/engine/engine_fused_kernels_gpu_test
  step "engine: PDL on == off (the norms now read their weights before griddepcontrol.wait)"
  run_test pdl 300 build-gpu/tests/engine/engine_pdl_gpu_test
fi

if [ "$what" = all ] || [ "$what" = memcheck ]; then
  for t in row_kernels fused_rope_kv; do
    step "memcheck: $t (quick)"
    KVATTN_GPU_TEST_QUICK=1 timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 \
      "build-gpu/tests/engine/engine_${t}_gpu_test" >"$OUT/memcheck_$t.log" 2>&1
    echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_$t.log" | tail -n 1)"
  done
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
  step "kernel bench: new vs legacy, graph replay, L2 flushed"
  timeout 300 build-gpu/bench/gpu_engine_kernels_bench >"$OUT/engine_kernels_bench.log" 2>&1
  echo "rc=$?"
  grep -E '"ceiling"|"floor"' "$OUT/engine_kernels_bench.log"
  sed -n '/^op /,$p' "$OUT/engine_kernels_bench.log"
  step "checkpoint (random Qwen3-0.6B)"
  for i in $(seq 1 120); do [ -f /tmp/q06/config.json ] && break; sleep 2; done
  [ -f "$OUT/checkpoint.log" ] && tail -n 1 "$OUT/checkpoint.log"
  for kernels in new legacy; do
    env_args=(KVATTN_LEGACY_KERNELS=0)  # the rewrite (the default since session 12)
    [ "$kernels" = legacy ] && env_args=(KVATTN_LEGACY_KERNELS=1)
    for mode in graphs breakdown; do
      step "bench nano-vllm, $kernels kernels ($mode)"
      extra=()
      [ "$mode" = breakdown ] && extra=(--breakdown)
      env "${env_args[@]}" timeout 240 build-gpu/kvattn bench --model /tmp/q06 --device cuda \
        --workload nano-vllm "${extra[@]}" --json "$OUT/bench_nano_${kernels}_${mode}.json" 2>&1 |
        tr '\r' '\n' | tee "$OUT/bench_nano_${kernels}_${mode}.log" |
        grep -E "workload|Throughput|first token|attention .*GEMMs|rror"
    done
  done
fi
