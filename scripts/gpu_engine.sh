#!/usr/bin/env bash
# The engine on the GPU machine, after scripts/gpu_run.sh built build-gpu (gpu_run.sh --engine
# calls this; it can also run alone on a machine where build-gpu exists):
#   1. a random Qwen3-0.6B-shaped checkpoint with HF's greedy reference (scripts/hf_parity.py),
#   2. the engine GPU tests (ctest -L gpu -R engine; the HF parity test reads that checkpoint),
#   3. kvattn bench on it with CUDA graphs, then with --eager,
#   4. HF transformers on the same shape (scripts/hf_bench.py), and a short comparison.
# Env: OUT (default ./out), BUILD (default build-gpu), KVATTN_HF_DIR (default /tmp/hfp; reused
# when it already holds a checkpoint), HF_BENCH_ARGS (extra flags for hf_bench.py, e.g. --nano).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build-gpu}
CKPT=${KVATTN_HF_DIR:-/tmp/hfp}
mkdir -p "$OUT"
step() { echo; echo "== $* == ($(date +%T))"; }
status=0

step "checkpoint: random Qwen3-0.6B shape -> $CKPT"
if [ -f "$CKPT/model.safetensors" ] && [ -f "$CKPT/expected.json" ]; then
  echo "reusing $CKPT"
else
  PYTHONUNBUFFERED=1 timeout 600 python3 scripts/hf_parity.py --out "$CKPT" 2>&1 | tail -n 12
  [ -f "$CKPT/model.safetensors" ] || { echo "CHECKPOINT FAILED"; status=1; }
fi

step "engine gpu tests"
KVATTN_HF_PARITY_DIR="$CKPT" ctest --test-dir "$BUILD" -L gpu -R engine --output-on-failure \
  --timeout 900 2>&1 | tee "$OUT/engine_gpu_tests.log" | tail -n 40
grep -q " 0 tests failed" "$OUT/engine_gpu_tests.log" || status=1

if [ -x "$BUILD/kvattn" ] && [ -f "$CKPT/model.safetensors" ]; then
  step "kvattn bench (CUDA graphs)"
  timeout 900 "./$BUILD/kvattn" bench --model "$CKPT" --device cuda --json "$OUT/bench.json" \
    2>&1 | tr '\r' '\n' | grep -v '^\s*$' | tee "$OUT/bench.log" | tail -n 25 || status=1
  step "kvattn bench --eager"
  timeout 900 "./$BUILD/kvattn" bench --model "$CKPT" --device cuda --eager \
    --json "$OUT/bench_eager.json" 2>&1 | tr '\r' '\n' | grep -v '^\s*$' |
    tee "$OUT/bench_eager.log" | tail -n 25 || status=1
else
  echo "no $BUILD/kvattn or no checkpoint: bench skipped"; status=1
fi

step "HF transformers (sdpa) on the same shape"
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 timeout 600 python3 scripts/hf_bench.py --model "$CKPT" \
  --json "$OUT/hf_bench.json" ${HF_BENCH_ARGS:-} 2>&1 | grep -v Warning | tail -n 12 || status=1

step "engine summary"
python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        print(f"{name}: not available ({e.__class__.__name__})")
        return None
def flat(d, prefix=""):  # numeric leaves, for a bench JSON whose schema this script does not own
    if isinstance(d, dict):
        for k, v in d.items():
            yield from flat(v, f"{prefix}{k}.")
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield prefix[:-1], d
def tok_s(d):
    for k, v in flat(d or {}):
        if "tok" in k and ("per_s" in k or "/s" in k) and "single" not in k and "decode" not in k:
            return k, v
    return None, None
bench, eager, hf = load("bench.json"), load("bench_eager.json"), load("hf_bench.json")
for name, d in (("graphs", bench), ("eager", eager)):
    if d:
        print(f"kvattn bench ({name}):", ", ".join(f"{k}={v:.4g}" for k, v in flat(d)))
if hf:
    for c in hf["cases"]:
        print(f"HF {c['name']}: {c['output_tok_per_s']:,.0f} tok/s")
    ref = next((c for c in hf["cases"] if c["batch"] == 256 and c["new_tokens"] == 128), None)
    k, v = tok_s(bench)
    if ref and v:
        print(f"kvattn ({k} = {v:,.0f}) / HF B=256 256+128 ({ref['output_tok_per_s']:,.0f}) = "
              f"{v / ref['output_tok_per_s']:.1f}x  (acceptance: >= 5x)")
EOF
exit $status
