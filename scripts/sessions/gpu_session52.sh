#!/usr/bin/env bash
# Session 52's device calls. The default model (98 MB) is over a call's 64 MiB carry, so it
# travels in three parts (models/split/p0..p2, made by `split` here) over three calls on one
# warm machine (ignored paths stay there between calls), then runs on the GPU.
#   stage 1: carry .deps/private, .peers, models/split/p0. On an H200: the acceptance
#            (decode, engine, prefill: the issues' card). Elsewhere: builds the CLI and the
#            default model's GPU test (with H200_ONLY=1 set: nothing).
#   stage 2: carry models/split/p1. Builds the default model's GPU test (no-op if built).
#   stage 3: carry models/split/p2. Joins the parts (sha256 checked), runs the default model's
#            GPU test (chat answer, structured output beside free rows) and its single stream.
#   run: bash scripts/sessions/gpu_session52.sh STAGE 2>&1 | tee $OUT/summary.txt
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh
source scripts/device_carried.sh
trap pack_out EXIT
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
SUM=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
ls -l models/split 2>&1 | tail -n 4
case ${1:-1} in
  1)
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      LIMIT=${LIMIT:-560} bash scripts/gpu_acceptance.sh
    elif [ -n "${H200_ONLY:-}" ]; then
      echo "not an H200: nothing to do (H200_ONLY)"
    else
      step "build the CLI and the default model's GPU test"
      kvattn_gpu_build OFF kvattn_cli engine_default_model_gpu_test
    fi ;;
  2)
    step "build the CLI and the default model's GPU test"
    kvattn_gpu_build OFF kvattn_cli engine_default_model_gpu_test ;;
  3)
    cat models/split/p0 models/split/p1 models/split/p2 > "$MODEL"
    echo "$SUM  $MODEL" | sha256sum -c || exit 1
    mkdir -p "$B" && ln -sf "$PWD/build-gpu/kvattn" "$B/kvattn"
    run_logged default_model ./build-gpu/tests/engine/engine_default_model_gpu_test
    grep -E "answer:|SmolLM2 on the GPU|structured on the GPU" "$OUT/default_model.log" | head -n 12
    single_bench smollm2_q4_1 "$MODEL" 128
    single_bench smollm2_q4_1_p4096 "$MODEL" 4096 ;;
esac
echo "end ${SECONDS}s"
