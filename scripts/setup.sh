#!/usr/bin/env bash
# Installs everything kvattn needs to build and test on a fresh Debian 12 machine, from apt only.
# Running it twice is harmless: installed packages are skipped.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang
  libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev
  libxxhash-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libopenblas-dev libpcre2-dev libdlpack-dev
  python3-dev python3-numpy python3-pytest
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
