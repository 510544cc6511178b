#!/usr/bin/env bash
# Installs everything kvattn needs to build and test on a fresh Debian 12 machine: apt packages,
# and from PyPI the official `openai` client (the server's tests and load benchmark use it).
# Running it twice is harmless: installed packages are skipped.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang
  libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev
  libxxhash-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libopenblas-dev libpcre2-dev libutf8proc-dev libdlpack-dev libcpp-httplib-dev
  python3-dev python3-numpy python3-pytest python3-pip
  jq
)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
    "${sudo_cmd[@]}" apt-get update
    "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
  fi
else
  echo "setup: all packages present"
fi

# The openai client for `python3` of PATH (the interpreter the server tests run). Debian marks
# its Python as externally managed; the client is a pure-Python wheel, so installing it there
# is allowed explicitly.
if python3 -c "import openai" >/dev/null 2>&1; then
  echo "setup: python openai client present"
else
  echo "setup: installing the openai client from PyPI"
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check "openai>=1.0"
fi
