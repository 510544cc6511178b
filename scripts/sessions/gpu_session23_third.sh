#!/usr/bin/env bash
# Session 23, call 3: the decode kernels split into one translation unit per family
# (decode_inst_*.cu; the host entry in decode_attention.cu): the decode suite, memcheck, the
# decode bench's default rows (against session 22's), the engine (nano-vllm's workload and the
# single stream) on that build; the window / softcap / ALiBi prefill tests under the kMods
# handover's new default; the SM clock and power while the 1x16384 d128 prefill replays.
#   run: bash scripts/sessions/gpu_session23_third.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-s23c (kvattn, kernels_decode_gpu_test, gpu_decode_bench,
#          kernels_prefill_gpu_test, gpu_prefill_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s23c
random_qwen3_06b
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite "$B/kernels_decode_gpu_test"
KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_decode compute-sanitizer --tool memcheck \
  "$B/kernels_decode_gpu_test" --gtest_filter='DecodeGpu.ModerateBatchesAcrossKernelChoices'
run_logged prefill_features "$B/kernels_prefill_gpu_test" --gtest_filter='PrefillGpuFeatures.*'
for round in 1 2; do
  room 300 "engine r$round" || break
  timeout 40 "$B/kvattn" bench --model /tmp/q06 --device cuda \
    --single-input 16 --single-output 8 --ttft-input 16 >"$OUT/nano_r$round.log" 2>&1
  echo "nano-vllm r$round rc=$?: $(tr '\r' '\n' < "$OUT/nano_r$round.log" | grep -E "Throughput" | head -n 1)"
  single_stream "r$round" kvattn
done
room 380 "decode quick" && {
  timeout 80 "$B/gpu_decode_bench" --only decode --quick > "$OUT/decode_quick.log" 2>&1
  echo "decode quick rc=$?"
  grep '"decode default"' "$OUT/decode_quick.log" | grep -E "no flush" |
    sed -E 's/"bytes.*"note": "(splits [0-9]+).*(no flush).*/\1/' | head -n 14
}
room 450 "clock probe" && {
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader \
    -lms 100 > "$OUT/clocks.csv" 2>&1 &
  SMI=$!
  timeout 60 "$B/gpu_prefill_bench" --reps 10 --only 1x16384 > "$OUT/prefill16k.log" 2>&1
  kill $SMI 2>/dev/null
  grep -v '^{' "$OUT/prefill16k.log" | grep -E "ceiling| default | nohandover | sm80 "
  python3 - "$OUT/clocks.csv" <<'PY'
import sys
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if l.count(",") >= 3]
v = []
for r in rows:
    try:
        v.append((int(r[1].split()[0]), float(r[2].split()[0]), int(r[3])))
    except (ValueError, IndexError):
        pass
if v:
    clocks = sorted(c for c, _, _ in v)
    print(f"samples {len(v)}; SM MHz min {clocks[0]} median {clocks[len(v)//2]} max {clocks[-1]}; "
          f"power W max {max(p for _, p, _ in v):.0f}; temp C max {max(t for _, _, t in v)}")
    print("clock trace (every 5th):", " ".join(str(c) for c, _, _ in v[::5]))
    print("power trace (every 5th):", " ".join(f"{p:.0f}" for _, p, _ in v[::5]))
PY
}
echo "end ${SECONDS}s"
