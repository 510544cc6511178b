#!/usr/bin/env bash
# Where kvattn's Hopper prefill loses to FlashInfer's FA3 (issue 15: 0.84-0.89 of it at d128
# and d256): Nsight Compute on both kernels of one shape (bench/prefill_profile_pair.py), the
# sections that need no PC sampling (unavailable here): speed of light, compute workload (the
# tensor pipe), scheduler and warp-state statistics (stall reasons), occupancy, launch
# statistics. Prints a side-by-side table of the key metrics; the full reports stay in $OUT.
#   run: bash scripts/gpu_prefill_profile.sh   (carry .deps .peers)   env: SHAPE="B,L,Hq,Hkv,D"
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
export SHAPE=${SHAPE:-8,2048,32,8,128}
kvattn_install_python_and_peers || exit 1
step "warm FlashInfer's JIT (outside ncu)"
(unset CPATH LIBRARY_PATH; cd /tmp && MAX_JOBS=$(nproc) FLASHINFER_CUDA_ARCH_LIST=9.0a CALLS=1 \
   timeout 300 python3 "$OLDPWD/bench/prefill_profile_pair.py")
step "ncu, shape $SHAPE"
(unset CPATH LIBRARY_PATH; cd /tmp && CALLS=2 timeout 400 ncu --clock-control none \
   --kernel-name regex:'prefill|Prefill|fmha|flash|Flash' --launch-skip 0 --launch-count 4 \
   --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats \
   --section WarpStateStats --section Occupancy --section LaunchStats --csv \
   python3 "$OLDPWD/bench/prefill_profile_pair.py" > "$OUT/prefill_ncu.csv" 2> "$OUT/prefill_ncu.err")
echo "ncu rc=$? ($(wc -l < "$OUT/prefill_ncu.csv") lines)"
python3 - "$OUT/prefill_ncu.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no ncu rows")
hdr = rows[0]
ki, ii = hdr.index("Kernel Name"), hdr.index("ID")
mi, vi, ui = hdr.index("Metric Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
per = collections.OrderedDict()  # (id, kernel) -> {metric: "value unit"}
for r in rows[1:]:
    key = (r[ii], r[ki][:50])
    per.setdefault(key, {})[r[mi]] = f"{r[vi]} {r[ui]}".strip()
want = ["Duration", "Compute (SM) Throughput", "Memory Throughput", "Registers Per Thread",
        "Achieved Occupancy", "Issue Slots Busy", "Issued Warp Per Scheduler",
        "No Eligible", "Warp Cycles Per Issued Instruction", "SM Busy",
        "Executed Ipc Active", "Dynamic Shared Memory Per Block", "Grid Size", "Block Size"]
keys = list(per)
print(f"{'metric':40s} " + " | ".join(f"{k[1][:28]:28s}" for k in keys))
for m in want:
    print(f"{m:40s} " + " | ".join(f"{per[k].get(m, '-')[:28]:28s}" for k in keys))
PY
