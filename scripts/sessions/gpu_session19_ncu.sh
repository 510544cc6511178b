#!/usr/bin/env bash
# Session 19, call 1 (issue 20): where session 17's CLI (built at 3a7d310) and HEAD 616a185's
# differ per decode step. Both time the single stream, then ncu lists every kernel of a tiny
# bench (name, grid, block, duration) for each, to be diffed step by step.
#   run: bash scripts/sessions/gpu_session19_ncu.sh > $OUT/summary.txt 2>&1; tail -n 30 $OUT/summary.txt
#   carry: build-carry-s19a
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
B=/tmp/bin; mkdir -p $B /opt/kvrun && xz -dc build-carry-s19a/bins.tar.xz | tar -C $B -xf -
chmod +x $B/kvattn_*
for f in build-carry-s19a/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 2>&1 | tail -n 1)
ss() {  # $1: label, $2: binary
  timeout 60 $B/$2 bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single|decode steps" | tr '\n' ' ')"
}
ss s17 kvattn_s17; ss head kvattn_head; ss s17b kvattn_s17; ss headb kvattn_head
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
echo "ncu: $NCU"
for b in s17 head; do
  timeout 200 $NCU --clock-control none --cache-control none --csv --print-units base \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size \
    $B/kvattn_$b bench --model /tmp/q06 --device cuda \
    --num-seqs 1 --min-input 16 --max-input 16 --min-output 2 --max-output 2 \
    --single-input 16 --single-output 6 > "$OUT/ncu_$b.csv" 2>"$OUT/ncu_$b.err"
  echo "ncu $b rc=$? lines $(wc -l < "$OUT/ncu_$b.csv")"; tail -n 3 "$OUT/ncu_$b.err"
done
echo "end ${SECONDS}s"
