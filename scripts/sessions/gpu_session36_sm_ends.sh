#!/usr/bin/env bash
# Session 36, call 3: the split kernel's CTA end times by SM (64x4096 32/8 d128, one CTA of 8
# KV heads an SM, then two CTAs of 4): are the SMs that finish late the same in every run?
#   run: bash scripts/sessions/gpu_session36_sm_ends.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s36c (gpu_decode_probe; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s36c
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 "$B/gpu_decode_probe" --only split --sm-ends --reps 20 2>&1 | grep -v '^{'
echo "end ${SECONDS}s"
