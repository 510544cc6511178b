#!/usr/bin/env bash
# Run here (not on the GPU machine): downloads the Debian packages the GPU machine lacks into
# the git-ignored .deps/ folder, which `run` carries; scripts/device_env.sh unpacks them there;
# and the peers' wheels into .peers/ (carry it too for the same-run peer harnesses).
# utf8proc (the tokenizers' Unicode normalizers), cpp-httplib (and what its pkg-config file requires) for `kvattn serve` (it builds there), jq
# for the CLI tests; then the Python wheels of scripts/serve_load.py (.deps/wheels, below).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx "/.deps/" .git/info/exclude 2>/dev/null || echo "/.deps/" >> .git/info/exclude
mkdir -p .deps/private
cd .deps/private
apt-get download libxxhash-dev libxxhash0 libdlpack-dev librapidcheck-dev \
  libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libopenblas0 libgfortran5 \
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  libutf8proc-dev libutf8proc2 \
  nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 \
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1 libssl-dev libssl3 \
  zlib1g-dev jq libjq1 libonig5
# The `openai` client and its dependencies for scripts/serve_load.py (scripts/gpu_serve.sh
# installs them with pip --no-index): wheels only, for the image's Python (3.12) and its
# neighbours, 11 MB. matplotlib (+15 MB without NumPy and Pillow, which it also needs) only
# with KVATTN_DEPS_PLOT=1; without it the plot is drawn here from the JSON (--plot-from).
cd ..
mkdir -p wheels
for py in 3.11 3.12 3.13; do
  python3 -m pip download -q --only-binary=:all: --python-version "$py" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d wheels openai
  if [ "${KVATTN_DEPS_PLOT:-0}" = 1 ]; then
    python3 -m pip download -q --only-binary=:all: --python-version "$py" --implementation cp \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 --no-deps -d wheels matplotlib contourpy cycler \
      fonttools kiwisolver pyparsing python-dateutil six packaging
  fi
done
du -sh .
# The peers for the same-run harnesses (bench/*_peers_same_run.py; kvattn_run_peers in
# device_env.sh installs .peers/whl/*.whl there): FlashInfer 0.5.3 and its TVM FFI, ~10 MB
# (../shared/TARGETS.md), and ../shared/tools/peers_h200.py when the shared folder is here.
cd ..
grep -qx "/.peers/" .git/info/exclude 2>/dev/null || echo "/.peers/" >> .git/info/exclude
mkdir -p .peers/whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
  -d .peers/whl flashinfer-python==0.5.3 apache-tvm-ffi==0.1.15.post2
[ -f ../shared/tools/peers_h200.py ] && cp ../shared/tools/peers_h200.py .peers/
du -sh .peers
