#!/usr/bin/env bash
# Session 19, call 6 (issue 20): the single stream with the pre-wait norm weights (call 5's
# binary) and the small decode kernel at 8 (default) or 4 warps a CTA, alternating.
#   run: bash scripts/sessions/gpu_session19_w4.sh > $OUT/summary.txt 2>&1; tail -n 10 $OUT/summary.txt
#   carry: build-carry-s19d
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
B=/tmp/bin; mkdir -p $B /opt/kvrun && xz -dc build-carry-s19d/bins.tar.xz | tar -C $B -xf - ./kvattn
chmod +x $B/*
for f in build-carry-s19d/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 2>&1 | tail -n 1)
ss() {  # $1: label; the environment is the caller's
  timeout 60 $B/kvattn bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single" | tr '\n' ' ')"
}
for round in 1 2 3; do ss "w8_r$round"; KVATTN_DECODE_SMALL_WARPS=4 ss "w4_r$round"; done
echo "end ${SECONDS}s"
