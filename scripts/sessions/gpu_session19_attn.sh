#!/usr/bin/env bash
# Session 19, call 3 (issue 20): the single stream (random Qwen3-0.6B, graphs, 128 + 256)
# against the small decode kernel's knobs, alternating in one call: how much of the last 4%
# to 1,000 tok/s the short-context attention's chunking holds (min tiles per warp 1/2/4, 4
# warps a CTA, the stream kernel).
#   run: bash scripts/sessions/gpu_session19_attn.sh > $OUT/summary.txt 2>&1; tail -n 30 $OUT/summary.txt
#   carry: build-carry-s19c (bins.tar.xz: kvattn; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
B=/tmp/bin; mkdir -p $B /opt/kvrun && xz -dc build-carry-s19c/bins.tar.xz | tar -C $B -xf -
chmod +x $B/*
for f in build-carry-s19c/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 2>&1 | tail -n 1)
ss() {  # $1: label; the environment is the caller's
  timeout 60 $B/kvattn bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single" | tr '\n' ' ')"
}
for round in 1 2; do
  ss "default_r$round"
  KVATTN_DECODE_SMALL_MIN_TILES=2 ss "mt2_r$round"
  KVATTN_DECODE_SMALL_MIN_TILES=4 ss "mt4_r$round"
  KVATTN_DECODE_SMALL_MIN_TILES=8 ss "mt8_r$round"
  KVATTN_DECODE_SMALL_WARPS=4 ss "w4_r$round"
  KVATTN_DECODE_SMALL_WARPS=4 KVATTN_DECODE_SMALL_MIN_TILES=4 ss "w4mt4_r$round"
  KVATTN_DECODE_SMALL=0 ss "stream_r$round"
done
# A longer context: 1,024-token prompt, 256 new tokens (the chunking's other side).
ssl() {
  timeout 60 $B/kvattn bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 1024 --single-output 256 >"$OUT/ssl_$1.log" 2>&1
  echo "long $1 rc=$?: $(tr '\r' '\n' < "$OUT/ssl_$1.log" | grep -E "single" | tr '\n' ' ')"
}
ssl default; KVATTN_DECODE_SMALL_MIN_TILES=4 ssl mt4; KVATTN_DECODE_SMALL_MIN_TILES=8 ssl mt8
echo "end ${SECONDS}s"
