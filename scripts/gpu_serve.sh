#!/usr/bin/env bash
# Issue 17's H200 acceptance in one call (checked here on the CPU with --cpu-smoke; not yet run
# on a GPU): builds the command line (Release, sm_90a), makes the random Qwen3-0.6B-shaped
# checkpoint, runs `kvattn bench` offline on nano-vllm's workload, then `kvattn serve` on the
# same checkpoint with the same engine options and scripts/serve_load.py against it: bench's
# very 256 requests at full concurrency (256 clients), then Poisson rates at 0.3, 0.6 and 0.9
# times bench's request throughput (fresh prompts per rate). Prints offline and server tok/s
# and their ratio (acceptance: >= 0.85), TTFT and ITL p50/p99 per rate; stops the server with
# SIGTERM and checks it exits 0 with every KV block free. JSON, logs and the PNG (when the
# image has matplotlib; else draw it from the JSON with serve_load.py --plot-from) in $OUT.
#   run: bash scripts/gpu_serve.sh   (carry .deps, made here by scripts/device_deps.sh: the
#        Debian packages, and the openai client's wheels in .deps/wheels; no network there)
#        RATE_N=128 bash scripts/gpu_serve.sh: fewer requests per Poisson rate (default 256)
#   here: bash scripts/gpu_serve.sh --cpu-smoke [path/to/kvattn]   (tiny_qwen3, 24 small
#        requests, no build: checks the steps, the JSON, the summary and the SIGTERM exit)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export OUT
t_start=$(date +%s)

if [ "${1:-}" = --cpu-smoke ]; then
  smoke=1
  KV=${2:-build-h17/kvattn}
  DEVICE=cpu MODEL=tests/data/tiny_qwen3 N=24 RATE_N=${RATE_N:-24} IN_MIN=16 IN_MAX=96 OUT_MIN=16 OUT_MAX=96 PROCS=2
  engine=(--max-num-seqs 256 --max-num-batched-tokens 16384)
  bench_extra=(--single-output 16 --ttft-input 64)
  step() { echo; echo "== $* == ($(date +%T))"; }
else
  smoke=0
  KV=build-gpu/kvattn
  DEVICE=cuda MODEL=/tmp/q06 N=256 RATE_N=${RATE_N:-256} IN_MIN=100 IN_MAX=1024 OUT_MIN=100 OUT_MAX=1024 PROCS=8
  engine=(--max-num-seqs 256 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.9)
  bench_extra=()
  source scripts/device_env.sh  # step, kvattn_gpu_build; the carried libraries (serve needs them)

  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  step build
  export -f kvattn_gpu_build
  t=$(date +%s)
  timeout 480 bash -c 'kvattn_gpu_build "$@"' _ OFF kvattn_cli || { echo "build failed or timed out"; exit 1; }
  echo "build: $(( $(date +%s) - t )) s"

  step "checkpoint (random Qwen3-0.6B shape)"
  PYTHONUNBUFFERED=1 timeout 300 python3 scripts/make_random_qwen3.py --shape 0.6b --out "$MODEL" \
    2>&1 | tail -n 2
  [ -s "$MODEL/config.json" ] || { echo "checkpoint failed"; exit 1; }
fi
sizes_bench=(--num-seqs "$N" --min-input "$IN_MIN" --max-input "$IN_MAX" --min-output "$OUT_MIN"
             --max-output "$OUT_MAX")
ldd "$KV" | grep -q httplib || { echo "$KV was built without cpp-httplib: no kvattn serve"; exit 1; }
ldd "$KV" | grep "not found" && { echo "$KV: libraries not found"; exit 1; }
MAX_ID=$(python3 -c "import json; print(min(10000, json.load(open('$MODEL/config.json'))['vocab_size']))")

step "openai client for scripts/serve_load.py"
site=/tmp/serve_site
rm -rf "$site"
if ls .deps/wheels/openai-*.whl >/dev/null 2>&1 &&
   timeout 120 python3 -m pip install --no-index --find-links .deps/wheels --target "$site" \
     openai >"$OUT/pip_wheels.log" 2>&1; then
  echo "openai $(PYTHONPATH=$site python3 -c 'import openai; print(openai.__version__)') from .deps/wheels"
elif python3 -c "import openai" 2>/dev/null; then
  site=""
  echo "carried wheels not installed ($OUT/pip_wheels.log); the image's openai $(python3 -c 'import openai; print(openai.__version__)')"
else
  tail -n 5 "$OUT/pip_wheels.log" 2>/dev/null
  echo "no openai client: run scripts/device_deps.sh here and carry .deps"; exit 1
fi
pypath=$site${PYTHONPATH:+:$PYTHONPATH}
PYTHONPATH=$pypath python3 -c "import matplotlib" 2>/dev/null && echo "matplotlib: yes (PNG drawn here)" ||
  echo "matplotlib: not on this machine; draw the PNG from serve_load.json with --plot-from"

step "kvattn bench (offline, nano-vllm workload)"
timeout 300 "$KV" bench --model "$MODEL" --device "$DEVICE" --workload nano-vllm "${sizes_bench[@]}" \
  --seed 0 --temperature 0.6 "${engine[@]}" "${bench_extra[@]}" --json "$OUT/bench.json" \
  >"$OUT/bench.log" 2>&1
rc=$?
tr '\r' '\n' <"$OUT/bench.log" | grep -E "loaded|workload|Throughput|kv cache|rror"
[ $rc -eq 0 ] && [ -s "$OUT/bench.json" ] || { echo "bench failed (rc $rc)"; exit 1; }
# Poisson rates: 0.3, 0.6, 0.9 x bench's request throughput (unsaturated .. near saturation).
rates=$(python3 -c "
import json; t = json.load(open('$OUT/bench.json'))['throughput']
r = $N / t['wall_s']
print(','.join(f'{f * r:.3g}' for f in (0.3, 0.6, 0.9)))")
echo "offline: $N requests -> rates $rates req/s"

step "kvattn serve"
timeout 900 "$KV" serve --model "$MODEL" --device "$DEVICE" --port 0 -q "${engine[@]}" \
  >"$OUT/serve.log" 2>&1 &
spid=$!
stop_server() { kill -TERM "$spid" 2>/dev/null; }
trap stop_server EXIT
port=""
for _ in $(seq 1 360); do  # loading: up to 180 s
  port=$(grep -oE "listening on http://[0-9.]+:[0-9]+" "$OUT/serve.log" | grep -oE "[0-9]+$")
  [ -n "$port" ] && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.5
done
[ -n "$port" ] || { tail -n 20 "$OUT/serve.log"; echo "server did not start"; exit 1; }
base=http://127.0.0.1:$port
timeout 60 python3 - "$base" <<'EOF' || { tail -n 20 "$OUT/serve.log"; echo "no /health"; exit 1; }
import sys, time, urllib.request
while True:
    try:
        if urllib.request.urlopen(sys.argv[1] + "/health", timeout=5).status == 200:
            break
    except OSError:
        time.sleep(0.25)
EOF
grep "listening" "$OUT/serve.log"

step "load: $N clients at once, then $RATE_N requests at each of $rates req/s (Poisson; $PROCS client processes)"
PYTHONPATH=$pypath timeout 420 python3 scripts/serve_load.py --base-url "$base" --rates "inf,$rates" \
  --num-requests "$N" --rate-requests "$RATE_N" --min-input "$IN_MIN" --max-input "$IN_MAX" --min-output "$OUT_MIN" \
  --max-output "$OUT_MAX" --max-token-id "$MAX_ID" --seed 0 --temperature 0.6 --procs "$PROCS" \
  --json "$OUT/serve_load.json" --plot "$OUT/serve_load.png" >"$OUT/serve_load.log" 2>&1
load_rc=$?
grep -vE "^rate .*\] [0-9]+/" "$OUT/serve_load.log" | tail -n 12
timeout 10 python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('$base/metrics').read().decode())" \
  >"$OUT/metrics_after_load.txt" 2>&1
grep -E "^kvattn_kv_cache_blocks_(used|total)|^kvattn_request_success_total" "$OUT/metrics_after_load.txt"

step "SIGTERM"
trap - EXIT
kill -TERM "$spid"
for _ in $(seq 1 120); do kill -0 "$spid" 2>/dev/null || break; sleep 0.5; done
if kill -0 "$spid" 2>/dev/null; then
  echo "server still running 60 s after SIGTERM: killed"
  kill -KILL -- "-$spid" 2>/dev/null || kill -KILL "$spid"
fi
wait "$spid"
serve_rc=$?
tail -n 2 "$OUT/serve.log"
echo "kvattn serve exit code: $serve_rc"

step summary
python3 - "$OUT" "$serve_rc" "$load_rc" "$smoke" <<'EOF'
import json, re, sys
out, serve_rc, load_rc, smoke = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
bench = json.load(open(f"{out}/bench.json"))
try:
    load = json.load(open(f"{out}/serve_load.json"))
except (OSError, ValueError):
    sys.exit("no serve_load.json: the load failed (serve_load.log)")
log = open(f"{out}/serve.log").read()
m = re.search(r"listening on .*?(\d+) KV tokens", log)
serve_kv = int(m.group(1)) if m else None
freed = re.search(r"all (\d+) KV blocks free", log)
t = bench["throughput"]
offline = t["output_tok_per_s"]
rows = load["results"]
full = next(r for r in rows if r["rate"] == "inf")
ratio = full["output_tok_s"] / offline if offline else 0.0
w = bench["workload"]
print(f"workload nano-vllm: {w['num_seqs']} requests, input {w['min_input']}-{w['max_input']}, "
      f"output {w['min_output']}-{w['max_output']}, seed {w['seed']}, temperature "
      f"{w['temperature']}; KV pool {bench['kv_cache_tokens']} tokens (bench), {serve_kv} (serve)")
print(f"offline  kvattn bench{' (cuda graphs)' if bench['cuda_graphs'] else ''}: "
      f"{t['output_tokens']} tok in {t['wall_s']:.2f} s = {offline:,.0f} tok/s")
print(f"server   {full['requests']} clients at once: {full['output_tokens']} tok in "
      f"{full['wall_s']:.2f} s = {full['output_tok_s']:,.0f} tok/s, {full['failed']} failed")
same = full["output_tokens"] == t["output_tokens"] and full["prompt_tokens"] == w["prompt_tokens"]
print(f"same requests as bench: {'yes' if same else 'NO'} (prompt tokens {full['prompt_tokens']} "
      f"vs {w['prompt_tokens']}, output {full['output_tokens']} vs {t['output_tokens']})")
ok_ratio = ratio >= 0.85
print(f"server / offline = {ratio:.3f}  (acceptance >= 0.85: "
      f"{'PASS' if ok_ratio else 'FAIL'}{', not judged on the CPU smoke' if smoke else ''})")
print(f"\n{'rate req/s':>10} {'got req/s':>9} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} "
      f"{'ITL p50':>8} {'ITL p99':>8} {'failed':>6}   (ms)")
for r in rows:
    print(f"{str(r['rate']):>10} {r['request_throughput']:9.2f} {r['output_tok_s']:10,.0f} "
          f"{r['ttft_ms']['p50']:9.1f} {r['ttft_ms']['p99']:9.1f} {r['itl_ms']['p50']:8.2f} "
          f"{r['itl_ms']['p99']:8.2f} {r['failed']:6d}")
print(f"\nkvattn serve after SIGTERM: exit {serve_rc}, "
      f"{'all ' + freed.group(1) + ' KV blocks free' if freed else 'NO all-blocks-free line'}")
ok = (serve_rc == 0 and freed and load_rc == 0 and same and not any(r["failed"] for r in rows)
      and (ok_ratio or smoke))
json.dump({"offline_tok_s": offline, "server_tok_s": full["output_tok_s"], "ratio": ratio,
           "same_requests": same, "serve_exit": serve_rc, "all_blocks_free": bool(freed),
           "rates": [{k: r[k] for k in ("rate", "request_throughput", "output_tok_s", "ttft_ms",
                                        "itl_ms", "failed", "requests", "wall_s")} for r in rows],
           "ok": bool(ok)}, open(f"{out}/serve_summary.json", "w"), indent=2)
print("gpu_serve: " + ("OK" if ok else "FAILED (see above)"))
sys.exit(0 if ok else 1)
EOF
rc=$?
echo "total: $(( $(date +%s) - t_start )) s; files in $OUT"
exit $rc
