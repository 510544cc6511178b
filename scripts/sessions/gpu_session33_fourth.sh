#!/usr/bin/env bash
# Session 33, call 4: the qkv GEMV's RoPE + KV write epilogue by rotation pairs
# (Gemv::run_rmsnorm_rope_pairs, KVATTN_FUSED_ROPE_PAIRS=1: heads without q/k norms rotated
# whole, no clusters): its byte-equality test against run_rmsnorm + qk_norm_rope_store_kv (and
# the cluster form's, unchanged), memcheck over it, the engine's fused-vs-unfused logits with it
# on, then SmolLM2's single stream with it off / on, alternating (one launch a layer fewer: the
# RoPE kernel was 4.5 us a layer under ncu in call 2).
#   run: bash scripts/sessions/gpu_session33_fourth.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s33g (kvattn, engine_gemv_rope_kv_gpu_test,
#          engine_fused_gemv_engine_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s33g
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged rope_gemv "$B/engine_gemv_rope_kv_gpu_test"
grep -E "Failure|differ|declined" "$OUT/rope_gemv.log" | head -n 8
KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$B/engine_gemv_rope_kv_gpu_test" --gtest_filter='*GemvRopePairs*' >"$OUT/memcheck_pairs.log" 2>&1
echo "memcheck pairs rc=$? $(grep -E "ERROR SUMMARY" "$OUT/memcheck_pairs.log" | tail -n 1)"
KVATTN_FUSED_ROPE_PAIRS=1 run_logged engine_fused "$B/engine_fused_gemv_engine_gpu_test"
grep -E "Failure|differs" "$OUT/engine_fused.log" | head -n 6
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
single() {  # LABEL [ENV=VALUE]
  env ${2:-KVATTN_NOTHING=0} timeout 60 "$B/kvattn" bench --model /tmp/smol --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single stream|rror" | tr '\n' ' ')"
}
for round in 1 2 3; do
  single "off_$round"
  single "pairs_$round" KVATTN_FUSED_ROPE_PAIRS=1
done
room 200 "nano-vllm" && {
  env KVATTN_FUSED_ROPE_PAIRS=1 timeout 60 "$B/kvattn" bench --model /tmp/smol --device cuda \
    --no-compare >"$OUT/bench_pairs.log" 2>&1
  echo "smol pairs rc=$?: $(tr '\r' '\n' < "$OUT/bench_pairs.log" |
    grep -E "Throughput|single|first token|leak|rror" | tr '\n' ' ')"
}
echo "end ${SECONDS}s"
