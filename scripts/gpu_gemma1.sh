#!/usr/bin/env bash
# Gemma 1 on the GPU (session 52; run on an H100, all pass: figures in
# docs/notes/model-families.md "Session 52"): the CUDA model's Gemma layer with no
# sandwich norms (gemma_norm_add_rmsnorm with a null w_add: the plain residual add, then
# Gemma's norm). Logs under $OUT.
#   1. build the GPU and CPU Gemma / families tests (build-gpu, Release, sm_90a);
#   2. engine_cuda_gemma_gpu_test: the Gemma kernels against a host reference, Gemma 1's plain
#      add + norm included (CudaGemma.PlainAddNorm: x exact, out within 2 bf16 ulps);
#   3. engine_model_families_gpu_test, Gemma cases (tiny_gemma / gemma2 / gemma3 from both
#      formats): teacher-forced vs HF's float32 logits (mean relative L2 < 5e-2, max rel < 0.1),
#      each feature switched off misses HF by more than twice, GPU vs CPU with a split prefill,
#      the LLM's greedy tokens (CUDA graphs) and graphs on == off;
#   4. engine_gemma_test (creates every Gemma on cuda:0 from both formats) and
#      engine_load_16bit_gpu_test's tiny families (bf16 kept on load == float32 load, bit for bit);
#   5. PDL on == off bit for bit (pdl_gpu_test, Gemma cases) and the one-rank tensor-parallel
#      path == the plain model bit for bit (tensor_parallel_gpu_test, Gemma).
#   run: bash scripts/gpu_gemma1.sh      (carry .deps)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
step build
kvattn_gpu_build OFF engine_cuda_gemma_gpu_test engine_model_families_gpu_test engine_gemma_test \
  engine_load_16bit_gpu_test engine_pdl_gpu_test engine_tensor_parallel_gpu_test
step "Gemma kernels"
run_test cuda_gemma 120 build-gpu/tests/engine/engine_cuda_gemma_gpu_test
grep -E "plain add|worst" "$OUT/cuda_gemma.log" | head -n 12
step "families on the GPU (Gemma)"
run_test families_gemma 400 build-gpu/tests/engine/engine_model_families_gpu_test \
  --gtest_filter='*gemma*:*Gemma*:FamilyGpuVsCpu.*'
grep -E "gemma" "$OUT/families_gemma.log" | grep -E "vs HF|without|gpu vs cpu|tokens" | head -n 40
step "CPU Gemma test with a device"
run_test gemma_cpu 240 build-gpu/tests/engine/engine_gemma_test
run_test load16_gpu 240 build-gpu/tests/engine/engine_load_16bit_gpu_test \
  --gtest_filter='*TinyFamilies*'
grep -E "^\[gemma" "$OUT/load16_gpu.log" | head -n 3
step "PDL and one-rank tensor parallel (Gemma)"
run_test pdl_gemma 200 build-gpu/tests/engine/engine_pdl_gpu_test --gtest_filter='*gemma*'
run_test tp_gemma 200 build-gpu/tests/engine/engine_tensor_parallel_gpu_test --gtest_filter='*Gemma*'
