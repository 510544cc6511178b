#!/usr/bin/env bash
# Why kvattn's Hopper prefill trails FA3 at head_dim 128 (issue 15) when it no longer issues
# more instructions (session 14): Nsight Compute's warp stall reasons (per issued
# instruction, all warps) and pipe utilisation for both kernels of one shape, side by side
# (bench/prefill_profile_pair.py; no PC sampling here, so these are the counters).
#   run: bash scripts/gpu_prefill_stalls.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
#   env: SHAPE="B,L,Hq,Hkv,D" (default 8,2048,32,8,128)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
export SHAPE=${SHAPE:-8,2048,32,8,128}
kvattn_install_python_and_peers || exit 1
step "warm FlashInfer's JIT (outside ncu)"
(unset CPATH LIBRARY_PATH; cd /tmp && MAX_JOBS=$(nproc) FLASHINFER_CUDA_ARCH_LIST=9.0a CALLS=1 \
   timeout 300 python3 "$OLDPWD/bench/prefill_profile_pair.py")
step "ncu, shape $SHAPE"
metrics='regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$'
metrics+=',regex:^sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$'
metrics+=',regex:^sm__inst_executed_pipe_.*\.sum$'
metrics+=',gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_active.avg'
metrics+=',smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active'
metrics+=',sm__cycles_elapsed.avg.per_second,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum'
(unset CPATH LIBRARY_PATH; cd /tmp && CALLS=2 timeout 400 ncu --clock-control none \
   --kernel-name regex:'prefill|Prefill|fmha|flash|Flash' --launch-skip 0 --launch-count 4 \
   --metrics "$metrics" --csv --page raw \
   python3 "$OLDPWD/bench/prefill_profile_pair.py" > "$OUT/prefill_stalls.csv" 2> "$OUT/prefill_stalls.err")
echo "ncu rc=$? ($(wc -l < "$OUT/prefill_stalls.csv") lines)"
python3 - "$OUT/prefill_stalls.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if len(rows) < 3:
    sys.exit("no ncu rows")
hdr, units, data = rows[0], rows[1], rows[2:]
ki = hdr.index("Kernel Name")
# the last call of each kernel (kvattn's, then FA3's)
last = {}
for r in data:
    last[r[ki][:40]] = r
names = list(last)
print(f"{'metric':72s} " + " | ".join(f"{n[:24]:24s}" for n in names))
for j, m in enumerate(hdr):
    if not (m.startswith("smsp__") or m.startswith("sm__") or m.startswith("gpu__")):
        continue
    vals = [last[n][j] for n in names]
    try:
        if all(float(v.replace(",", "")) == 0.0 for v in vals):
            continue
    except ValueError:
        pass
    print(f"{m[:72]:72s} " + " | ".join(f"{v[:24]:24s}" for v in vals))
PY
