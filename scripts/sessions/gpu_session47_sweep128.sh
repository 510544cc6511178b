#!/usr/bin/env bash
# Session 47, call 5 (ran on d4ed685, whose sweep at head_dim 128 measured slower and was
# reverted in 1792ab0: check that commit out to run this again): the CTA page sweep at fp8
# head_dim 128 (KVATTN_DECODE_CTA_SWEEP=1; the default kept TMA there). Call 4's ncu put the
# fp8 d128 kernel at 81.5% of DRAM peak on 128-byte head rows against bf16 d128's 90% on
# 256-byte ones; the sweep reads a key's rows of all the CTA's heads as one run (1 KB at 8 KV
# heads). Built here (sm_90a).
#   1. the decode suite (quick; DecodeGpu.Fp8CtaSweep now covers head_dim 128 too), then
#      racecheck and memcheck on DecodeGpu.Fp8CtaSweep;
#   2. gpu_decode_bench --only fp8 --variants "cta sweep", three rounds (default and sweep rows
#      in one process);
#   3. ncu: DRAM throughput of the fp8 d128 split kernel, default (TMA) and sweep.
#   run: LIMIT=480 bash scripts/sessions/gpu_session47_sweep128.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, kvattn_gpu_build
source scripts/device_carried.sh  # B, run_logged, both_sanitizers, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-480}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON gpu_decode_bench kernels_decode_gpu_test
mkdir -p "$B" && cp build-gpu/bench/gpu_decode_bench "$B/"
echo "built at ${SECONDS}s"
step "decode suite (quick), sanitizers on the sweep"
run_logged decode_test timeout 220 env KVATTN_GPU_TEST_QUICK=1 \
  build-gpu/tests/kernels/kernels_decode_gpu_test
room $((LIMIT - 200)) "sanitizers" && both_sanitizers sweep \
  build-gpu/tests/kernels/kernels_decode_gpu_test 'DecodeGpu.Fp8CtaSweep'
step "fp8 rows: default / cta sweep, three rounds"
logs=""
for round in 1 2 3; do
  room $((LIMIT - 60)) "round $round" || break
  f="$OUT/sweep_r$round.txt"
  timeout 60 "$B/gpu_decode_bench" --only fp8 --variants "cta sweep" > "$f" 2>&1
  echo "round $round rc=$?"
  logs="${logs:+$logs,}$f"
done
python3 - "$logs" <<'PY'
import json, sys
t = {}
for path in sys.argv[1].split(","):
    for line in open(path):
        if line.startswith("{"):
            r = json.loads(line)
            if r["op"].startswith("decode") and "fp8" in r["shape"]:
                key = (r["shape"], r["note"].split(", ")[-1])
                t.setdefault(key, {}).setdefault(r["op"], []).append(r["us"])
for (shape, note), by in t.items():
    d, s = by.get("decode default", []), by.get("decode cta sweep", [])
    ch = f"{100 * (min(s) / min(d) - 1):+.1f}%" if d and s else ""
    print(f"{shape:34s} {note:17s} default {','.join(f'{x:.1f}' for x in d):24s} sweep {','.join(f'{x:.1f}' for x in s):24s} {ch}")
PY
step "ncu: fp8 d128 split kernel, TMA / sweep"
for sw in -1 1; do
  room $((LIMIT - 20)) "ncu $sw" || break
  KVATTN_DECODE_CTA_SWEEP=$sw timeout 60 ncu --clock-control none --kernel-name-base demangled \
    -k "regex:decode_kernel<__nv_bfloat16, unsigned char, .int.128," --launch-count 1 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum \
    "$B/gpu_decode_bench" --only fp8 --variants default > "$OUT/ncu_sweep$sw.txt" 2>&1
  echo "ncu sweep=$sw rc=$?"
  grep -E "decode_kernel<|inst_executed|time_duration|dram__throughput" "$OUT/ncu_sweep$sw.txt" |
    sed -E 's/\(kvattn::cuda::DecodeParams\).*//; s/  +/ /g' | head -5
done
echo "end ${SECONDS}s"
