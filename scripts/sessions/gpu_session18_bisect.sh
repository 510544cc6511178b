#!/usr/bin/env bash
# Session 18, call 3 (issue 20): single stream with three CLIs in one call, alternating:
# session 17's carried CLI (built at 3a7d310), HEAD 616a185 built here (the session's start),
# and this session's (call 1's binary, KVATTN_FUSED_ROPE=0): which change the 540 tok/s of
# calls 1-2 belongs to.
#   run: bash scripts/sessions/gpu_session18_bisect.sh > $OUT/summary.txt 2>&1; tail -n 30 $OUT/summary.txt
#   carry: build-carry-s18all build-carry-s18b build-carry-s18c
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
B=/tmp/bin; mkdir -p $B /opt/kvrun && xz -dc build-carry-s18all/bins.tar.xz | tar -C $B -xf - ./kvattn
xz -dc build-carry-s18b/kvattn_s17.xz > $B/kvattn_s17 && xz -dc build-carry-s18c/kvattn_head.xz > $B/kvattn_head
chmod +x $B/kvattn_*
for f in build-carry-s18all/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 2>&1 | tail -n 1)
ss() {  # $1: label, $2: binary
  timeout 60 $B/$2 bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single" | tr '\n' ' ')"
}
for round in 1 2; do
  ss "s17_r$round" kvattn_s17
  ss "head_r$round" kvattn_head
  KVATTN_FUSED_ROPE=0 ss "new_r$round" kvattn
done
KVATTN_DECODE_PDL=0 ss "head_nodecodepdl" kvattn_head
KVATTN_PDL=0 ss "head_nopdl" kvattn_head
echo "end ${SECONDS}s"
