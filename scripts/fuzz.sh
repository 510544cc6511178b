#!/usr/bin/env bash
# Builds the parser fuzzers (libFuzzer + ASan + UBSan, clang) in build-fuzz/, writes their seed
# corpora, and runs each for KVATTN_FUZZ_SECONDS (default 20) seconds. A crash, sanitizer report,
# leak or failed property stops the script with a non-zero status; the reproducer is left in
# build-fuzz/artifacts/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${KVATTN_FUZZ_SECONDS:-20}
jobs=${KVATTN_JOBS:-$(nproc)}
build=build-fuzz

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is required (apt-get install clang)" >&2
  exit 1
fi
cmake -S fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$jobs"

corpus=$build/corpus
rm -rf "$corpus" "$build/work"
mkdir -p "$build/artifacts"
"$build/fuzz_make_seeds" "$corpus"

# name:max_len
for target in gguf:65536 safetensors:8192 tokenizer_json:16384 tokenizer_encode:4096 \
              request_parser:8192 structured:4096; do
  name=${target%%:*}
  max_len=${target##*:}
  mkdir -p "$build/work/$name"
  echo "== fuzz_$name for ${seconds}s =="
  log=$build/work/$name.log
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$build/fuzz_$name" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" \
      "$build/work/$name" "$corpus/$name" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz: fuzz_$name failed; reproducer: $(ls "$build/artifacts/$name-"* 2>/dev/null)" >&2
    exit 1
  fi
  grep -E "^(Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb)" "$log" || true
done
echo "fuzz: all targets ran ${seconds}s without failures"
