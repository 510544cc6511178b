#!/usr/bin/env bash
# Serves the default model (SmolLM2-135M-Instruct) over the OpenAI API on a fresh machine:
# installs dependencies, fetches the model, builds, and runs `kvattn serve` with the given
# arguments (default: http://127.0.0.1:8000, CPU). Ctrl-C stops it.
#   bash scripts/serve.sh                      # then, in another shell:
#   curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \
#     -d '{"messages": [{"role": "user", "content": "What is the capital of France?"}]}'
#   bash scripts/serve.sh --port 9000 --api-key secret --model path/to/model.gguf
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh >&2
bash scripts/fetch_model.sh >&2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build build -j "$(nproc)" --target kvattn_cli >&2
exec ./build/kvattn serve "$@"
