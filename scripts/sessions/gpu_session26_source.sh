#!/usr/bin/env bash
# Session 26, call 3: Nsight Compute's per-instruction view (SourceCounters: warp-state
# sampling per SASS line, instructions executed per line) of kvattn's Hopper prefill and FA3
# (FlashInfer 0.5.3) on 1x16384 32/8 d128, where FA3 does ~10% more work a cycle (session 25):
# which instructions of kvattn's key loop the warps wait on, against FA3's, side by side.
# The source pages go to $OUT as CSV (xz) for reading on the build machine.
#   run: bash scripts/sessions/gpu_session26_source.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # OUT, step, kvattn_install_python_and_peers
export SHAPE=${SHAPE:-1,16384,32,8,128}
kvattn_install_python_and_peers || exit 1
step "warm FlashInfer's JIT (outside ncu)"
(unset CPATH LIBRARY_PATH; cd /tmp && MAX_JOBS=$(nproc) FLASHINFER_CUDA_ARCH_LIST=9.0a CALLS=1 \
   timeout 300 python3 "$OLDPWD/bench/prefill_profile_pair.py")
step "ncu source counters, shape $SHAPE"
(unset CPATH LIBRARY_PATH; cd /tmp && CALLS=1 timeout 300 ncu --clock-control none \
   --kernel-name regex:'prefill|Prefill|fmha|flash|Flash' --launch-count 2 \
   --section SourceCounters --section WarpStateStats --section SpeedOfLight \
   -o /tmp/src_rep -f python3 "$OLDPWD/bench/prefill_profile_pair.py" > "$OUT/ncu_collect.log" 2>&1)
echo "ncu collect rc=$?"; tail -n 5 "$OUT/ncu_collect.log"
ncu --import /tmp/src_rep.ncu-rep --page source --csv --print-source sass > /tmp/source.csv 2> "$OUT/source_err.log"
echo "source page rc=$? ($(wc -l < /tmp/source.csv) lines, $(stat -c %s /tmp/source.csv) bytes)"
head -c 600 /tmp/source.csv; echo
xz -T0 -c /tmp/source.csv > "$OUT/source.csv.xz"
ncu --import /tmp/src_rep.ncu-rep --page details --csv > "$OUT/details.csv" 2>>"$OUT/source_err.log"
echo "details rc=$? ($(wc -l < "$OUT/details.csv") lines)"
grep -E "Kernel Name|Duration|Warp Cycles Per Issued|Issued Warp|No Eligible" "$OUT/details.csv" | head -20
xz -T0 -c /tmp/src_rep.ncu-rep > "$OUT/src_rep.ncu-rep.xz"; ls -la "$OUT"
