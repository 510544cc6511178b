#!/usr/bin/env bash
# Issue 20's fused kernels in one call on the GPU machine (written without a GPU; not yet run):
# builds the two GPU tests and the command line, runs the fused-kernel test (the fused q/k-norm
# + RoPE + KV write against qk_norm_rope then store_kv, byte for byte), compute-sanitizer
# memcheck on it (quick case list), the engine test (greedy tokens fused == unfused, graphs ==
# eager, batch 1/3/17/100, tiny llama and qwen3), then `kvattn bench` on nano-vllm's workload
# (random Qwen3-0.6B) fused and unfused (KVATTN_UNFUSED=1) in the same call, with the single
# stream figure. Logs and JSON under $OUT.
#   run: bash scripts/gpu_fused.sh [all|tests|bench]   (carry .deps; default all)
# The stages keep their timeouts short so that `all` fits one 10-minute call after a build;
# on a cold machine whose build is slow, run `tests` and `bench` as two calls (build-gpu stays).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
what=${1:-all}

step build
kvattn_gpu_build OFF engine_fused_rope_kv_gpu_test engine_fused_kernels_gpu_test kvattn_cli


if [ "$what" = all ] || [ "$what" = tests ]; then
  step "fused kernel vs unfused kernels (bf16 and e4m3 caches)"
  run_test fused_rope_kv 120 build-gpu/tests/engine/engine_fused_rope_kv_gpu_test
  step "memcheck: fused kernel test (quick)"
  KVATTN_GPU_TEST_QUICK=1 timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 \
    build-gpu/tests/engine/engine_fused_rope_kv_gpu_test >"$OUT/memcheck_fused.log" 2>&1
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_fused.log" | tail -n 1)"
  step "engine: greedy fused == unfused, graphs == eager (batch 1, 3, 17, 100)"
  run_test fused_greedy 240 build-gpu/tests/engine/engine_fused_kernels_gpu_test
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
  step "checkpoint (random Qwen3-0.6B)"
  [ -f /tmp/q06/config.json ] ||
    PYTHONUNBUFFERED=1 timeout 240 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
      2>&1 | tail -n 2
  for mode in fused unfused; do
    step "bench nano-vllm, $mode (graphs on)"
    env_args=()
    [ "$mode" = unfused ] && env_args=(KVATTN_UNFUSED=1)
    env "${env_args[@]}" timeout 200 build-gpu/kvattn bench --model /tmp/q06 --device cuda \
      --workload nano-vllm --json "$OUT/bench_nano_${mode}.json" 2>&1 | tr '\r' '\n' |
      tee "$OUT/bench_nano_${mode}.log" |
      grep -E "workload|Throughput|single|first token|rror"
  done
fi
