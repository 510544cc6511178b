#!/usr/bin/env bash
# Issue 20's programmatic dependent launch (PDL) in one call on the GPU machine (written without
# a GPU; not yet run): builds the PDL test and the command line, runs engine_pdl_gpu_test
# (greedy tokens PDL on == off at batch 1/3/17/100, graphs on and off, tiny llama and qwen3;
# teacher-forced logits bit-equal on five tiny families, fused and unfused; the option and
# KVATTN_PDL reach the model), compute-sanitizer memcheck on one family of it, then times
# single-stream decode (`kvattn bench`'s single-stream run: 128-token prompt, 256 new tokens,
# graphs on) with KVATTN_PDL=1 and KVATTN_PDL=0 alternated twice each, on random Qwen3-0.6B and
# on the default model (SmolLM2 GGUF) when it is there, and nano-vllm's whole workload once
# each. Logs and JSON under $OUT.
#   run: bash scripts/gpu_pdl.sh [all|tests|bench]   (carry .deps; default all)
# On a cold machine whose build is slow, run `tests` and `bench` as two calls (build-gpu stays).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
what=${1:-all}

step build
kvattn_gpu_build OFF engine_pdl_gpu_test kvattn_cli
if [ "$what" = all ] || [ "$what" = bench ]; then
  [ -f /tmp/q06/config.json ] ||
    (PYTHONUNBUFFERED=1 timeout 240 python3 scripts/make_random_qwen3.py --shape 0.6b \
      --out /tmp/q06 >"$OUT/checkpoint.log" 2>&1 &)
fi

if [ "$what" = all ] || [ "$what" = tests ]; then
  step "engine: PDL == plain launches (greedy batch 1/3/17/100, logits bit-equal)"
  run_test pdl 300 build-gpu/tests/engine/engine_pdl_gpu_test
  grep -E "PDL (not )?supported|SKIPPED" "$OUT/pdl.log" | head -4
  step "memcheck: PDL logits, qwen3"
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 \
    build-gpu/tests/engine/engine_pdl_gpu_test --gtest_filter='Tiny/PdlLogits.*qwen3*' \
    >"$OUT/memcheck_pdl.log" 2>&1
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_pdl.log" | tail -n 1)"
fi

# bench_single MODEL LABEL: the single-stream figure with PDL on and off, alternated twice; a
# short main run (32 prompts) in front of it, and no TTFT run worth reading (4096 tokens).
bench_single() {
  local model=$1 label=$2
  for rep in 1 2; do
    for pdl in 1 0; do
      KVATTN_PDL=$pdl timeout 150 build-gpu/kvattn bench --model "$model" --device cuda \
        --num-seqs 32 --min-input 100 --max-input 200 --min-output 32 --max-output 64 \
        --ttft-input 256 --json "$OUT/bench_single_${label}_pdl${pdl}_${rep}.json" 2>&1 |
        tr '\r' '\n' | tee "$OUT/bench_single_${label}_pdl${pdl}_${rep}.log" |
        grep -E "single stream|rror" | sed "s/^/$label KVATTN_PDL=$pdl (#$rep): /"
    done
  done
}

if [ "$what" = all ] || [ "$what" = bench ]; then
  step "checkpoint (random Qwen3-0.6B)"
  for i in $(seq 1 120); do [ -f /tmp/q06/config.json ] && break; sleep 2; done
  [ -f "$OUT/checkpoint.log" ] && tail -n 1 "$OUT/checkpoint.log"
  step "single stream, Qwen3-0.6B: KVATTN_PDL=1 vs 0 (graphs on)"
  bench_single /tmp/q06 q06
  if [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
    step "single stream, SmolLM2-135M GGUF (default model): KVATTN_PDL=1 vs 0"
    bench_single models/SmolLM2-135M-Instruct.Q4_1.gguf smollm2
  fi
  for pdl in 1 0; do
    step "bench nano-vllm, KVATTN_PDL=$pdl (graphs on)"
    KVATTN_PDL=$pdl timeout 200 build-gpu/kvattn bench --model /tmp/q06 --device cuda \
      --workload nano-vllm --json "$OUT/bench_nano_pdl${pdl}.json" 2>&1 | tr '\r' '\n' |
      tee "$OUT/bench_nano_pdl${pdl}.log" |
      grep -E "workload|Throughput|single|first token|rror"
  done
fi
