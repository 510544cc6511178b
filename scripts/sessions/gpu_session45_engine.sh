#!/usr/bin/env bash
# Session 45, call 2: the current code's same-run figures on whatever card comes (the targets
# of issues 15, 16 and 20 are H200 figures; the last H200 call was session 39's). First issue
# 20's engine figures with the carried CLI (HEAD's build: nano-vllm's workload with the
# Qwen3-0.6B shape, random weights, bf16 and fp8, each with its single stream and TTFT;
# SmolLM2-135M's single stream), the single stream under session 44's L2 rule against the old
# policy forced (KVATTN_DECODE_KV_EVICT_FIRST=1), then prefill and (unless DECODE=0) decode
# against the peers, one process each (the Python package built here, FlashInfer from .peers).
#   run: LIMIT=580 bash scripts/sessions/gpu_session45_engine.sh [CARRY] 2>&1 | tee $OUT/summary.txt
#   carry: CARRY (default build-carry-s45b: bins.tar.xz with kvattn), .deps/private, .peers
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages (build and run), OUT, step, the peers' runner
source scripts/device_carried.sh  # B, engine_bench, single_bench, pack_out
carried_bins "${1:-build-carry-s45b}" "$B"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
trap pack_out EXIT
LIMIT=${LIMIT:-580}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
ldd "$B/kvattn" | grep "not found"
random_qwen3_06b
random_smollm2
room 120 "qwen3 bf16" && engine_bench q06_bf16 /tmp/q06
room 200 "qwen3 fp8" && engine_bench q06_fp8 /tmp/q06 --kv-cache-dtype fp8
room 240 "smollm2 single" && single_bench smol /tmp/smol 128
for round in 1 2; do
  room 280 "L2 rule single streams" || break
  single_bench "q06_rule_r$round" /tmp/q06 128
  single_bench "q06_evictfirst_r$round" /tmp/q06 128 KVATTN_DECODE_KV_EVICT_FIRST=1
done
room $((LIMIT - 120)) "prefill peers" && PREFILL_PEERS_HEAD_DIMS=128,64 PREFILL_PEERS_BACKENDS=fa3 \
  PEERS_TIMEOUT=$((LIMIT - 100 - SECONDS)) kvattn_run_peers bench/prefill_peers_same_run.py prefill_peers.log 10
[ "${DECODE:-1}" = 1 ] && room $((LIMIT - 90)) "decode peers" && DECODE_PEERS_HEAD_DIMS=128,64 \
  PEERS_TIMEOUT=$((LIMIT - 15 - SECONDS)) kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
echo "end ${SECONDS}s"
