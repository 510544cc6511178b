#!/usr/bin/env bash
# Session 8's last call on the GPU machine, one build for everything written since the last
# runs (each part also has its own script): the decode suite (fp8 tiles at a padded pitch,
# quick), the prefill features (scripts/gpu_prefill_features.sh's tests, quick) and the plain
# prefill suite (quick), the fused q/k-norm+RoPE+KV-write kernel and the engine's fused ==
# unfused greedy check (scripts/gpu_fused.sh), the engine's fp8 cache without the opt-in,
# then `kvattn bench` on nano-vllm's workload fused vs unfused (random Qwen3-0.6B).
#   run: bash scripts/sessions/gpu_session8_final.sh   (carry .deps)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

step build
kvattn_gpu_build OFF kernels_decode_gpu_test kernels_prefill_gpu_test engine_model_gpu_test \
  engine_fused_rope_kv_gpu_test engine_fused_kernels_gpu_test kvattn_cli
(PYTHONUNBUFFERED=1 timeout 200 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  >"$OUT/checkpoint.log" 2>&1 &)

export KVATTN_GPU_TEST_QUICK=1
step "decode (quick)"
run_test decode 90 build-gpu/tests/kernels/kernels_decode_gpu_test
step "prefill: features (quick), plain (quick)"
run_test prefill_features 150 build-gpu/tests/kernels/kernels_prefill_gpu_test \
  --gtest_filter='PrefillGpuFeatures.*'
grep -E "^\[ +(OK|FAILED) +\]" "$OUT/prefill_features.log" | head -12
run_test prefill_plain 90 build-gpu/tests/kernels/kernels_prefill_gpu_test \
  --gtest_filter='-PrefillGpuFeatures.*'
step "fused kernels (quick) and engine fused == unfused"
run_test fused_rope_kv 90 build-gpu/tests/engine/engine_fused_rope_kv_gpu_test
unset KVATTN_GPU_TEST_QUICK
run_test fused_greedy 150 build-gpu/tests/engine/engine_fused_kernels_gpu_test
step "engine fp8 (no opt-in)"
run_test engine_fp8 90 build-gpu/tests/engine/engine_model_gpu_test --gtest_filter='HF/*Fp8*'
grep -E "argmax agree|split-prefill" "$OUT/engine_fp8.log" | head -10

step "bench nano-vllm: fused vs unfused"
for i in $(seq 1 60); do [ -f /tmp/q06/config.json ] && break; sleep 2; done
tail -n 1 "$OUT/checkpoint.log"
for mode in fused unfused; do
  env_args=()
  [ "$mode" = unfused ] && env_args=(KVATTN_UNFUSED=1)
  env "${env_args[@]}" timeout 120 build-gpu/kvattn bench --model /tmp/q06 --device cuda \
    --workload nano-vllm --json "$OUT/bench_nano_${mode}.json" 2>&1 | tr '\r' '\n' |
    tee "$OUT/bench_nano_${mode}.log" | grep -E "Throughput|single|time split|rror" | sed "s/^/$mode: /"
done
