#!/usr/bin/env bash
# Session 17, call 3 (issues 20, 15):
#   1. racecheck on bench/micro/mbar_handoff_race.cu's five handoff forms (mode 3 now a 1-CTA
#      cluster launch; mode 4 a __syncthreads control);
#   2. the engine with the decode attention's PDL (now the default) on nano-vllm's workload,
#      KVATTN_DECODE_PDL=0 / 1 alternating (the trigger off, as the new default), then the
#      single stream and the 4096-token TTFT with the defaults;
#   3. the prefill C++ bench, default vs pdecode (plain-store handover), two rounds.
#   run: bash scripts/sessions/gpu_session17_engine.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-xz (kvattn, runtime .debs), build-carry-pf2 (gpu_prefill_bench)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
step() { echo; echo "== $* == ($(date +%T))"; }
step "1. racecheck and the handoff forms"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc bench/micro/mbar_handoff_race.cu \
  -o /tmp/mbar_race 2>&1 | tail -n 3
for m in 0 1 2 3 4; do
  timeout 60 compute-sanitizer --tool racecheck /tmp/mbar_race $m > "$OUT/mbar_race_$m.log" 2>&1
  echo "rc=$? $(grep -E '^mode' "$OUT/mbar_race_$m.log") | $(grep -E 'RACECHECK SUMMARY' "$OUT/mbar_race_$m.log")"
done
mkdir -p /tmp/bin /opt/kvrun
for f in build-carry-xz/kvattn.xz $(ls build-carry-pf2/gpu_prefill_bench.xz 2>/dev/null); do
  xz -dc "$f" > "/tmp/bin/$(basename "$f" .xz)" && chmod +x "/tmp/bin/$(basename "$f" .xz)"
done
for f in build-carry-xz/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVATTN_DECODE_PDL_TRIGGER=0  # the carried CLI predates the trigger's new default (off)
step "2. engine: nano-vllm's workload, decode PDL 0 / 1"
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 1
for round in 1 2; do
  for v in 0 1; do
    KVATTN_DECODE_PDL=$v timeout 150 /tmp/bin/kvattn bench --model /tmp/q06 --device cuda \
      --workload nano-vllm --json "$OUT/nano_${v}_r$round.json" >"$OUT/nano_${v}_r$round.log" 2>&1
    echo "round $round KVATTN_DECODE_PDL=$v rc=$?: $(tr '\r' '\n' < "$OUT/nano_${v}_r$round.log" | grep -E "Throughput|blocks free" | tr '\n' ' ')"
  done
done
timeout 90 /tmp/bin/kvattn bench --model /tmp/q06 --device cuda \
  --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
  --single-input 128 --single-output 256 --ttft-input 4096 >"$OUT/ss_ttft.log" 2>&1
echo "defaults rc=$?: $(tr '\r' '\n' < "$OUT/ss_ttft.log" | grep -E "single|first" | tr '\n' ' ')"
if [ -f build-carry-pf2/gpu_prefill_bench.xz ] && [ "${PREFILL:-1}" = 1 ]; then
step "3. prefill: default vs pdecode (plain-store handover)"
for round in 1 2; do
  timeout 200 /tmp/bin/gpu_prefill_bench --reps 20 >"$OUT/prefill_bench_$round.log" 2>&1
  echo "round $round rc=$?"; grep -v '^{' "$OUT/prefill_bench_$round.log" | grep -E "default|pdecode|ceiling"
done
fi
