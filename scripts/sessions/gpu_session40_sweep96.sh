#!/usr/bin/env bash
# Session 40, call 3: the fp8 d64 CTA sweep's kernel within 96 registers (decode_kernel_sweep96:
# 6 CTAs of 3 warps an SM instead of 5) and the day's changes in the engine. The decode suite
# (quick), racecheck and memcheck of the CTA sweep's cases; `--only fp8` against call 1's build
# (old_gpu_decode_bench: the diet without the cap), alternating; the lone 8192-key fp8 rows with
# bf16 queries in f16 (the default) and kept in bf16 (KVATTN_DECODE_FP8_Q_F16=0); SmolLM2-135M's
# single stream (9/3 d64, the small kernel) over fp8 both ways and over bf16; nano-vllm's
# workload (Qwen3-0.6B shape) at bf16 and fp8.
#   run: bash scripts/sessions/gpu_session40_sweep96.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s40c (kvattn, gpu_decode_bench, kernels_decode_gpu_test,
#          old_gpu_decode_bench; debs/). The capped kernel ran slower and was reverted: build
#          the new side from commit d770636 (branch exp-sweep96-s40).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s40c}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
room 90 "sanitizers" && both_sanitizers sweep "$B/kernels_decode_gpu_test" 'DecodeGpu.Fp8CtaSweep'
rows="^decode default .*d64 page 16 fp8"
for round in 1 2; do
  for side in new old; do
    bin=gpu_decode_bench; [ $side = old ] && bin=old_gpu_decode_bench
    room 120 "bench" && bench_rows "fp8_${side}$round" $bin "$rows" --only fp8 --variants default
  done
  room 130 "bench" && KVATTN_DECODE_FP8_Q_F16=0 bench_rows "qbf16_$round" gpu_decode_bench \
    "^decode default +1x8192" --only fp8 --variants default
done
random_qwen3_06b
random_smollm2
for round in 1 2; do
  room 170 "smollm2" && single_bench_kv "fp8_qf16_$round" /tmp/smol 128 fp8
  room 175 "smollm2" && single_bench_kv "fp8_qbf16_$round" /tmp/smol 128 fp8 \
    KVATTN_DECODE_FP8_Q_F16=0
  room 180 "smollm2" && single_bench_kv "bf16_$round" /tmp/smol 128 bf16
done
room 200 "qwen3 bf16" && ENGINE_TIMEOUT=60 engine_bench q06_bf16 /tmp/q06
room 240 "qwen3 fp8" && ENGINE_TIMEOUT=60 engine_bench q06_fp8 /tmp/q06 --kv-cache-dtype fp8
echo "end ${SECONDS}s"
