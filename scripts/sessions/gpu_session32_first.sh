#!/usr/bin/env bash
# Session 32, call 1 (one machine start for everything: two refused starts cost 6 minutes):
#   1. the split kernel's CTA page sweep (decode_cta_sweep.cuh, fp8 caches at head_dim 64, off
#      by default): its test (quick, then full), racecheck and memcheck over it, the fp8
#      sweeps of the variants test; then the bench's fp8 rows (each beside its bf16 twin) with
#      the sweep on each tile against the default;
#   2. the engine (issue 20 / issue 16's engine rows; not timed in session 31): random
#      Qwen3-0.6B `kvattn bench` (nano-vllm's workload, single stream 128 + 256, TTFT 4096) at
#      bf16 and fp8; the default model's shape (SmolLM2-135M, random Llama weights: CUDA
#      dequantises GGUF to bf16, so the same network; the 98 MB GGUF is over the carry) at
#      bf16, fp8, and fp8 with the sweep (KVATTN_DECODE_CTA_SWEEP=1);
#   3. engine_cuda_serving_gpu_test (session 31 changed its step counters, not yet run);
#   1c. fp8 decode at head_dim 80 / 96 (the padded 128 tiles): the fp8 sweeps with them;
#   1b. partial rotary embeddings on CUDA (Phi-4-mini): the RoPE kernels' tests and the family
#      test against HF.
#   run: bash scripts/sessions/gpu_session32_first.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s32b (kvattn, engine_cuda_serving_gpu_test, kernels_decode_gpu_test,
#          gpu_decode_bench, engine_fused_rope_kv_gpu_test, engine_gemv_rope_kv_gpu_test,
#          engine_model_families_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s32b
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
# Partial rotary embeddings on CUDA (Phi-4-mini; the three RoPE forms take rotary_dim): the
# kernels' byte-equality tests with partial cases, and the family test against HF.
{
  run_logged rope_fused "$B/engine_fused_rope_kv_gpu_test"
  run_logged rope_gemv "$B/engine_gemv_rope_kv_gpu_test"
  run_logged phi4mini "$B/engine_model_families_gpu_test" --gtest_filter='Phi4MiniGpu.*:Phi3Gpu.*'
  grep -E "^\[phi4mini" "$OUT/phi4mini.log" | head -n 8
}
KVATTN_GPU_TEST_QUICK=1 run_logged sweep_quick "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.Fp8CtaSweep'
run_logged sweep_full "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.Fp8CtaSweep:DecodeGpu.BadIndicesAreCaughtByTheFaultWord'
# fp8 decode at head_dim 80 / 96 (the padded 128 tiles, session 32): the fp8 sweeps and the
# features' sweep now include them.
run_logged fp8_padded "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.Fp8CacheSweepAgainstReferenceOnStoredBytes:DecodeGpu.Fp8IntegerConversion'
KVATTN_GPU_TEST_QUICK=1 run_logged features "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpuFeatures.*'
room 150 "sanitizers" && both_sanitizers sweep "$B/kernels_decode_gpu_test" \
  'DecodeGpu.Fp8CtaSweep:DecodeGpu.Fp8CacheSweepAgainstReferenceOnStoredBytes:DecodeGpu.BadIndicesAreCaughtByTheFaultWord'
room 170 "variants" && KVATTN_GPU_TEST_QUICK=1 run_logged variants "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpuVariants.Sweep'
room 230 "fp8 bench" && {
  timeout 110 "$B/gpu_decode_bench" --only fp8 \
    --variants 'cta sweep,cta sweep swap,cta sweep noswap,cta sweep s4' >"$OUT/fp8_bench.log" 2>&1
  echo "fp8 bench rc=$?"
  grep -E '"decode (default|cta sweep[^"]*)"' "$OUT/fp8_bench.log" | grep -E 'no flush|flush: read' |
    sed -E 's/.*"op": "decode ([^"]*)", "shape": "([^"]*)", "us": ([0-9.]+).*"frac_copy": ([0-9.]+).*"note": "([^"]*)".*/\2 | \1 | \3 us | \4 | \5/' | head -n 80
}
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
bench_line() {  # LABEL MODEL KV [ENV=VALUE]
  env ${4:-KVATTN_NOTHING=0} timeout 60 "$B/kvattn" bench --model "$2" --device cuda \
    --kv-cache-dtype "$3" --json "$OUT/bench_$1.json" >"$OUT/bench_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/bench_$1.log" |
    grep -E "Throughput|KV pool|single|first token|leak|rror" | tr '\n' ' ')"
}
room 290 "engine" && bench_line q06_bf16 /tmp/q06 bf16
room 320 "engine" && bench_line smol_bf16 /tmp/smol bf16
room 350 "engine" && bench_line smol_fp8 /tmp/smol fp8
room 370 "engine" && bench_line smol_fp8_sweep /tmp/smol fp8 KVATTN_DECODE_CTA_SWEEP=1
room 390 "engine" && bench_line q06_fp8 /tmp/q06 fp8
room 400 "serving test" && {
  timeout 100 "$B/engine_cuda_serving_gpu_test" >"$OUT/serving.log" 2>&1
  echo "serving rc=$?: $(grep -E "PASSED|FAILED" "$OUT/serving.log" | head -n 3 | tr '\n' ' ')"
}
echo "end ${SECONDS}s"
