#!/usr/bin/env bash
# Session 43's prepared call (no machine came for it; the next session's first): first the
# 1x8192 32/8 d128 row of the peers harness with the small kernel's evict-first K/V copies on
# (the default) and off (KVATTN_DECODE_KV_EVICT_FIRST=0), ROUNDS rounds alternating, each
# process with cuDNN and FlashInfer: graph replay keeps a lone sequence's 33.5 MB in L2, which
# evict-first lines may not be. Then Nsight Compute of kvattn's, cuDNN's and FlashInfer's
# decode kernels on the same shapes (bench/decode_ncu_peers.py: 1x8192 32/8 d128, 64x4096
# 32/8 d128, 96x4096 9/3 d64, page 16), warm launches with the caches kept (--cache-control
# none, as in graph replay): grid, block, registers, shared memory, duration, DRAM / L2
# throughput, occupancy and stalls a kernel (scripts/ncu_kernel_table.py); then kvattn's
# 1x8192 without evict-first.
#   run: bash scripts/sessions/gpu_session43_ncu_peers.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private, .peers (the package is built here). ROUNDS (default 2) A/B rounds;
#   NCU=0 skips the profiles.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh
source scripts/device_carried.sh  # room, pack_out
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
kvattn_install_python_and_peers || exit 1
KVATTN_PEERS_READY=1
for round in $(seq 1 "${ROUNDS:-2}"); do
  for ef in 1 0; do
    room 220 "1x8192 evict-first $ef" || break
    KVATTN_DECODE_KV_EVICT_FIRST=$ef DECODE_PEERS_CASES=1x8192 DECODE_PEERS_HEAD_DIMS=128 \
      PEERS_TIMEOUT=120 kvattn_run_peers bench/decode_peers_same_run.py \
      "decode_1x8192_ef${ef}_r${round}.log" 1
  done
done
if [ "${NCU:-1}" = 1 ] && room 250 "ncu of the three backends"; then
step "ncu: decode kernels of the three backends"
(unset CPATH LIBRARY_PATH
 cd /tmp && PYTHONUNBUFFERED=1 MAX_JOBS=$(nproc) FLASHINFER_CUDA_ARCH_LIST=9.0a \
   timeout "$((390 - SECONDS))" ncu --profile-from-start off --cache-control none \
   --clock-control none --nvtx --section LaunchStats --section Occupancy --section SpeedOfLight \
   --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
   -o /tmp/ncu_dec -f python3 "$OLDPWD/bench/decode_ncu_peers.py" > "$OUT/ncu_run.log" 2>&1
 echo "ncu rc=$?"; grep -vE "^==PROF==|Warning" "$OUT/ncu_run.log" | tail -n 12)
ncu --import /tmp/ncu_dec.ncu-rep --page raw --csv > "$OUT/ncu_raw.csv" 2>/dev/null
ncu --import /tmp/ncu_dec.ncu-rep --page details --csv --print-nvtx-rename kernel \
  > "$OUT/ncu_details.csv" 2>/dev/null
python3 scripts/ncu_kernel_table.py "$OUT/ncu_raw.csv"
fi
[ "${NCU:-1}" = 1 ] && room 330 "ncu kvattn without evict-first" && (unset CPATH LIBRARY_PATH
 cd /tmp && KVATTN_DECODE_KV_EVICT_FIRST=0 DECODE_NCU_CASES=1x8192 DECODE_NCU_BACKENDS=kvattn \
   timeout "$((400 - SECONDS))" ncu --profile-from-start off --cache-control none --clock-control none \
   --section LaunchStats --section Occupancy --section SpeedOfLight \
   --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
   -o /tmp/ncu_ef0 -f python3 "$OLDPWD/bench/decode_ncu_peers.py" > "$OUT/ncu_ef0.log" 2>&1
 echo "ncu ef0 rc=$?"
 ncu --import /tmp/ncu_ef0.ncu-rep --page raw --csv > "$OUT/ncu_ef0_raw.csv" 2>/dev/null
 python3 "$OLDPWD/scripts/ncu_kernel_table.py" "$OUT/ncu_ef0_raw.csv")
echo "end ${SECONDS}s"
