#!/usr/bin/env bash
# Session 36, last call: the split kernel's CTA end times by SM (one CTA of 8 KV heads an SM,
# then two of 4), and, on whichever card comes, the engine's single streams and nano-vllm.
#   run: bash scripts/sessions/gpu_session36_last.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s36d (kvattn, gpu_decode_probe with --sm-ends; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s36d

nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 "$B/gpu_decode_probe" --only split --sm-ends --reps 20 2>&1 | grep -v '^{'
random_qwen3_06b
random_smollm2
for m in smol q06; do single_bench "${m}_default" /tmp/$m 128; done
room 200 "nano-vllm" && timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda --no-compare \
  --single-input 16 --single-output 8 --ttft-input 64 > "$OUT/nano.log" 2>&1
tr '\r' '\n' < "$OUT/nano.log" | grep -E "Throughput|decode K/V" | tr '\n' ' '; echo
echo "end ${SECONDS}s"
