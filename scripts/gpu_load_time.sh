#!/usr/bin/env bash
# Issue 19, loading speed, on the GPU machine (written without a GPU; not yet run): the load of
# an 8B-shaped bf16 checkpoint onto the GPU the old way (KVATTN_LOAD_F32=1 / keep_16bit off:
# the safetensors loader widens BF16 to float32 host tensors, 32.8 GB for 8B, and the CUDA
# model rounds them back to bf16) against the new one (HfLoadOptions::keep_16bit: BF16 read
# in place from the mapping and uploaded as it is), in the same run, page cache warm for both.
# Both use the new upload (pinned double-buffered staging), so "old" here is the float32 round
# trip alone; the code before the change was slower still (docs/notes/model-families.md).
#   0. in the background while step 1 builds: the checkpoint, python3
#      scripts/make_random_qwen3.py --shape 8b (LAYERS=36, full depth: 16.4 GB of bf16, 8.2 B
#      parameters; LAYERS=8 for a quick run: 5.3 GB), reused when already there;
#   1. build (build-gpu, Release, sm_90a): engine_load_16bit_gpu_test, engine_load_16bit_test
#      and the command line (SKIP_BUILD=1 reuses build-gpu);
#   2. the equality tests: the CPU loader test, then every tiny family rewritten in BF16/F16,
#      CUDA logits of the two loads bit-identical, and the LLM with KVATTN_LOAD_F32=1 vs
#      without giving the same tokens;
#   3. the checkpoint's files read once (cat > /dev/null: page cache warm), then
#      bench/gpu_load_time_bench: old and new alternately, ROUNDS (2) each: seconds to the host
#      tensors, to upload them (Model::create, synchronized), in all, and GB/s of safetensors;
#      then the 8B-shaped checkpoint's CUDA logits through both loads bit-identical (4 decode
#      steps; exit 1 otherwise);
#   4. (BENCH=1, the default) `kvattn bench` (one 16-token prompt, 1 output token, --eager)
#      with KVATTN_LOAD_F32=1 and without, ROUNDS each: its load_s (the whole LLM
#      construction: weights, KV pool, warm-up).
# About 7-9 minutes on an H200 machine with 16 cores (the build dominates); logs under $OUT.
# Disk: the checkpoint; host memory: the old path holds 32.8 GB of float32 beside the page cache.
#   run: bash scripts/gpu_load_time.sh      (carry .deps; LAYERS=8 for a quick run)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
LAYERS=${LAYERS:-36}
ROUNDS=${ROUNDS:-2}
CKPT=${CKPT:-/tmp/q8b_L$LAYERS}
mkdir -p "$OUT"
source scripts/device_env.sh
status=0

step "checkpoint (background): random Qwen3 8B shape, $LAYERS layers -> $CKPT"
df -h /tmp | tail -1
ckpt_pid=
if [ -f "$CKPT/model.safetensors" ] && [ -f "$CKPT/config.json" ]; then
  echo "reusing $CKPT"
else
  (PYTHONUNBUFFERED=1 timeout 900 python3 scripts/make_random_qwen3.py --shape 8b \
     --layers "$LAYERS" --out "$CKPT" >"$OUT/checkpoint.log" 2>&1) &
  ckpt_pid=$!
fi

if [ "${SKIP_BUILD:-0}" != 1 ] || [ ! -x build-gpu/tests/engine/engine_load_16bit_gpu_test ]; then
  step build
  kvattn_gpu_build ON engine_load_16bit_gpu_test engine_load_16bit_test kvattn_cli gpu_load_time_bench
fi
bin=build-gpu/tests/engine

step "loader option on the CPU (dtypes kept, values, mapping lifetime, CPU logits)"
run_test load_16bit 300 $bin/engine_load_16bit_test

step "equality: CUDA logits from the float32 load == from the bf16 load (tiny families)"
run_test load_16bit_gpu 300 $bin/engine_load_16bit_gpu_test \
  --gtest_filter='Load16BitGpu.TinyFamilies*:Load16BitGpu.LlmLoadSwitch*'
grep -E "logits differ" "$OUT/load_16bit_gpu.log" | head -10

step "waiting for the checkpoint"
[ -n "$ckpt_pid" ] && wait "$ckpt_pid"
tail -n 3 "$OUT/checkpoint.log" 2>/dev/null
[ -f "$CKPT/model.safetensors" ] || { echo "CHECKPOINT FAILED"; exit 1; }
ls -la "$CKPT"

step "page cache warm: read the files once"
t0=$(date +%s%N)
cat "$CKPT"/*.safetensors >/dev/null
echo "read in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
free -g | head -2

step "load time: old (float32 round trip) vs new (bf16 kept), $ROUNDS rounds each; then both loads' CUDA logits bit for bit"
timeout 500 build-gpu/bench/gpu_load_time_bench "$CKPT" --rounds "$ROUNDS" --steps 4 \
  >"$OUT/load_time.log" 2>&1 || status=1
grep -E "^load time|logits differ" "$OUT/load_time.log" || status=1

if [ "${BENCH:-1}" = 1 ]; then
  step "kvattn bench load_s (LLM construction), KVATTN_LOAD_F32=1 vs default"
  for round in $(seq 1 "$ROUNDS"); do
    for f32 in 1 0; do
      log="$OUT/bench_f32_${f32}_r$round"
      KVATTN_LOAD_F32=$f32 timeout 150 ./build-gpu/kvattn bench --model "$CKPT" --device cuda \
        --eager --no-compare --num-seqs 1 --prefix-len 0 --min-input 16 --max-input 16 \
        --min-output 1 --max-output 1 --json "$log.json" >"$log.log" 2>&1
      echo "kvattn bench KVATTN_LOAD_F32=$f32 round $round: rc=$? load_s=$(python3 -c '
import json, sys
def find(j):
    if isinstance(j, dict):
        if "load_s" in j: return j["load_s"]
        j = list(j.values())
    if isinstance(j, list):
        for v in j:
            r = find(v)
            if r is not None: return r
try: print(find(json.load(open(sys.argv[1]))))
except Exception as e: print("n/a", e)' "$log.json")"
    done
  done
fi

step "summary"
for t in load_16bit load_16bit_gpu; do
  if grep -q "^\[  PASSED  \]" "$OUT/$t.log" 2>/dev/null && ! grep -q "^\[  FAILED  \]" "$OUT/$t.log"; then
    echo "$t: passed"
  else
    echo "$t: FAILED or did not run"; status=1
  fi
done
grep -E "^load time" "$OUT/load_time.log"
grep -hE "logits differ" "$OUT/load_16bit_gpu.log" "$OUT/load_time.log" | tail -3
exit $status
