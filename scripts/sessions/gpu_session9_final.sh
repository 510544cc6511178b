#!/usr/bin/env bash
# Session 9's last GPU call: the decode tiles' tests and timings (scripts/gpu_decode_swap.sh
# without the edge shapes, 40 reps), then the CUDA model-family tests
# (scripts/gpu_model_families.sh) when present. About 8 minutes.
#   run: bash scripts/sessions/gpu_session9_final.sh   (carry .deps)
cd "$(dirname "$0")/../.."
EDGES= REPS=40 bash scripts/gpu_decode_swap.sh
[ -f scripts/gpu_model_families.sh ] && bash scripts/gpu_model_families.sh
exit 0
