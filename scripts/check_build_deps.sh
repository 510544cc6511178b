#!/usr/bin/env bash
# Run before carrying binaries of a local build dir to the GPU machine: fails when an object
# file has no recorded header dependencies (`ninja -t deps` says "#deps 0"), so that ninja
# would not rebuild it when a header it includes changes. Session 19 found
# decode_attention.cu.o in that state, compiled before tuning.h gained a field: the library
# then read CudaTuning at shifted offsets (the single stream ran 540 tok/s instead of ~960
# through sessions 18-19). The fix is to delete the listed objects and build again.
#   usage: bash scripts/check_build_deps.sh [BUILD_DIR]   (default build-gpu)
set -euo pipefail
dir=${1:-build-gpu}
bad=$(ninja -C "$dir" -t deps | awk '/#deps 0,/ {sub(":$", "", $1); print $1}')
if [ -n "$bad" ]; then
  echo "objects in $dir without recorded dependencies (delete them and rebuild):"
  echo "$bad"
  exit 1
fi
echo "$dir: every object has its dependencies recorded"
