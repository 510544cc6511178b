#!/usr/bin/env bash
# (The kSoftmaxIlp flag it measured lost and was removed after it.)
# Session 23, call 2: the Hopper prefill consumers' softmax with its row max and sum in four
# independent chains (Tile::kSoftmaxIlp, now the default) and the kMods handover's default
# mode 3 (mode 2 at head_dim 128): the whole prefill suite, racecheck and memcheck on the
# handover tests, the default shapes' bench (rows default / serial_sm), two rounds, then
# ncu's per-SASS-line stall samples of the 1x16384 d128 kernel.
#   run: bash scripts/sessions/gpu_session23_second.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-s23b (kernels_prefill_gpu_test, gpu_prefill_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s23b
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged prefill_suite_full "$T"
both_sanitizers handover "$T" \
  'PrefillGpuFeatures.TileHandover:PrefillGpu.TileHandoverOnAndOff'
for round in 1 2; do
  room 330 "bench round $round" || break
  timeout 120 "$B/gpu_prefill_bench" --reps 10 >"$OUT/bench_r$round.log" 2>&1
  echo "bench r$round rc=$?"
  grep -v '^{' "$OUT/bench_r$round.log" | grep -E "ceiling| default | serial_sm | nohandover " | head -n 40
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
if room 420 "ncu source"; then
  timeout 150 "$NCU" --clock-control none --kernel-name regex:prefill_sm90 --launch-skip 3 \
    --launch-count 1 --section SourceCounters --section WarpStateStats --import-source no \
    -o "$OUT/rep16k" "$B/gpu_prefill_bench" --reps 1 --only 1x16384 >"$OUT/ncu_rep.log" 2>&1
  echo "ncu rep rc=$?"; tail -n 3 "$OUT/ncu_rep.log"
  timeout 60 "$NCU" -i "$OUT/rep16k.ncu-rep" --page source --csv --print-source sass \
    >"$OUT/sass16k.csv" 2>"$OUT/sass16k.err"
  echo "ncu source rc=$? lines $(wc -l < "$OUT/sass16k.csv")"; head -c 600 "$OUT/sass16k.err"
  python3 - "$OUT/sass16k.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr_i = next((i for i, r in enumerate(rows) if any("Source" == c or "Address" == c for c in r)), None)
if hdr_i is None:
    sys.exit("no header")
hdr = rows[hdr_i]
print("columns:", " | ".join(hdr)[:900])
col = next((j for j, c in enumerate(hdr) if "Warp Stall Sampling (All" in c), None)
src = next((j for j, c in enumerate(hdr) if c == "Source"), None)
if col is None or src is None:
    sys.exit("no sampling column")
data = []
for r in rows[hdr_i + 1:]:
    try:
        data.append((float(r[col].replace(",", "")), r))
    except (ValueError, IndexError):
        pass
tot = sum(v for v, _ in data) or 1.0
print(f"sampled lines {len(data)}, samples {tot:.0f}")
for v, r in sorted(data, key=lambda x: -x[0])[:45]:
    print(f"{100*v/tot:5.2f}% {r[0][:8]:8s} {r[src][:90]}")
PY
fi
echo "end ${SECONDS}s"
