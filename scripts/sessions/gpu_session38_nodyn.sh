#!/usr/bin/env bash
# Session 38, call 3: the split kernel without the dynamic split's code (KVATTN_DECODE_DYNAMIC_SPLIT_BUILD
# off: the 16-bit d64 lean tile back from 128 registers with spills to 119 without), against the
# build before it (old_*: this session's first build), in one call: the decode suite on the new
# build, then the decode bench (the d64 and d128 profiler shapes, the engine's ragged batches, the
# decode table's page-16 rows) and nano-vllm's workload, old and new alternating.
#   run: bash scripts/sessions/gpu_session38_nodyn.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s38b (gpu_decode_bench, gpu_decode_probe,
#          kernels_decode_gpu_test, kvattn; old_gpu_decode_bench, old_kvattn; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s38b}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
bench() {  # LABEL BIN ARGS...
  local label=$1 bin=$2; shift 2
  timeout 150 "$B/$bin" "$@" --variants default > "$OUT/bench_$label.txt" 2>&1
  echo "bench $label rc=$?: $(grep -o '"op": "decode default", "shape": "[^"]*", "us": [0-9.]*' "$OUT/bench_$label.txt" |
    sed 's/"op": "decode default", //' | tr '\n' ' ')"
}
for round in 1 2; do
  for side in old new; do
    bin=gpu_decode_bench; [ $side = old ] && bin=old_gpu_decode_bench
    room 250 "bench" && bench "d64_${side}$round" $bin --only d64
    room 250 "bench" && bench "d128_${side}$round" $bin --only d128
    room 280 "bench" && bench "engine_${side}$round" $bin --only engine
  done
done
room 330 "bench decode" && bench decode_old old_gpu_decode_bench --only decode --quick
room 380 "bench decode" && bench decode_new gpu_decode_bench --only decode --quick
random_qwen3_06b
nano() {  # LABEL BIN
  env timeout 70 "$B/$2" bench --model /tmp/q06 --device cuda --no-compare \
    --single-input 16 --single-output 8 --ttft-input 64 > "$OUT/nano_$1.log" 2>&1
  echo "nano $1 rc=$?: $(tr '\r' '\n' < "$OUT/nano_$1.log" | grep -E "Throughput|decode K/V|rror" | tr '\n' ' ')"
}
for round in 1 2; do
  room 480 "nano-vllm" && nano "old$round" old_kvattn
  room 520 "nano-vllm" && nano "new$round" kvattn
done
echo "end ${SECONDS}s"
