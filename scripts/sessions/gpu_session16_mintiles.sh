#!/usr/bin/env bash
# Session 16, call 3 (issues 16, 20): the small decode kernel's unused chunks at short lengths
# (KVATTN_DECODE_SMALL_MIN_TILES=1; call 1 timed 1x130 16/8 13.98 -> 11.01 us and 9/3 d64
# 15.62 -> 10.05, nothing slower): the whole decode suite and memcheck with it on (binaries
# built here, in build-carry), then the engine (built here on the GPU machine): single-stream
# decode (128 + 256 tokens, random Qwen3-0.6B, graphs) with it off / on, twice, and greedy
# tokens off vs on for 1 and 3 prompts. Prediction: single stream +6-9% (28 layers x ~3 us of
# ~1.09 ms a token); tokens equal.
#   run: bash scripts/sessions/gpu_session16_mintiles.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: .deps build-carry
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
T=build-carry/kernels_decode_gpu_test
step "decode suite, min tiles 1"
KVATTN_DECODE_SMALL_MIN_TILES=1 run_test decode_mt1 300 "$T"
KVATTN_DECODE_SMALL_MIN_TILES=1 KVATTN_GPU_TEST_QUICK=1 timeout 90 compute-sanitizer --tool memcheck \
  --error-exitcode 9 "$T" --gtest_filter='DecodeGpu.CudaGraphCaptureAndReplay:DecodeGpu.ShapesAtTheEdges' \
  >"$OUT/memcheck_mt1.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_mt1.log" | tail -n 1)"
step "build kvattn"
kvattn_gpu_build OFF kvattn_cli
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 1
step "single stream (128 + 256), min tiles 0 / 1"
for round in 1 2; do
  for mt in 0 1; do
    KVATTN_DECODE_SMALL_MIN_TILES=$mt timeout 90 build-gpu/kvattn bench --model /tmp/q06 \
      --device cuda --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
      --single-input 128 --single-output 256 >"/tmp/ss_${mt}_r${round}.log" 2>&1
    echo "round $round mt=$mt rc=$?: $(grep -i "single" "/tmp/ss_${mt}_r${round}.log" | tail -n 2 | tr '\n' ' ')"
  done
done
cp /tmp/ss_1_r1.log "$OUT/bench_mt1.log"
step "greedy tokens, min tiles 0 vs 1"
for mt in 0 1; do
  KVATTN_DECODE_SMALL_MIN_TILES=$mt timeout 90 build-gpu/kvattn generate --model /tmp/q06 --device cuda \
    -n 96 --no-chat --ignore-eos --json "/tmp/gen1_$mt.json" -q "The quick brown fox" >/dev/null 2>&1
  KVATTN_DECODE_SMALL_MIN_TILES=$mt timeout 90 build-gpu/kvattn generate --model /tmp/q06 --device cuda \
    -n 96 --no-chat --ignore-eos --json "/tmp/gen3_$mt.json" -q "one" "two three" "four five six" >/dev/null 2>&1
done
python3 - <<'PY'
import json
for n in (1, 3):
    a = [json.loads(l)["token_ids"] for l in open(f"/tmp/gen{n}_0.json")]
    b = [json.loads(l)["token_ids"] for l in open(f"/tmp/gen{n}_1.json")]
    same = [x == y for x, y in zip(a, b)]
    print(f"{n} prompt(s): {len(a)} vs {len(b)} outputs, {sum(len(x) for x in a)} tokens, equal: {same}")
PY
