#!/usr/bin/env bash
# Tensor parallelism on a 2-GPU machine (nvidia-h200-x2), one call: build, the NCCL/TP GPU
# tests (TP=2 greedy tokens vs TP=1), then nano-vllm's workload on a Qwen3-8B-layer-shape
# random model at TP=1 and TP=2, and TP=2 with the collectives left out (KVATTN_TP_SKIP_COMM=1,
# timing only) to estimate the share of step time in NCCL. Also the single-stream decode of
# the Qwen3-0.6B shape with the default GEMV policy. Env: OUT, LAYERS (default 8: the 8B layer
# shape at reduced depth, so weights load within the call), THROUGHPUT_ONLY=1 (only the TP=1
# and TP=2 throughput runs). Carry .deps.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
LAYERS=${LAYERS:-8}
ONLY=${THROUGHPUT_ONLY:-0}
mkdir -p "$OUT"
source scripts/device_env.sh >/dev/null 2>&1
export NCCL_NVLS_ENABLE=0
step() { echo; echo "== $* == ($(date +%T))"; }
nvidia-smi --query-gpu=index,name --format=csv,noheader

step build
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a >"$OUT/build.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" --target kvattn_cli engine_nccl_gpu_test \
    engine_tensor_parallel_gpu_test engine_tensor_parallel_2gpu_gpu_test >>"$OUT/build.log" 2>&1 ||
  { tail -n 30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
grep -i "nccl" "$OUT/build.log" | head -2

if [ "$ONLY" != 1 ]; then
step "tp tests"
for t in nccl tensor_parallel tensor_parallel_2gpu; do
  timeout 180 "build-gpu/tests/engine/engine_${t}_gpu_test" >"$OUT/t_$t.log" 2>&1
  echo "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/t_$t.log" | tr '\n' ' ')"
  grep -E "TP=2 vs TP=1|Failure" -A3 "$OUT/t_$t.log" | head -12
done
fi

step "checkpoints"
python3 scripts/make_random_qwen3.py --shape 8b --layers "$LAYERS" --out /tmp/q8b 2>&1 | tail -1
[ "$ONLY" = 1 ] || python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 2>&1 | tail -1

K=./build-gpu/kvattn
common=(--device cuda --single-output 32 --ttft-input 1024)
for tp in 1 2; do
  step "nano-vllm workload, Qwen3-8B layer shape x $LAYERS layers, TP=$tp"
  timeout 200 "$K" bench --model /tmp/q8b "${common[@]}" --tensor-parallel $tp \
    --json "$OUT/tp$tp.json" 2>&1 | tr '\r' '\n' | grep -E "loaded|Throughput|split|single|first|free|error"
done
if [ "$ONLY" != 1 ]; then
step "TP=2 without collectives (timing only)"
KVATTN_TP_SKIP_COMM=1 timeout 200 "$K" bench --model /tmp/q8b "${common[@]}" --tensor-parallel 2 \
  --json "$OUT/tp2_nocomm.json" 2>&1 | tr '\r' '\n' | grep -E "Throughput|split|error"

step "single stream, Qwen3-0.6B shape (default GEMV policy, then KVATTN_GEMV=0)"
for g in "" 0; do
  KVATTN_GEMV=$g timeout 120 "$K" bench --model /tmp/q06 --device cuda --num-seqs 1 --min-input 8 \
    --max-input 8 --min-output 8 --max-output 8 --single-output 512 2>&1 | grep -E "single|error" |
    sed "s/^/KVATTN_GEMV='$g' /"
done
fi

step summary
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def tp(name):
    try:
        return json.load(open(os.path.join(out, name)))["throughput"]["output_tok_per_s"]
    except Exception as e:
        return None
a, b, c = tp("tp1.json"), tp("tp2.json"), tp("tp2_nocomm.json")
if a and b:
    print(f"TP=2 / TP=1 output tok/s: {b:,.0f} / {a:,.0f} = {b / a:.2f}x")
if b and c:
    print(f"NCCL share of TP=2 time (1 - t_nocomm / t): {1 - b / c:.1%}")
PY
