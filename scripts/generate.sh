#!/usr/bin/env bash
# The main job on a fresh machine: installs dependencies, fetches the default model
# (SmolLM2-135M-Instruct), builds kvattn, and runs `kvattn generate` with the given arguments.
#   bash scripts/generate.sh "What is the capital of France?"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh >&2
bash scripts/fetch_model.sh >&2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build build -j "$(nproc)" --target kvattn_cli >&2
exec ./build/kvattn generate "$@"
