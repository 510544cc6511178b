#!/usr/bin/env bash
# Run here (not on the GPU machine): downloads the Debian packages the GPU machine lacks into
# the git-ignored .deps/ folder, which `run` carries; scripts/device_env.sh unpacks them there.
# cpp-httplib (and what its pkg-config file requires) for `kvattn serve`, jq for the CLI tests;
# not yet tried on the GPU machine (session 7 added them).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx "/.deps/" .git/info/exclude 2>/dev/null || echo "/.deps/" >> .git/info/exclude
mkdir -p .deps/private
cd .deps/private
apt-get download libxxhash-dev libxxhash0 libdlpack-dev librapidcheck-dev \
  libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libopenblas0 libgfortran5 \
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 \
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1 libssl-dev libssl3 \
  zlib1g-dev jq libjq1 libonig5
