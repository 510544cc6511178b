#!/bin/sh
# `kvattn bench --workload prefix|long` scaled down on a tiny checkpoint; checks its --json:
#   bench_json_test.sh KVATTN MODEL_DIR WORKLOAD
# Exits 77 (ctest: skipped) without jq.
set -u
kvattn=$1 model=$2 workload=$3
command -v jq >/dev/null || { echo "skip: no jq"; exit 77; }
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
j=$dir/bench.json

fail() { echo "FAIL ($workload): $*"; cat "$dir/out"; [ -f "$j" ] && cat "$j"; exit 1; }
check() { jq -e "$1" "$j" >/dev/null || fail "not true: $1"; }

case $workload in
prefix)  # 13 requests behind a 100-token shared prompt, then the same with the cache off
  "$kvattn" bench --model "$model" --workload prefix --scale 0.05 --max-num-batched-tokens 128 \
    --single-input 8 --single-output 4 --ttft-input 64 --json "$j" >"$dir/out" 2>&1 ||
    fail "exit $?"
  grep -Eq "prefix cache on: hit rate [0-9.]+%" "$dir/out" || fail "no hit rate line"
  grep -Eq "prefix cache off: .*cache on/off: [0-9.]+x" "$dir/out" || fail "no comparison line"
  check '.workload.name == "prefix" and .workload.num_seqs == 13 and .workload.prefix_tokens == 100
         and .workload.min_input == 5 and .workload.max_input == 51 and .workload.scale == 0.05'
  check '.prefix_cache.enabled and .prefix_cache.hit_rate > 0.3 and .prefix_cache.hit_rate < 1
         and .prefix_cache.cached_tokens > 0
         and .prefix_cache.prompt_tokens == .workload.prompt_tokens
         and .prefix_cache.off.prefix_hit_rate == 0
         and .prefix_cache.off.output_tokens == .throughput.output_tokens
         and .prefix_cache.off.output_tok_per_s > 0 and .prefix_cache.speedup > 0
         and .prefix_cache.off.breakdown.timed'
  ;;
long)  # one request of 164-328 prompt tokens and 10 new ones
  "$kvattn" bench --model "$model" --workload long --scale 0.02 --single-input 8 \
    --single-output 4 --ttft-input 64 --json "$j" >"$dir/out" 2>&1 || fail "exit $?"
  check '.workload.name == "long" and .workload.num_seqs == 1 and .workload.min_input == 164
         and .workload.max_input == 328 and .workload.output_tokens == 10'
  check '.prefix_cache.off == null and .prefix_cache.speedup == null'
  check '.max_num_batched_tokens == 328'  # 16384 x --scale
  ;;
*) fail "unknown workload" ;;
esac

grep -Eq "Throughput: [0-9.]+tok/s" "$dir/out" || fail "no throughput line"
grep -Eq "all steps +[0-9]+ steps, +[0-9.]+ ms/step: attention [0-9.]+%, GEMMs [0-9.]+%, other [0-9.]+%, host [0-9.]+%" \
  "$dir/out" || fail "no breakdown line"
check '.throughput.output_tokens == .workload.output_tokens and .throughput.output_tok_per_s > 0'
check '.throughput.prefix_hit_rate == .prefix_cache.hit_rate'
# The breakdown: every part present and measured, the parts adding up to the steps' time.
for part in all_steps prefill_steps decode_steps; do
  check ".breakdown.timed and (.breakdown.$part | has(\"steps\") and has(\"seconds\")
         and has(\"ms_per_step\") and has(\"attention_s\") and has(\"gemm_s\") and has(\"other_s\")
         and has(\"host_s\") and has(\"attention_share\") and has(\"gemm_share\")
         and has(\"other_share\") and has(\"host_share\"))"
  check ".breakdown.$part | (.attention_s + .gemm_s + .other_s + .host_s - .seconds | fabs)
         <= 1e-6 + 1e-6 * .seconds"
  check ".breakdown.$part | .steps == 0 or
         ((.attention_share + .gemm_share + .other_share + .host_share - 1 | fabs) < 1e-6)"
done
check '.breakdown.all_steps.steps == .throughput.stats.steps
       and .breakdown.all_steps.steps == .breakdown.prefill_steps.steps + .breakdown.decode_steps.steps
       and .breakdown.all_steps.attention_s > 0 and .breakdown.all_steps.gemm_s > 0
       and .breakdown == .throughput.breakdown'
check '.breakdown.all_steps.seconds <= .throughput.wall_s * 1.001 + 1e-4'
check '.single_stream.decode_tok_per_s > 0 and .single_stream.breakdown.timed and .ttft.seconds > 0'
check '.kv_cache.all_free and .ctx_size > 0'
echo "ok ($workload)"
