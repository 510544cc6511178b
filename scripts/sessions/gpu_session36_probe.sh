#!/usr/bin/env bash
# Session 36, call 2: where the split decode kernel's time goes beyond streaming (issue 16's
# last 3-6% against cuDNN, and the engine's ragged batches at 75-88% of copy). The split kernel
# now stamps each CTA's entry and each warp's end when probed (gpu_decode_probe --only split:
# CTA end times' spread, the tail after the median CTA, event time against the CTAs' span),
# the decode test (quick) on the changed kernels, the uniform and engine shapes' variants, and
# the engine on random Qwen3-0.6B / SmolLM2-135M (nano-vllm's workload, single streams).
#   run: bash scripts/sessions/gpu_session36_probe.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s36b (gpu_decode_probe, gpu_decode_bench, kernels_decode_gpu_test, kvattn; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s36b
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
timeout 150 "$B/gpu_decode_probe" --only split --reps 20 > "$OUT/probe_split.txt" 2>&1
echo "probe rc=$?"; grep -v '^{' "$OUT/probe_split.txt"
for only in d128 engine; do
  timeout 120 "$B/gpu_decode_bench" --only $only --variants 'diag nomerge,swap h4 s3,waves 2,waves 4,swap h4 s3 waves 2,swap h4 s3 waves 4' \
    > "$OUT/bench_$only.txt" 2>&1
  echo "bench $only rc=$?"
  grep -o '"op": "[^"]*", "shape": "[^"]*", "us": [0-9.]*' "$OUT/bench_$only.txt" | head -40
done
room 200 "decode test" && run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
room 260 "sanitizers" && both_sanitizers waves "$B/kernels_decode_gpu_test" 'DecodeGpu.StreamWaves'
random_qwen3_06b
random_smollm2
run_bench() {  # LABEL MODEL KV [ARGS...]
  local label=$1 model=$2 kv=$3; shift 3
  timeout 100 "$B/kvattn" bench --model "$model" --device cuda --kv-cache-dtype "$kv" \
    --no-compare --single-input 128 --single-output 256 --ttft-input 4096 \
    --json "$OUT/bench_$label.json" "$@" >"$OUT/bench_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/bench_$label.log" |
    grep -E "Throughput|single stream|first token|decode K/V|rror" | tr '\n' ' ')"
}
room 250 "engine" && run_bench q06_bf16 /tmp/q06 bf16
room 300 "engine fp8" && run_bench q06_fp8 /tmp/q06 fp8
for m in smol q06; do
  room 340 "single $m" && single_bench "${m}_default" /tmp/$m 128
done
echo "end ${SECONDS}s"
