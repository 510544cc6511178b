#!/usr/bin/env bash
# Fetches NVIDIA's SASS tools (cuobjdump, nvdisasm) from PyPI into .tools/ (git-ignored), so
# that kernels compiled here can be read as SASS without the GPU machine, e.g.
#   .tools/bin/cuobjdump -sass build-gpu/CMakeFiles/kvattn.dir/src/kernels/cuda/hopper/prefill_sm90_inst_hd128_bf16.cu.o
#   .tools/bin/cuobjdump -res-usage <object>     (registers and stack per kernel)
# The local CUDA toolkit has nvcc and ptxas only. A development aid: the build does not need it.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.tools
if [ -x "$dest/bin/cuobjdump" ] && [ -x "$dest/bin/nvdisasm" ]; then
  echo "sass_tools: $dest/bin has cuobjdump and nvdisasm"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps -d "$tmp" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
mkdir -p "$dest/bin"
for whl in "$tmp"/*.whl; do
  python3 -m zipfile -e "$whl" "$tmp/x"
done
find "$tmp/x" -type f \( -name cuobjdump -o -name nvdisasm \) -path "*/bin/*" \
  -exec cp {} "$dest/bin/" \;
chmod +x "$dest/bin/"*
"$dest/bin/cuobjdump" --version | tail -n 1
