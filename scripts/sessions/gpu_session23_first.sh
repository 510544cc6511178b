#!/usr/bin/env bash
# Session 23, call 1 (written in session 22, after its device time): the window / softcap /
# ALiBi kernels' tile handover (CudaTuning::prefill_sm90_mods_handover, off): its test and the
# whole prefill suite, racecheck and memcheck on the handover tests, then the feature shapes'
# bench rows (default = no handover, mods_handover = where key loops are short, mods_handover1
# = always), two rounds. Make mode 2 the default if it wins on the windowed / softcapped
# short-row shapes and loses nowhere.
# Build first (a fresh checkout has no build dirs): cmake -S . -B build-gpu -G Ninja
#   -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a -DKVATTN_BENCH=ON; cmake --build build-gpu
#   --target kernels_prefill_gpu_test gpu_prefill_bench; bash scripts/check_build_deps.sh
#   build-gpu; pack both stripped into build-carry-s23a/bins.tar.xz with debs/ (libxxhash0
#   libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0 libgomp1 libpcre2-8-0
#   libutf8proc2 libcpp-httplib0.11 libbrotli1 libssl3: scripts/device_deps.sh fetches most
#   into .deps/private; apt-get download the rest).
#   run: bash scripts/sessions/gpu_session23_first.sh > $OUT/summary.txt 2>&1; tail -n 50 $OUT/summary.txt
#   carry: build-carry-s23a
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s23a
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged prefill_suite_full "$T"
both_sanitizers handover "$T" \
  'PrefillGpuFeatures.TileHandover:PrefillGpu.TileHandoverOnAndOff'
for round in 1 2; do
  room 450 "features bench round $round" || break
  timeout 150 "$B/gpu_prefill_bench" --features --reps 10 >"$OUT/features_r$round.log" 2>&1
  echo "features bench r$round rc=$?"
  grep -v '^{' "$OUT/features_r$round.log" | grep -E "ceiling| default | mods_handover" | head -n 40
done
# Issue 15's d128 gap: Nsight Compute's stall reasons and pipe use for the default kernel on
# 1x16384 and 8x2048 32/8 d128 (one launch each, the bench's --only filter, reps 1).
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
echo "ncu: $NCU"
metrics='regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$'
metrics+=',regex:^sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$'
metrics+=',regex:^sm__inst_executed_pipe_.*\.sum$'
metrics+=',gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_active.avg'
metrics+=',smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active'
metrics+=',dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct'
for shape in 1x16384 "8x2048 32/8"; do
  room 540 "ncu $shape" || break
  tag=$(echo "$shape" | tr ' /' '__')
  timeout 120 "$NCU" --clock-control none --kernel-name regex:prefill_sm90 --launch-skip 3 \
    --launch-count 1 --metrics "$metrics" --csv --page raw \
    "$B/gpu_prefill_bench" --reps 1 --only "$shape" >"$OUT/ncu_$tag.csv" 2>"$OUT/ncu_$tag.err"
  echo "ncu $shape rc=$? lines $(wc -l < "$OUT/ncu_$tag.csv")"
  python3 - "$OUT/ncu_$tag.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if len(rows) < 3:
    sys.exit("no ncu rows")
hdr, data = rows[0], rows[2:]
r = data[-1]
ki = hdr.index("Kernel Name")
print("kernel", r[ki][:120])
for j, m in enumerate(hdr):
    if not (m.startswith(("smsp__", "sm__", "gpu__", "dram__", "lts__"))):
        continue
    try:
        if float(r[j].replace(",", "")) == 0.0:
            continue
    except ValueError:
        pass
    print(f"  {m[:80]:80s} {r[j]}")
PY
done
echo "end ${SECONDS}s"
