#!/usr/bin/env bash
# The first GPU call after session 12: what it wrote after its device time ran out, in one
# build (Release, sm_90a, benches on). Both parts are off by default (or opt-in) in the library:
#   1. the sampler's top-k / top-p selects in thread block clusters (KVATTN_SAMPLE_CLUSTERS=1):
#      split == clusters == one CTA per row (engine_cuda_serving_gpu_test), the micro-bench
#      (split_clusters column), `kvattn bench` single stream with --top-k 50 --top-p 0.9,
#      clusters off / on; memcheck and racecheck of the sampling tests;
#   2. cascade decode over an fp8 cache through the dequantized prefix: dequant_fp8_pages
#      (bit-exact test, memcheck), the cascade layer test (fp8 cases), and the prefix
#      workload with an fp8 cache, cascade off / 256;
#   3. the step timeline (kvattn bench --timeline; issue 20's "report the step timeline");
#   4. the small decode kernel's interleaved chunks (KVATTN_DECODE_SMALL_INTERLEAVE=1): the
#      decode variant tests (they include it), then single stream and 1x8192 off / on.
# Predictions (docs/perf/NOTES.md, session 12): top-k 50 + top-p 0.9 at R=1 984 -> 150-200 us;
# fp8 prefix workload with the cascade 11,458 -> 16-19k tok/s (6.5-7.5 ms a decode step).
#   run: bash scripts/sessions/gpu_session13_first.sh > $OUT/summary.txt 2>&1; tail -n 120 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ ! -f /tmp/q06/config.json ]; then
  (PYTHONUNBUFFERED=1 timeout 300 python3 scripts/make_random_qwen3.py --shape 0.6b \
     --out /tmp/q06 > "$OUT/checkpoint.log" 2>&1) &
fi
step build
kvattn_gpu_build ON engine_cuda_serving_gpu_test kernels_fp8_dequant_pages_gpu_test \
  attention_attention_cascade_gpu_test engine_step_timeline_gpu_test gpu_engine_kernels_bench \
  kernels_decode_gpu_test gpu_decode_bench kvattn_cli

step "1. sampler: split == clusters == one CTA per row"
run_test sampling 200 build-gpu/tests/engine/engine_cuda_serving_gpu_test --gtest_filter='CudaSampling.*'
for tool in memcheck racecheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 \
    build-gpu/tests/engine/engine_cuda_serving_gpu_test \
    --gtest_filter='CudaSampling.SplitFormDrawsTheOneCtaTokens' >"$OUT/sampling_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sampling_$tool.log" | tail -n 1)"
done
timeout 120 build-gpu/bench/gpu_engine_kernels_bench --only sample >"$OUT/sample_bench.log" 2>&1
echo "bench rc=$?"; grep -E '"op": "sample|ERROR' "$OUT/sample_bench.log" |
  sed -E 's/.*"op": "([^"]*)".*"T": ([0-9]+), "variant": "([^"]*)", "us": ([0-9.]+).*/\1 R=\2 \3 \4 us/'

step "2. fp8 cascade: dequant_fp8_pages, the layer test, memcheck"
run_test dequant 120 build-gpu/tests/kernels/kernels_fp8_dequant_pages_gpu_test
run_test cascade_layer 200 build-gpu/tests/attention/attention_attention_cascade_gpu_test
KVATTN_GPU_TEST_QUICK=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
  build-gpu/tests/kernels/kernels_fp8_dequant_pages_gpu_test >"$OUT/dequant_memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/dequant_memcheck.log" | tail -n 1)"

step "3. step timeline (issue 20): test, then nano-vllm's workload with --timeline"
run_test timeline 120 build-gpu/tests/engine/engine_step_timeline_gpu_test
for i in $(seq 1 150); do [ -f /tmp/q06/config.json ] && break; sleep 2; done
K=build-gpu/kvattn
timeout 150 $K bench --model /tmp/q06 --device cuda --timeline --json "$OUT/nano_timeline.json" \
  2>&1 | tr '\r' '\n' | grep -E "Throughput|timeline|single|first|error"

step "4. kvattn bench (random Qwen3-0.6B)"
for cl in 0 1; do
  KVATTN_SAMPLE_CLUSTERS=$cl timeout 100 $K bench --model /tmp/q06 --device cuda --top-k 50 \
    --top-p 0.9 --num-seqs 1 --min-input 8 --max-input 8 --min-output 8 --max-output 8 \
    --ttft-input 256 2>&1 | tr '\r' '\n' | grep -E "single|error" | sed "s/^/clusters=$cl top-k 50 top-p 0.9: /"
done
for cascade in 0 256; do
  echo "-- kv fp8, --cascade-min-prefix $cascade"
  timeout 150 $K bench --model /tmp/q06 --device cuda --workload prefix --kv-cache-dtype fp8 \
    --cascade-min-prefix "$cascade" --json "$OUT/prefix_fp8_c$cascade.json" 2>&1 | tr '\r' '\n' |
    grep -E "Throughput|decode steps|cascade|cache on/off|blocks free|error"
done
step "5. the small decode kernel's interleaved chunks (off / on)"
KVATTN_GPU_TEST_QUICK=1 run_test decode_variants 300 build-gpu/tests/kernels/kernels_decode_gpu_test \
  --gtest_filter='DecodeGpuVariants.*:DecodeGpuFeatures.Variants:DecodeGpu.CudaGraphCaptureAndReplay'
for il in 0 1 0 1; do
  KVATTN_DECODE_SMALL_INTERLEAVE=$il timeout 100 $K bench --model /tmp/q06 --device cuda \
    --num-seqs 1 --min-input 8 --max-input 8 --min-output 8 --max-output 8 --ttft-input 256 \
    2>&1 | tr '\r' '\n' | grep -E "single|error" | sed "s/^/interleave=$il: /"
done
for il in 0 1; do
  KVATTN_DECODE_SMALL_INTERLEAVE=$il timeout 120 build-gpu/bench/gpu_decode_bench --only decode \
    --quick --reps 30 2>&1 | grep -E '"shape": "1x' | head -6 | sed "s/^/interleave=$il: /"
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
