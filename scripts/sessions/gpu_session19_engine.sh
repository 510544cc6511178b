#!/usr/bin/env bash
# Session 19, call 2 (issue 20): the engine rebuilt with a fresh decode_attention.cu.o (the
# stale object behind sessions 18-19's 540 tok/s) and the GEMV's L2 hint for the next
# projection's weights (KVATTN_GEMV_L2_NEXT 0 off / 1 after the CTA's tiles / 2 before its
# wait). Tests first (bits equal with the hint, memcheck), then the single stream alternating,
# the rope epilogue beside it, nano-vllm's workload, TTFT.
# (The L2 hint was measured slower and its code reverted: docs/perf/NOTES.md, session 19.)
#   run: bash scripts/sessions/gpu_session19_engine.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s19b
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
B=/tmp/bin; mkdir -p $B /opt/kvrun && xz -dc build-carry-s19b/bins.tar.xz | tar -C $B -xf -
chmod +x $B/*
for f in build-carry-s19b/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 2>&1 | tail -n 1)
t() {  # $1: label, then the command
  local name=$1; shift
  timeout 300 "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$?: $(grep -E "PASSED|FAILED|ERROR SUMMARY|mode [0-9]" "$OUT/$name.log" | head -n 4 | tr '\n' ' ')"
}
for m in 0 1 2; do KVATTN_GEMV_L2_NEXT=$m t gemv_m$m $B/engine_cuda_gemv_gpu_test; done
KVATTN_GEMV_L2_NEXT=2 t gemv_memcheck compute-sanitizer --tool memcheck $B/engine_cuda_gemv_gpu_test --gtest_filter='*L2Hint*'
for m in 1 2; do KVATTN_GEMV_L2_NEXT=$m t fused_engine_m$m $B/engine_fused_gemv_engine_gpu_test; done
KVATTN_GEMV_L2_NEXT=2 t pdl_engine_m2 $B/engine_pdl_gpu_test
ss() {  # $1: label; the environment is the caller's
  timeout 60 $B/kvattn bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single|first token" | tr '\n' ' ')"
}
for round in 1 2; do
  for m in 0 1 2; do KVATTN_GEMV_L2_NEXT=$m ss "l2next${m}_r$round"; done
  KVATTN_GEMV_L2_NEXT=0 KVATTN_FUSED_ROPE=1 ss "rope1_r$round"
done
nv() {  # nano-vllm's workload (bench defaults)
  timeout 120 $B/kvattn bench --model /tmp/q06 --device cuda >"$OUT/nv_$1.log" 2>&1
  echo "nv $1 rc=$?: $(tr '\r' '\n' < "$OUT/nv_$1.log" | grep -E "^Total|kv cache" | tr '\n' ' ')"
}
for m in 0 2 1; do KVATTN_GEMV_L2_NEXT=$m nv "l2next$m"; done
echo "end ${SECONDS}s"
