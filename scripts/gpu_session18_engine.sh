#!/usr/bin/env bash
# Session 18, call 2 (issue 20): the qkv GEMV with the q/k norm + RoPE + KV write as its
# epilogue (Gemv::run_rmsnorm_rope_kv, KVATTN_FUSED_ROPE=1; =0 keeps two launches), and the
# prefill consumers' look-ahead (the carried binaries were built with it on):
#   1. engine_gemv_rope_kv_gpu_test (bit-equal to run_rmsnorm + qk_norm_rope_store_kv), then
#      memcheck on it (quick); engine_fused_gemv_engine_gpu_test (greedy tokens and logits,
#      fused on = off, the epilogue ran);
#   2. random Qwen3-0.6B single stream (128 in, 256 out), KVATTN_FUSED_ROPE=0 / default
#      alternating, two rounds; then the defaults with the 4096-token TTFT and nano-vllm's
#      workload once.
#   run: bash scripts/gpu_session18_engine.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-s18e (kvattn CLI, the two test binaries, the CLI's runtime .debs)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
step() { echo; echo "== $* == ($(date +%T))"; }
mkdir -p /tmp/bin /opt/kvrun
for f in build-carry-s18e/*.xz; do
  xz -dc "$f" > "/tmp/bin/$(basename "$f" .xz)" && chmod +x "/tmp/bin/$(basename "$f" .xz)"
done
for f in build-carry-s18e/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }  # tests/data by its built path
verdict() { echo "$1 rc=$2 $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$1.log" | tr '\n' ' ')"
            grep -m8 -E "Failure|illegal|Which is|error" "$OUT/$1.log"; }
step "1. tests"
timeout 200 /tmp/bin/engine_gemv_rope_kv_gpu_test >"$OUT/rope_kv.log" 2>&1; verdict rope_kv $?
KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
  /tmp/bin/engine_gemv_rope_kv_gpu_test --gtest_filter='Cache/GemvRopeKv.*/bf16:GemvRopeKvDeclines.*' \
  >"$OUT/rope_kv_memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/rope_kv_memcheck.log" | tail -n 1)"
KVATTN_FUSED_ROPE=1 timeout 200 /tmp/bin/engine_fused_gemv_engine_gpu_test >"$OUT/fused_engine.log" 2>&1; verdict fused_engine $?
step "2. engine"
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 1
ss() {  # $1: label; env from the caller
  timeout 90 /tmp/bin/kvattn bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 $2 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single|first" | tr '\n' ' ')"
}
for round in 1 2; do
  KVATTN_FUSED_ROPE=0 ss "rope0_r$round" ""
  KVATTN_FUSED_ROPE=1 ss "rope1_r$round" ""
done
KVATTN_FUSED_ROPE=1 ss rope1_ttft "--ttft-input 4096"
KVATTN_FUSED_ROPE=1 timeout 150 /tmp/bin/kvattn bench --model /tmp/q06 --device cuda --workload nano-vllm \
  --json "$OUT/nano.json" >"$OUT/nano.log" 2>&1
echo "nano-vllm rc=$?: $(tr '\r' '\n' < "$OUT/nano.log" | grep -E "Throughput|blocks free" | tr '\n' ' ')"
