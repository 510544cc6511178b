#!/usr/bin/env bash
# Session 50's device call. On an H200: the acceptance figures (decode, engine, prefill; the
# issues' card). On any other card: the session's GPU tests (allowed_token_ids / bans on the
# CUDA engine, dynamic NTK past max_position_embeddings through the engine), built here.
#   run: bash scripts/sessions/gpu_session50.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private, .peers
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec env LIMIT="${LIMIT:-570}" bash scripts/gpu_acceptance.sh
fi
source scripts/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
step "build the session's GPU tests"
kvattn_gpu_build OFF engine_logit_rules_gpu_test engine_model_families_gpu_test
step "logit rules on the CUDA engine"
./build-gpu/tests/engine/engine_logit_rules_gpu_test 2>&1 | tail -n 30
step "model families (dynamic NTK past max_position_embeddings among them)"
./build-gpu/tests/engine/engine_model_families_gpu_test 2>&1 | grep -E "^\[|llama dynamic|Failure|Expected|Which|actual" | tail -n 60
echo "end ${SECONDS}s"
