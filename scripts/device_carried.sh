# Sourced on the GPU machine by call scripts that run binaries built here and carried in a
# folder of their own (a `build-carry-*` folder, git-ignored): bins.tar.xz, the stripped
# binaries in one xz stream (they share the library's kernels: ~15 MB for ~400 MB), and debs/,
# the CLI's runtime packages. Before packing, `bash scripts/check_build_deps.sh` (session 19).
#   carried_unpack DIR     binaries into $B (/tmp/bin), packages into /opt/kvrun, the loader
#                          pointed at them, /work/main linked to this tree (engine fixtures)
#   carried_bins DIR DEST  a second carry's binaries into DEST (an A/B against another build;
#                          its packages come from the first carry's carried_unpack)
#   random_qwen3_06b       writes the random Qwen3-0.6B-shaped model to /tmp/q06
#   random_smollm2         writes the random SmolLM2-135M-shaped model to /tmp/smol
#   single_bench LABEL MODEL PROMPT [ENV=VALUE...]   `kvattn bench`'s single stream (PROMPT
#                          tokens + 256 new, one 16-token warm-up request) with ENV, log
#                          $OUT/ss_LABEL.log, one summary line
#   single_bench_kv LABEL MODEL PROMPT DTYPE [ENV=VALUE...]   the same with --kv-cache-dtype
#                          DTYPE (auto, bf16 or fp8); $KVATTN_BIN instead of $B/kvattn if set
#   single_stream LABEL BIN [PROMPT]   `kvattn bench`'s single stream (PROMPT tokens, default
#                          128, + 256 new) with $BIN, log $OUT/ss_LABEL.log, one summary line;
#                          the environment is the caller's
#   engine_bench LABEL MODEL [ARGS...]   `kvattn bench` on MODEL with ARGS (150 s at most;
#                          ENGINE_TIMEOUT overrides), log $OUT/engine_LABEL.log, one summary line
#   bench_rows LABEL BIN ROWS [ARGS...]   $B/BIN with ARGS (150 s at most; BENCH_TIMEOUT
#                          overrides), log $OUT/bench_LABEL.txt; prints its exit code and the
#                          log's lines matching the extended regex ROWS (e.g. "^decode default ")
#   run_logged LABEL CMD...   CMD (240 s at most), log $OUT/LABEL.log; prints its exit code,
#                          the gtest / sanitizer verdict lines and the first failure lines
#   both_sanitizers LABEL BIN FILTER   racecheck, then memcheck, on BIN's gtest FILTER (quick
#                          cases), logs $OUT/{racecheck,memcheck}_LABEL.log, a verdict line each
#   room LIMIT WHAT        true while the call has run less than LIMIT seconds, else says
#                          WHAT was skipped
#   pack_out               folds every file under $OUT but summary.txt into logs.tar.gz: the
#                          device returns at most 8 files (session 20 lost a call's summary
#                          to that limit); call it last
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
B=/tmp/bin

carried_unpack() {
  mkdir -p /opt/kvrun
  carried_bins "$1" "$B"
  for f in "$1"/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
  export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
}

carried_bins() {
  mkdir -p "$2"
  xz -dc "$1/bins.tar.xz" | tar -C "$2" -xf - && chmod +x "$2"/*
}

random_qwen3_06b() {
  (PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 2>&1 |
    tail -n 1)
}

random_smollm2() {
  (PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
    --out /tmp/smol 2>&1 | tail -n 1)
}

single_bench() {
  local label=$1 model=$2 prompt=$3; shift 3
  single_bench_kv "$label" "$model" "$prompt" auto "$@"
}

single_bench_kv() {
  local label=$1 model=$2 prompt=$3 dtype=$4; shift 4
  env KVATTN_NOTHING=0 "$@" timeout 60 "${KVATTN_BIN:-$B/kvattn}" bench --model "$model" \
    --device cuda --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 \
    --max-output 4 --single-input "$prompt" --single-output 256 --kv-cache-dtype "$dtype" \
    >"$OUT/ss_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/ss_$label.log" | grep -E "single stream|first token|rror" | tr '\n' ' ')"
}

single_stream() {
  local label=$1 bin=$2 prompt=${3:-128}
  timeout 60 "$B/$bin" bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input "$prompt" --single-output 256 >"$OUT/ss_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/ss_$label.log" | grep -E "single|first token" | tr '\n' ' ')"
}

engine_bench() {
  local label=$1 model=$2; shift 2
  timeout "${ENGINE_TIMEOUT:-150}" "$B/kvattn" bench --model "$model" --device cuda "$@" \
    > "$OUT/engine_$label.log" 2>&1
  echo "engine $label rc=$?: $(tr '\r' '\n' < "$OUT/engine_$label.log" |
    grep -E "Throughput|single stream|first token|decode K/V|KV pool|hit rate|cache on/off|steps|blocks free|rror" |
    tr '\n' ' ')"
}

bench_rows() {
  local label=$1 bin=$2 rows=$3; shift 3
  timeout "${BENCH_TIMEOUT:-150}" "$B/$bin" "$@" > "$OUT/bench_$label.txt" 2>&1
  echo "bench $label rc=$?"
  grep -E "$rows" "$OUT/bench_$label.txt" | sed 's/  */ /g'
}

pack_out() {
  (cd "$OUT" && tar -czf logs.tar.gz --exclude=summary.txt --exclude=logs.tar.gz -- * &&
    find . -maxdepth 1 -type f ! -name summary.txt ! -name logs.tar.gz -delete)
}

run_logged() {
  local name=$1; shift
  timeout 240 "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$?: $(grep -E "PASSED|FAILED|ERROR SUMMARY" "$OUT/$name.log" | head -n 4 | tr '\n' ' ')"
  grep -m6 -E "Failure|Which is|error:" "$OUT/$name.log"
}

both_sanitizers() {
  local label=$1 bin=$2 filter=$3 tool
  for tool in racecheck memcheck; do
    KVATTN_GPU_TEST_QUICK=1 run_logged "${tool}_$label" compute-sanitizer --tool "$tool" \
      --error-exitcode 9 "$bin" --gtest_filter="$filter"
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$OUT/${tool}_$label.log" | tail -n 1
  done
}

room() { [ "$SECONDS" -lt "$1" ] || { echo "skipped ($2): ${SECONDS}s gone"; return 1; }; }
