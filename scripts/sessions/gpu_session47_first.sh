#!/usr/bin/env bash
# Prepared in session 46 for the next session's first call (best on an H200: issue 20's
# targets are H200 figures, last measured there in session 39). Everything is built here
# (sm_90a): the CLI, the decode bench and the two GPU test binaries (~100 s on 16 cores).
#   1. racecheck and memcheck on PrefillGpu.TileEdges (session 45's pinned shared-memory base
#      ran functionally on an H100 and an H200; its sanitizers are owed);
#   2. the decode uniform plan against the default, warm and after do_bench's memset
#      (--memset-large), two rounds: session 46's H200 harness saw the one-chunk kernel pay
#      twice the split kernel's memset penalty (decide: keep, make it card-aware, or off), with
#      the small kernel's one-chunk forms for every batch (8 and 4 warps) beside it;
#   3. issue 20's engine figures: nano-vllm's workload bf16 and fp8 (Qwen3-0.6B shape, random
#      weights, graphs), with the single streams and TTFT; SmolLM2-135M's single stream.
#   run: LIMIT=560 bash scripts/sessions/gpu_session47_first.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, kvattn_gpu_build
source scripts/device_carried.sh  # B, engine_bench, single_bench, both_sanitizers, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-560}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON kvattn_cli gpu_decode_bench kernels_prefill_gpu_test kernels_decode_gpu_test
mkdir -p "$B" && ln -sf "$PWD/build-gpu/kvattn" "$B/kvattn"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
echo "built at ${SECONDS}s"
step "prefill sanitizers (tile edges)"
both_sanitizers prefill build-gpu/tests/kernels/kernels_prefill_gpu_test 'PrefillGpu.TileEdges'
step "decode: uniform plan vs default, warm and after a memset"
for round in 1 2; do
  room $((LIMIT - 300)) "uniform round $round" || break
  timeout 90 build-gpu/bench/gpu_decode_bench --only decode --quick --memset-large \
    --variants "uniform,small c1,small c1 w4" > "$OUT/uniform_r$round.txt" 2>&1
  echo "uniform r$round rc=$?"
  grep -E '"op": "decode (default|uniform|small c1|small c1 w4)"' "$OUT/uniform_r$round.txt" |
    grep -E '64x4096 32/8 page|256x1024 16/8 page|8x32768 32/8 page|96x4096|256x1024 8/8' |
    sed -E 's/.*"op": "([^"]+)".*"shape": "([^"]*)".*"us": ([0-9.]+).*"note": "([^"]*)".*/\1 | \2 | \3 (\4)/'
done
step "engine"
random_qwen3_06b
random_smollm2
room $((LIMIT - 200)) "qwen3 bf16" && engine_bench q06_bf16 /tmp/q06
room $((LIMIT - 120)) "qwen3 fp8" && engine_bench q06_fp8 /tmp/q06 --kv-cache-dtype fp8
room $((LIMIT - 40)) "smollm2 single" && single_bench smol /tmp/smol 128
echo "end ${SECONDS}s"
