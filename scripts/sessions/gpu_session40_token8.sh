#!/usr/bin/env bash
# Session 40, call 4: the token kernel over float8_e4m3 caches (token_attention.cuh: the codes
# times the KV head's scales; the token's own K/V quantised into the cache and attended as the
# cache then holds them). The token kernel's suite (the new Fp8CacheMatchesTheLayeredPath
# included), then single streams of SmolLM2-135M (9/3 d64) at fp8 and bf16 with this build and
# with call 3's (old_kvattn: fp8 without the token kernel), alternating, and Qwen3-0.6B's.
#   run: bash scripts/sessions/gpu_session40_token8.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s40d (kvattn, old_kvattn, engine_token_layers_gpu_test;
#          debs/). Call 4 ran 070edb1's build (the first form); the landed form (templated
#          fp8 choice, 4f49bb6) is build-carry-s40e's shape, not yet run.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s40d}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged token_test "$B/engine_token_layers_gpu_test"
random_smollm2
random_qwen3_06b
for round in 1 2; do
  for dtype in fp8 bf16; do
    room 150 "smollm2" && single_bench_kv "smol_${dtype}_new$round" /tmp/smol 128 $dtype
    room 155 "smollm2" && KVATTN_BIN=$B/old_kvattn single_bench_kv "smol_${dtype}_old$round" \
      /tmp/smol 128 $dtype
  done
done
for dtype in fp8 bf16; do
  room 170 "qwen3" && single_bench_kv "q06_${dtype}_new" /tmp/q06 128 $dtype
done
echo "end ${SECONDS}s"
