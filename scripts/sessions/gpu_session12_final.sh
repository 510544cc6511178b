#!/usr/bin/env bash
# Session 12's last GPU call: the engine defaults flipped from this session's measurements
# (row kernels, fused decode GEMVs at <= 4 rows, KVATTN_GEMV auto, PDL on, cascade auto) and
# the sampler's split form for small batches, in one cold build:
#   1. the sampler (split == one CTA per row, bit for bit; graphs on == off; greedy == argmax),
#      the engine's fused == unfused and PDL on == off tests under the new defaults;
#   2. the sampler micro-bench (one CTA per row vs split, R = 1/4/256);
#   3. `kvattn bench` on the random Qwen3-0.6B with the defaults: nano-vllm's workload, the
#      single stream and the 4096-token TTFT; then the prefix workload (cascade auto).
#   run: bash scripts/sessions/gpu_session12_final.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
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
kvattn_gpu_build ON engine_cuda_serving_gpu_test engine_fused_kernels_gpu_test \
  engine_pdl_gpu_test gpu_engine_kernels_bench kvattn_cli

step "1. sampler + engine tests (new defaults)"
run_test serving 300 build-gpu/tests/engine/engine_cuda_serving_gpu_test
run_test fused_greedy 240 build-gpu/tests/engine/engine_fused_kernels_gpu_test
run_test pdl 240 build-gpu/tests/engine/engine_pdl_gpu_test

step "2. sampler micro-bench"
timeout 120 build-gpu/bench/gpu_engine_kernels_bench --only sample >"$OUT/sample_bench.log" 2>&1
echo "rc=$?"; grep -E '"op": "sample|ERROR' "$OUT/sample_bench.log" |
  sed -E 's/.*"op": "([^"]*)".*"T": ([0-9]+), "variant": "([^"]*)", "us": ([0-9.]+).*/\1 R=\2 \3 \4 us/'

step "3. kvattn bench, defaults (random Qwen3-0.6B)"
for i in $(seq 1 150); do [ -f /tmp/q06/config.json ] && break; sleep 2; done
timeout 200 build-gpu/kvattn bench --model /tmp/q06 --device cuda --workload nano-vllm \
  --json "$OUT/bench_nano.json" 2>&1 | tr '\r' '\n' |
  grep -E "Throughput|single|first|blocks free|error"
step "single stream: sampler split (default) vs KVATTN_SAMPLE_SPLIT=0, twice"
for rep in 1 2; do
  for sp in 1 0; do
    KVATTN_SAMPLE_SPLIT=$sp timeout 100 build-gpu/kvattn bench --model /tmp/q06 --device cuda \
      --num-seqs 1 --min-input 8 --max-input 8 --min-output 8 --max-output 8 --ttft-input 256 \
      2>&1 | tr '\r' '\n' | grep -E "single|error" | sed "s/^/KVATTN_SAMPLE_SPLIT=$sp: /"
  done
done
timeout 200 build-gpu/kvattn bench --model /tmp/q06 --device cuda --workload prefix \
  --json "$OUT/bench_prefix.json" 2>&1 | tr '\r' '\n' |
  grep -E "Throughput|cascade|cache on/off|hit rate|blocks free|error"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
