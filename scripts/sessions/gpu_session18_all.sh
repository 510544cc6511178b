#!/usr/bin/env bash
# Session 18, the one call the device gave (issues 20 and 15): six binaries built here, stripped
# and packed in one xz stream with a 256 MiB dictionary (they share the library's kernels: 17.7
# MB for ~240 MB), every step time-guarded to end inside the 600 s limit, most needed first:
#   1. engine_gemv_rope_kv_gpu_test: the qkv GEMV's q/k norm + RoPE + KV write epilogue
#      bit-equal to run_rmsnorm + qk_norm_rope_store_kv;
#   2. the whole prefill suite with the consumers' look-ahead tile decode (built with
#      KVATTN_PREFILL_SM90_LOOKAHEAD on);
#   3. random Qwen3-0.6B single stream (128 in, 256 out), KVATTN_FUSED_ROPE=0 / 1 alternating,
#      then the 4096-token TTFT;
#   4. the prefill C++ bench, look-ahead (new) and before (old, HEAD 616a185), same call;
#   5. the engine's fused-on = off test with the epilogue; the sanitizers.
#   run: bash scripts/sessions/gpu_session18_all.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s18all (bins.tar.xz, the CLI's runtime .debs)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
step() { echo; echo "== $* == (${SECONDS}s)"; }
room() { [ $SECONDS -lt "$1" ] || { echo "skipped ($2): ${SECONDS}s gone"; return 1; }; }
B=/tmp/bin; mkdir -p $B /opt/kvrun && xz -dc build-carry-s18all/bins.tar.xz | tar -C $B -xf -
for f in build-carry-s18all/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }  # tests/data by its built path
verdict() { echo "$1 rc=$2 $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$1.log" | tr '\n' ' ')"
            grep -m8 -E "Failure|illegal|Which is|error" "$OUT/$1.log"; }
step "1. the rope epilogue test"
timeout 120 $B/engine_gemv_rope_kv_gpu_test >"$OUT/rope_kv.log" 2>&1; verdict rope_kv $?
step "2. the prefill suite (look-ahead)"
timeout 150 $B/prefill_test_new >"$OUT/prefill_full.log" 2>&1; verdict prefill_full $?
step "3. engine"
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 1)
ss() {  # $1: label, $2: extra flags; KVATTN_FUSED_ROPE from the caller
  timeout 60 $B/kvattn bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 $2 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single|first" | tr '\n' ' ')"
}
for round in 1 2; do
  room 330 "single stream round $round" || break
  KVATTN_FUSED_ROPE=0 ss "rope0_r$round" ""
  KVATTN_FUSED_ROPE=1 ss "rope1_r$round" ""
done
room 360 ttft && KVATTN_FUSED_ROPE=1 ss rope1_ttft "--ttft-input 4096"
step "4. prefill bench: new (look-ahead), old"
for b in new old; do
  room 480 "bench $b" || break
  timeout $((560 - SECONDS)) $B/prefill_bench_$b --reps 10 >"$OUT/bench_$b.log" 2>&1
  echo "$b rc=$?"; grep -v '^{' "$OUT/bench_$b.log" | grep -E "default|handover|ceiling"
done
step "5. fused engine test, sanitizers"
room 520 "fused engine test" &&
  { KVATTN_FUSED_ROPE=1 timeout $((585 - SECONDS)) $B/engine_fused_gemv_engine_gpu_test \
      >"$OUT/fused_engine.log" 2>&1; verdict fused_engine $?; }
room 540 "rope memcheck" &&
  { KVATTN_GPU_TEST_QUICK=1 timeout $((590 - SECONDS)) compute-sanitizer --tool memcheck \
      --error-exitcode 9 $B/engine_gemv_rope_kv_gpu_test --gtest_filter='GemvRopeKvDeclines.*:Cache/GemvRopeKv.*/bf16' \
      >"$OUT/rope_memcheck.log" 2>&1
    echo "rope memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/rope_memcheck.log" | tail -n 1)"; }
echo "end ${SECONDS}s"
