#!/usr/bin/env bash
# The figures the open performance issues accept on, in one call of at most LIMIT seconds
# (default 570), on the card that comes (their targets are the H200's: run this first when one
# does). Parts, in the order PARTS names them (default "decode engine prefill"), each only
# while the call has room left for it:
#   decode   issue 16: the same-run decode peers (cuDNN, FlashInfer; kvattn bf16, fp8 and
#            lengths-as-int rows; graph replay and flushed), head_dim 128 and 64. Builds the
#            Python package here (~65 s on 16 cores) and needs .peers.
#   engine   issue 20: `kvattn bench` on random Qwen3-0.6B (nano-vllm's workload bf16 and fp8,
#            the single stream, TTFT 4,096) and SmolLM2-135M's single stream (random weights,
#            and the default model's GGUF where models/ holds it), graphs. Builds the CLI
#            here (~90 s).
#   prefill  issue 15: the same-run prefill peers (FlashInfer's FA3 backend, cuDNN; ROUNDS
#            rounds, default 2), head_dim 128 and 64. Reuses the decode part's package.
#   run: LIMIT=570 bash scripts/gpu_acceptance.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private, .peers   (scripts/device_deps.sh makes both)
set -uo pipefail
cd "$(dirname "$0")/.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, kvattn_gpu_build, the peers
source scripts/device_carried.sh  # B, engine_bench, single_bench, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-570}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader

decode_part() {
  room $((LIMIT - 260)) "decode peers" || return
  DECODE_PEERS_HEAD_DIMS=128,64 PEERS_TIMEOUT=$((LIMIT - 60 - SECONDS > 200 ? 200 : LIMIT - 60 - SECONDS)) \
    kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 16
}

engine_part() {
  room $((LIMIT - 230)) "engine" || return
  step "engine: build the CLI"
  kvattn_gpu_build OFF kvattn_cli
  mkdir -p "$B" && ln -sf "$PWD/build-gpu/kvattn" "$B/kvattn"
  [ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
  step "engine"
  random_qwen3_06b
  random_smollm2
  room $((LIMIT - 110)) "qwen3 bf16" && engine_bench q06_bf16 /tmp/q06
  room $((LIMIT - 70)) "qwen3 fp8" && engine_bench q06_fp8 /tmp/q06 --kv-cache-dtype fp8
  room $((LIMIT - 20)) "smollm2 single" && single_bench smol /tmp/smol 128
  # The default model's own file, where a call carried it (98 MB: in parts, as
  # scripts/sessions/gpu_session52.sh does), is what issue 20 names.
  local gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ -f "$gguf" ]; then
    room $((LIMIT - 15)) "smollm2 gguf single" && single_bench smol_gguf "$gguf" 128
  fi
}

prefill_part() {
  room $((LIMIT - 130)) "prefill peers" || return
  PREFILL_PEERS_HEAD_DIMS=128,64 PREFILL_PEERS_BACKENDS=fa3 PREFILL_PEERS_ROUNDS=${ROUNDS:-2} \
    PEERS_TIMEOUT=$((LIMIT - 20 - SECONDS)) kvattn_run_peers bench/prefill_peers_same_run.py \
    prefill_peers.log 12
}

for part in ${PARTS:-decode engine prefill}; do
  case $part in
    decode) decode_part ;;
    engine) engine_part ;;
    prefill) prefill_part ;;
    *) echo "unknown part: $part (decode, engine, prefill)" ;;
  esac
done
echo "end ${SECONDS}s"
