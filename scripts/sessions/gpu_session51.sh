#!/usr/bin/env bash
# Session 51's device call. On an H200: the acceptance figures (decode, engine, prefill; the
# issues' card). On any other card: the same-run prefill peers on the current code (the last
# prefill table is session 48's, on an H100).
#   run: bash scripts/sessions/gpu_session51.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private, .peers
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec env LIMIT="${LIMIT:-570}" bash scripts/gpu_acceptance.sh
fi
exec env LIMIT="${LIMIT_OTHER:-420}" PARTS=prefill bash scripts/gpu_acceptance.sh
