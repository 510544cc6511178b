#!/usr/bin/env bash
# Session 47, call 4: where the H100's fp8 d128 split kernel loses to its bf16 twin (80.5 against
# ~88% of DRAM peak in call 3, with 38% of issue slots busy), and the bf16 d64 one to its d128
# sibling: Nsight Compute's warp states, scheduler, occupancy and memory sections, one launch
# each. The binary is call 3's new1 (c239d4a; its d128 and bf16 kernels are HEAD's), carried in
# build-carry-s47: no build here.
#   run: bash scripts/sessions/gpu_session47_stalls.sh 2>&1 | tee $OUT/summary.txt
#   carry: build-carry-s47
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # OUT, step
source scripts/device_carried.sh  # B, room, pack_out
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$B"
xz -dc build-carry-s47/gpu_decode_bench_new1.xz > "$B/gpu_decode_bench" && chmod +x "$B/gpu_decode_bench"
profile() {  # LABEL KERNEL_REGEX ONLY
  timeout 90 ncu --clock-control none --kernel-name-base demangled -k "regex:$2" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis \
    "$B/gpu_decode_bench" --only "$3" --variants default > "$OUT/ncu_$1.txt" 2>&1
  echo "ncu $1 rc=$?"
  grep -E "Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit (Reg|Shared)|L2 Hit|Mem Busy|Max Bandwidth" \
    "$OUT/ncu_$1.txt" | sed -E 's/  +/ /g'
  grep -E "^ +(----|Section)|stall|Stall" "$OUT/ncu_$1.txt" | grep -iE "cycles|stall" | head -12 | sed -E 's/  +/ /g'
}
step "fp8 d128 64x4096"
profile fp8_d128 'decode_kernel<__nv_bfloat16, unsigned char, .int.128,' fp8
step "bf16 d128 64x4096"
profile bf16_d128 'decode_kernel<__nv_bfloat16, __nv_bfloat16, .int.128,' fp8
step "bf16 d64 96x4096 9/3"
profile bf16_d64 'decode_kernel<__nv_bfloat16, __nv_bfloat16, .int.64,' d64
echo "end ${SECONDS}s"
