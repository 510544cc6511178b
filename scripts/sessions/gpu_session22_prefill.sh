#!/usr/bin/env bash
# Session 22, call 2: the Hopper prefill consumers' look-ahead through shared memory
# (kLookAheadSmem: the next tile's section arithmetic and its cu_seqlens words, by cp.async, in
# each consumer thread's own 32-byte slot; no register live across the tile) against the
# default (head_dim 64: no look-ahead; 128: the register form), in the same binary
# (`gpu_prefill_bench`'s "smem_la" rows), two rounds; the prefill GPU suite (quick) on the
# default kernels (for_each_tile's signature changed); nano-vllm's workload with a bf16 and an
# fp8 KV cache, for the record.
# Build first: cmake --build build-gpu --target gpu_prefill_bench kernels_prefill_gpu_test kvattn_cli;
#   bash scripts/check_build_deps.sh build-gpu; pack gpu_prefill_bench, kernels_prefill_gpu_test
#   and kvattn stripped into build-carry-s22b/bins.tar.xz with debs/ (as session 22's first call).
#   run: bash scripts/sessions/gpu_session22_prefill.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s22b
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s22b
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 run_logged prefill_suite "$B/kernels_prefill_gpu_test"
for round in 1 2; do
  room 330 "bench round $round" || break
  timeout 150 "$B/gpu_prefill_bench" --reps 10 >"$OUT/prefill_bench_r$round.log" 2>&1
  echo "prefill bench r$round rc=$?"
  grep -v '^{' "$OUT/prefill_bench_r$round.log" | grep -E "ceiling| default | smem_la " | head -n 24
done
random_qwen3_06b
for kv in bf16 fp8; do
  room 480 "nano-vllm $kv" || break
  timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda --kv-cache-dtype $kv \
    --single-input 16 --single-output 8 --ttft-input 16 >"$OUT/nano_$kv.log" 2>&1
  echo "nano-vllm $kv rc=$?: $(tr '\r' '\n' < "$OUT/nano_$kv.log" | grep -E "Throughput|KV pool|blocks" | head -n 3 | tr '\n' ' ')"
done
room 520 "nano-vllm breakdown" &&
  timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda --breakdown \
    --single-input 16 --single-output 8 --ttft-input 16 >"$OUT/nano_breakdown.log" 2>&1
echo "nano-vllm breakdown rc=$?"; tr '\r' '\n' < "$OUT/nano_breakdown.log" | grep -A8 -E "Throughput|breakdown" | head -n 20
echo "end ${SECONDS}s"
