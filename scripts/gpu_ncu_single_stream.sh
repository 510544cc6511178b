#!/usr/bin/env bash
# Where a single-stream decode token's time goes (issue 20), with Nsight Compute (the device
# image has ncu, not nsys; on Firecracker it reads counters with --clock-control none): every
# kernel of ~3 decode tokens of a random Qwen3-0.6B (eager launches: the same kernels a graph
# replays), with its duration. Prints per kernel name: launches per token, us per token; then
# the sum per token against the graph-replay token time `kvattn bench` reports (the rest is
# the gaps between kernels). Needs build-gpu/kvattn (SKIP_BUILD=1 reuses it) and /tmp/q06
# (made here if missing).
#   run: bash scripts/gpu_ncu_single_stream.sh > $OUT/summary.txt 2>&1   (carry .deps)
#   env: KVATTN_BIN (a carried kvattn; no build), MODEL (default /tmp/q06), TAG (output names)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
BIN=${KVATTN_BIN:-./build-gpu/kvattn}
MODEL=${MODEL:-/tmp/q06}
TAG=${TAG:-single}
if [ -z "${KVATTN_BIN:-}" ] && { [ "${SKIP_BUILD:-0}" != 1 ] || [ ! -x build-gpu/kvattn ]; }; then
  step build
  kvattn_gpu_build OFF kvattn_cli
fi
[ "$MODEL" != /tmp/q06 ] || [ -f /tmp/q06/model.safetensors ] ||
  python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 > /tmp/q06.log 2>&1
step "graph-replay single stream (the time to explain)"
"$BIN" bench --model "$MODEL" --device cuda --no-compare --num-seqs 1 \
  --prefix-len 0 --min-input 128 --max-input 128 --min-output 64 --max-output 64 2>&1 |
  tr '\r' '\n' | grep -E "single stream|Throughput"
# Skip the load and warm-up launches (SKIP) and profile a window (COUNT) of the decode loop.
step "ncu: kernel durations in the decode loop (eager)"
timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
  --launch-skip "${SKIP:-3000}" --launch-count "${COUNT:-900}" \
  "$BIN" bench --model "$MODEL" --device cuda --eager --no-compare --num-seqs 1 \
  --prefix-len 0 --min-input 128 --max-input 128 --min-output 256 --max-output 256 \
  > "$OUT/ncu_$TAG.csv" 2> "$OUT/ncu_$TAG.err"
echo "ncu rc=$? ($(wc -l < "$OUT/ncu_$TAG.csv") lines)"
python3 - "$OUT/ncu_$TAG.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no ncu rows")
hdr = rows[0]
ki, vi, ui = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
per = collections.defaultdict(lambda: [0, 0.0])
for r in rows[1:]:
    if r[vi] in ("", "Metric Value"):
        continue
    v = float(r[vi].replace(",", ""))
    # ncu's units: "ns" / "us" / "ms" (older versions: "nsecond" / "usecond" / "msecond").
    unit = r[ui]
    v = v / 1e3 if unit in ("ns", "nsecond") else v * 1e3 if unit in ("ms", "msecond") else v
    # The kernel's name without its parameter list: cut at the "(" that opens it (the last
    # top-level one), keeping template arguments ("gemv_kernel<1, 2, 2>").
    full, depth, cut = r[ki], 0, len(r[ki])
    for i, ch in enumerate(full):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
    name = full[:cut].replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    name = name.replace("void ", "")[-60:]
    per[name][0] += 1
    per[name][1] += v
# Per token: divide by the launches of a once-a-token kernel (the final norm / lm_head GEMM),
# read off the table.
total = sum(t for _, t in per.values())
n = sum(c for c, _ in per.values())
print(f"{n} launches, {total:.1f} us of kernel time in the window")
for name, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
    print(f"{name:62s} {c:6d} launches {t:10.1f} us  {t / c:7.2f} us each")
PY
