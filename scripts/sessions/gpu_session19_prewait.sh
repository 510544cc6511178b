#!/usr/bin/env bash
# Session 19, call 5 (issue 20): norm weights loaded before the PDL wait (the norm-fused
# GEMVs' and the q/k norm + RoPE kernel's; bit-identical). GPU tests of the touched kernels
# first, then the single stream alternating with the build before (call 3's binary), three
# rounds; nano-vllm's workload at bf16 and fp8 KV caches; KV blocks after each.
#   run: bash scripts/sessions/gpu_session19_prewait.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s19d (bins.tar.xz: kvattn, kvattn_before, tests; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
B=/tmp/bin; mkdir -p $B /opt/kvrun && xz -dc build-carry-s19d/bins.tar.xz | tar -C $B -xf -
chmod +x $B/*
for f in build-carry-s19d/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 2>&1 | tail -n 1)
t() {  # $1: label, then the command
  local name=$1; shift
  timeout 300 "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$?: $(grep -E "PASSED|FAILED|ERROR SUMMARY" "$OUT/$name.log" | head -n 4 | tr '\n' ' ')"
}
for tb in engine_cuda_gemv_fused_gpu_test engine_cuda_gemv_gpu_test engine_fused_rope_kv_gpu_test \
          engine_row_kernels_gpu_test engine_gemv_rope_kv_gpu_test engine_fused_gemv_engine_gpu_test \
          engine_pdl_gpu_test; do
  t "$tb" $B/$tb
done
t memcheck_fused compute-sanitizer --tool memcheck $B/engine_cuda_gemv_fused_gpu_test
t memcheck_rope compute-sanitizer --tool memcheck $B/engine_fused_rope_kv_gpu_test
ss() {  # $1: label, $2: binary
  timeout 60 $B/$2 bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single|first token" | tr '\n' ' ')"
}
for round in 1 2 3; do ss "before_r$round" kvattn_before; ss "prewait_r$round" kvattn; done
nv() {  # $1: label, then extra flags: nano-vllm's workload (bench defaults)
  local name=$1; shift
  timeout 120 $B/kvattn bench --model /tmp/q06 --device cuda "$@" >"$OUT/nv_$name.log" 2>&1
  echo "nv $name rc=$?: $(tr '\r' '\n' < "$OUT/nv_$name.log" | grep -E "^Total|kv cache|KV pool" | tr '\n' ' ')"
}
nv bf16; nv fp8 --kv-cache-dtype fp8
echo "end ${SECONDS}s"
