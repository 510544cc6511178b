#!/usr/bin/env bash
# Issue 20's fused decode GEMVs (KVATTN_FUSED_GEMV; cuda_gemv.h, docs/notes/decode-fused-gemv.md)
# in one call on the GPU machine (written without a GPU; not yet run):
#   tests  builds and runs engine_cuda_gemv_fused_gpu_test (the kernels bit-equal to add_rmsnorm
#          + GEMV (+ silu_mul) and within float64 bounds), compute-sanitizer memcheck on it,
#          engine_fused_gemv_engine_gpu_test (greedy tokens and teacher-forced logits fused on
#          == off, batch 1/3/17/100), and engine_cuda_gemv_gpu_test (the plain GEMV, whose split
#          changed at qkv/gate_up sizes);
#   bench  bench/gpu_fused_gemv_bench (fused vs add_rmsnorm + cuBLASLt/GEMV (+ silu_mul) at
#          Qwen3-0.6B's widths, rows 1/4/8, graph replay; plain and --pdl), then `kvattn bench`
#          on a random Qwen3-0.6B: the single-stream run (128-token prompt, 256 new tokens,
#          graphs on) and nano-vllm's workload, KVATTN_FUSED_GEMV=0 and 1, with KVATTN_PDL=0
#          and 1, alternated.
# Logs and JSON under $OUT.
#   run: bash scripts/gpu_fused_gemv.sh [all|tests|bench]   (carry .deps; default all)
# On a cold machine whose build is slow, run `tests` and `bench` as two calls (build-gpu stays).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
what=${1:-all}

step build
kvattn_gpu_build ON engine_cuda_gemv_fused_gpu_test engine_fused_gemv_engine_gpu_test \
  engine_cuda_gemv_gpu_test gpu_fused_gemv_bench kvattn_cli
if [ "$what" = all ] || [ "$what" = bench ]; then
  [ -f /tmp/q06/config.json ] ||
    (PYTHONUNBUFFERED=1 timeout 240 python3 scripts/make_random_qwen3.py --shape 0.6b \
      --out /tmp/q06 >"$OUT/checkpoint.log" 2>&1 &)
fi

if [ "$what" = all ] || [ "$what" = tests ]; then
  step "kernels: fused GEMVs == add_rmsnorm + GEMV (+ silu_mul), float64 bounds"
  run_test fused_gemv_kernels 300 build-gpu/tests/engine/engine_cuda_gemv_fused_gpu_test
  step "memcheck: fused GEMV kernels"
  timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 \
    build-gpu/tests/engine/engine_cuda_gemv_fused_gpu_test \
    >"$OUT/memcheck_fused_gemv.log" 2>&1
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_fused_gemv.log" | tail -n 1)"
  step "engine: fused GEMV on == off (greedy batch 1/3/17/100, teacher-forced logits)"
  run_test fused_gemv_engine 400 build-gpu/tests/engine/engine_fused_gemv_engine_gpu_test
  step "engine, PDL on: teacher-forced logits fused on == off"
  KVATTN_PDL=1 run_test fused_gemv_engine_pdl 300 \
    build-gpu/tests/engine/engine_fused_gemv_engine_gpu_test --gtest_filter='Tiny/FusedGemvLogits.*'
  step "plain GEMV (its qkv/gate_up split changed)"
  run_test gemv 300 build-gpu/tests/engine/engine_cuda_gemv_gpu_test
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
  step "micro-bench: fused vs unfused at Qwen3-0.6B widths (plain launches, then PDL)"
  timeout 120 build-gpu/bench/gpu_fused_gemv_bench >"$OUT/fused_gemv_bench.log" 2>&1
  echo "rc=$?"; grep -E "^\||copy|device" "$OUT/fused_gemv_bench.log"
  timeout 120 build-gpu/bench/gpu_fused_gemv_bench --pdl >"$OUT/fused_gemv_bench_pdl.log" 2>&1
  echo "rc=$?"; grep -E "^\||device" "$OUT/fused_gemv_bench_pdl.log"

  step "checkpoint (random Qwen3-0.6B)"
  for i in $(seq 1 120); do [ -f /tmp/q06/config.json ] && break; sleep 2; done
  [ -f "$OUT/checkpoint.log" ] && tail -n 1 "$OUT/checkpoint.log"
  step "single stream, Qwen3-0.6B: KVATTN_FUSED_GEMV x KVATTN_PDL (graphs on), twice"
  for rep in 1 2; do
    for pdl in 0 1; do
      for fg in 0 1; do
        KVATTN_GEMV=auto KVATTN_FUSED_GEMV=$fg KVATTN_PDL=$pdl timeout 150 build-gpu/kvattn bench --model /tmp/q06 \
          --device cuda --num-seqs 32 --min-input 100 --max-input 200 --min-output 32 \
          --max-output 64 --ttft-input 256 --json "$OUT/bench_single_fg${fg}_pdl${pdl}_${rep}.json" \
          2>&1 | tr '\r' '\n' | tee "$OUT/bench_single_fg${fg}_pdl${pdl}_${rep}.log" |
          grep -E "single stream|rror" | sed "s/^/FUSED_GEMV=$fg PDL=$pdl (#$rep): /"
      done
    done
  done
  for pdl in 0 1; do
    for fg in 0 1; do
      step "bench nano-vllm, KVATTN_FUSED_GEMV=$fg KVATTN_PDL=$pdl (graphs on)"
      KVATTN_GEMV=auto KVATTN_FUSED_GEMV=$fg KVATTN_PDL=$pdl timeout 200 build-gpu/kvattn bench --model /tmp/q06 \
        --device cuda --workload nano-vllm --json "$OUT/bench_nano_fg${fg}_pdl${pdl}.json" 2>&1 |
        tr '\r' '\n' | tee "$OUT/bench_nano_fg${fg}_pdl${pdl}.log" |
        grep -E "Throughput|single stream|rror"
    done
  done
fi
