#!/bin/sh
# kvattn's command-line manners (issue 21), with stdout and stderr captured apart:
#   cli_manners_test.sh KVATTN MODEL CASE
# CASE: stdout_text | threads_invalid | sizes_invalid | threads_warning | zero_tokens | json |
# special | seeds_and_sizing | prompt_file. Exits 77 (ctest: skipped) when MODEL (the default GGUF) or jq is missing;
# threads_invalid and sizes_invalid need no model (the options are refused before one is
# looked for).
set -u
kvattn=$1 model=$2 case=$3
[ -f "$model" ] || [ "$case" = threads_invalid ] || [ "$case" = sizes_invalid ] || { echo "skip: $model not fetched (scripts/fetch_model.sh)"; exit 77; }
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
out=$dir/out err=$dir/err
prompt="What is the capital of France?"

fail() { echo "FAIL ($case): $*"; echo "--- stdout:"; cat "$out"; echo "--- stderr:"; cat "$err"; exit 1; }
run() { "$kvattn" "$@" >"$out" 2>"$err"; }
has() { grep -Eq -- "$2" "$1"; }

case $case in
stdout_text)  # the text alone on stdout; loading and statistics on stderr, with and without -q
  for q in "" -q; do
    run generate $q --model "$model" -n 16 "$prompt" || fail "exit $?"
    has "$out" Paris || fail "no Paris on stdout"
    [ "$(wc -l <"$out")" -eq 1 ] || fail "stdout is not one line of text"
    has "$out" "tok/s|loading|prompt tokens" && fail "statistics on stdout"
    has "$err" "^prefill: [0-9.]+ tok/s, decode: [0-9.]+ tok/s$" || fail "no statistics on stderr"
    [ -z "$q" ] && { has "$err" "loading .*100%" || fail "no loading progress on stderr"; }
  done ;;
threads_invalid)  # rejected before loading, naming the option and the range
  for t in -1 -8 abc 1.5 100000; do
    run generate --model "$model" --threads "$t" -n 1 hi && fail "--threads $t accepted"
    [ -s "$out" ] && fail "--threads $t wrote stdout"
    has "$err" "^--threads: must be 0 \(automatic\) or a thread count in 1\.\.1024 .*but is '$t'" ||
      fail "--threads $t: no clear error"
  done
  run bench --model "$model" --threads -1 && fail "bench --threads -1 accepted"
  has "$err" "^--threads: must be 0" || fail "bench: no clear error"
  run serve --model "$model" --threads -1 && fail "serve --threads -1 accepted"
  has "$err" "^--threads: must be 0" || fail "serve: no clear error" ;;
sizes_invalid)  # the engine's sizes, checked alike by generate, bench and serve, before loading
  bad() {  # bad COMMAND FLAG VALUE EXPECTED-ERROR-REGEX
    extra=; [ "$1" = generate ] && extra=hi
    run "$1" --model "$model" "$2" "$3" $extra && fail "$1 $2 $3 accepted"
    [ -s "$out" ] && fail "$1 $2 $3 wrote stdout"
    has "$err" "^$2: $4" || fail "$1 $2 $3: no clear error"
    has "$err" "loaded|loading" && fail "$1 $2 $3: a model was loaded first"
    return 0
  }
  for cmd in generate bench serve; do
    bad $cmd --kv-cache-mb -5 "Value -5 not in range 0 to"
    bad $cmd --kv-cache-mb 99999999999 "Value 99999999999 not in range 0 to"
    bad $cmd --ctx-size -1 "must be a whole number >= 0 but is '-1'"
    bad $cmd --tensor-parallel 0 "Value 0 not in range 1 to 64"
    bad $cmd --weights q3 "q3 not in"
  done
  for cmd in bench serve; do
    for f in 0 1.5 -0.1 abc; do
      bad $cmd --gpu-memory-utilization $f "must be in \\(0, 1\\] but is '$f'"
    done
    bad $cmd --max-num-seqs 0 "must be a whole number >= 1 but is '0'"
    bad $cmd --max-num-seqs 99999999999999999999 "must be a whole number >= 1"
    bad $cmd --max-num-batched-tokens -3 "must be a whole number >= 1 but is '-3'"
  done
  bad bench --num-seqs 1.5 "must be a whole number >= 0 but is '1.5'" ;;
threads_warning)  # more threads than cores: a warning on stderr, and the run goes on
  cores=$(nproc)
  run generate -q --model "$model" --threads $((cores + 1)) -n 4 "$prompt" || fail "exit $?"
  has "$err" "warning: --threads $((cores + 1)) is more than the $cores cores" || fail "no warning"
  has "$out" warning && fail "warning on stdout"
  has "$out" "The capital" || fail "no text"
  run generate -q --model "$model" --threads 0 -n 1 "$prompt" || fail "exit $?"
  has "$err" warning && fail "warning with --threads 0 (automatic)" ;;
zero_tokens)  # -n 0: nothing on stdout, exit 0, stderr says 0 tokens
  command -v jq >/dev/null || { echo "skip: no jq"; exit 77; }
  run generate --model "$model" -n 0 "hi" || fail "exit $?"
  [ -s "$out" ] && fail "-n 0 wrote stdout"
  has "$err" "decode: 0 tokens" || fail "stderr does not say 0 tokens"
  has "$err" "0\.0 tok/s" && fail "0.0 tok/s on stderr"
  run generate --model "$model" -n 0 --json "$dir/j" "a" "b" || fail "exit $?"
  [ -s "$out" ] && fail "-n 0 with two prompts wrote stdout"
  [ "$(jq -c '[.token_ids, .text, .finish_reason]' "$dir/j" | sort -u)" = '[[],"","length"]' ] ||
    fail "-n 0 json: $(cat "$dir/j")"
  run generate --model "$model" -n -1 hi && fail "-n -1 accepted"
  has "$err" "^--max-tokens: Value -1 not in range 0 to" || fail "-n -1: no clear error" ;;
json)  # one object per prompt; its ids agree with the text, the prompt and a one-prompt run
  command -v jq >/dev/null || { echo "skip: no jq"; exit 77; }
  run generate -q --model "$model" -n 8 --json "$dir/j" "$prompt" "Say hello." || fail "exit $?"
  [ "$(wc -l <"$dir/j")" -eq 2 ] || fail "not two JSON lines: $(cat "$dir/j")"
  # The first answer ends at <|im_end|> (id 2, not among its ids); the second runs to -n.
  jq -e -s 'length == 2 and .[0].index == 0 and .[1].index == 1
            and .[1].prompt == "Say hello."
            and .[0].finish_reason == "stop" and .[0].stop_token == 2
            and .[0].text == "The capital of France is Paris."
            and (.[0].token_ids | length) < 8 and (.[0].token_ids | index(2)) == null
            and .[1].finish_reason == "length" and .[1].stop_token == null
            and (.[1].token_ids | length) == 8
            and all(.[]; (.prompt_token_ids | length) > 10
                     and .prompt_token_ids[0] == 1
                     and .timings.first_token_s > 0
                     and .timings.finished_s >= .timings.first_token_s
                     and .timings.decode_tokens_per_s > 0)' "$dir/j" >/dev/null ||
    fail "$(cat "$dir/j")"
  has "$out" "^=== \[1\] Say hello\.$" || fail "no header of the second prompt"
  # The same prompt alone: the same token ids (greedy), and stdout carries exactly its text.
  run generate -q --model "$model" -n 8 --json "$dir/one" "$prompt" || fail "exit $?"
  [ "$(jq -c .token_ids "$dir/one")" = "$(jq -c -s '.[0].token_ids' "$dir/j")" ] ||
    fail "token ids differ between one and two prompts"
  [ "$(jq -r .text "$dir/one")" = "$(cat "$out")" ] || fail "stdout is not the JSON's text"
  # --json -: the objects on stdout instead of the text.
  run generate -q --model "$model" -n 2 --json - "$prompt" || fail "exit $?"
  jq -e '.token_ids | length == 2' "$out" >/dev/null || fail "--json - is not JSON on stdout"
  jq -e 'has("logprobs") | not' "$out" >/dev/null || fail "logprobs without --logprobs"
  # --logprobs 3: one entry per token, the greedy token first among its 3 alternatives.
  run generate -q --model "$model" -n 4 --ignore-eos --logprobs 3 --json - "$prompt" ||
    fail "exit $?"
  jq -e '(.logprobs | length) == (.token_ids | length) and
         ([.logprobs[] | (.top | length) == 3 and .logprob <= 0] | all) and
         ([.token_ids, [.logprobs[].top[0].token_id]] | .[0] == .[1])' "$out" >/dev/null ||
    fail "--logprobs: $(cat "$out")" ;;
special)  # --special shows end-of-text tokens that --ignore-eos otherwise drops silently
  command -v jq >/dev/null || { echo "skip: no jq"; exit 77; }
  run generate -q --model "$model" -n 12 --ignore-eos --special --json "$dir/j" "$prompt" ||
    fail "exit $?"
  has "$out" "Paris\.<\|im_end\|>" || fail "no <|im_end|> after Paris"
  [ "$(jq -r .text "$dir/j")" = "$(cat "$out")" ] || fail "stdout is not the JSON's text"
  with=$(jq -c .token_ids "$dir/j")
  run generate -q --model "$model" -n 12 --ignore-eos --json "$dir/j" "$prompt" || fail "exit $?"
  has "$out" "<\|im_" && fail "special tokens printed without --special"
  has "$out" Paris || fail "no Paris"
  [ "$(jq -c .token_ids "$dir/j")" = "$with" ] || fail "--special changed the token ids"
  run generate -q --model "$model" -n 12 --special "$prompt" || fail "exit $?"
  has "$out" "<\|im_end\|>" && fail "the stop token was printed" ;;
seeds_and_sizing)  # session 49's probe: --seed -1, tiny temperatures, sizes not taken as given
  command -v jq >/dev/null || { echo "skip: no jq"; exit 77; }
  run generate -q --model "$model" -n 6 --json "$dir/g" "$prompt" || fail "exit $?"
  greedy=$(jq -c .token_ids "$dir/g")
  for t in 1e-40 1e-30 0.000001; do  # below vLLM's 1e-5: greedy (1 / 1e-40 overflows float)
    run generate -q --model "$model" -n 6 -t "$t" --seed 3 --json "$dir/t" "$prompt" || fail "exit $?"
    [ "$(jq -c .token_ids "$dir/t")" = "$greedy" ] || fail "-t $t is not greedy: $(cat "$dir/t")"
  done
  # A flag given twice takes its last value (llama.cpp, argparse); --stop and prompts add up.
  run generate -q --model "$model" -n 2 -n 5 --ignore-eos --json - "$prompt" || fail "exit $?"
  jq -e '.token_ids | length == 5' "$out" >/dev/null || fail "-n 2 -n 5 is not 5: $(cat "$out")"
  run generate -q --model "$model" -n 2 --json - "$prompt" "Say hello." || fail "exit $?"
  [ "$(wc -l <"$out")" -eq 2 ] || fail "two prompts are not two objects"
  for s in -2 18446744073709551616 1.5 abc; do
    run generate --model "$model" -n 1 --seed "$s" hi && fail "--seed $s accepted"
    has "$err" "^--seed: --seed must be -1 \(random\) or an integer in \[0, 2\^64\) but is '$s'" ||
      fail "--seed $s: no clear error"
  done
  run generate -q --model "$model" -n 2 --seed -1 -t 1 "$prompt" || fail "--seed -1: exit $?"
  run generate --model "$model" -n 1 --ctx-size 100000 "$prompt" || fail "exit $?"
  has "$err" "warning: --ctx-size 100000 is more than the model's context; using 8192" ||
    fail "no --ctx-size warning"
  has "$out" warning && fail "warning on stdout"
  run generate --model "$model" -n 1 --kv-cache-mb 1 --no-chat "Hi" || fail "exit $?"
  has "$err" "warning: --kv-cache-mb 1 holds [0-9]+ tokens, fewer than one sequence's context" ||
    fail "no --kv-cache-mb warning"
  run bench --model "$model" --scale 0.01 --json /nonexistent/dir/b.json && fail "bad --json accepted"
  has "$err" "cannot write --json file '/nonexistent/dir/b.json'" || fail "bench --json: no clear error"
  has "$err" "Throughput" && fail "bench ran before refusing --json"
  for f in "--top-p 0" "--min-p 2" "--presence-penalty 5" "--repeat-penalty 0"; do
    flag=${f% *}
    run generate --model "$model" -n 1 $f hi && fail "$f accepted"
    has "$err" "^kvattn: error: generate: $flag must be" || fail "$f: the error does not name $flag"
    has "$err" "loaded|loading" && fail "$f: checked only after the model loaded"
  done
  run bench --model "$model" --scale 0 && fail "--scale 0 accepted"
  has "$err" "^--scale: --scale must be a number > 0 but is 0$" || fail "--scale 0: no clear error" ;;
prompt_file)  # -f/--file (llama.cpp's): a prompt from a file or stdin, one trailing newline off
  command -v jq >/dev/null || { echo "skip: no jq"; exit 77; }
  run generate -q --model "$model" -n 6 --json "$dir/pos" "$prompt" || fail "exit $?"
  printf '%s\n' "$prompt" >"$dir/p.txt"
  run generate -q --model "$model" -n 6 --json "$dir/file" -f "$dir/p.txt" || fail "exit $?"
  [ "$(jq -c '[.prompt_token_ids, .token_ids]' "$dir/file")" = \
    "$(jq -c '[.prompt_token_ids, .token_ids]' "$dir/pos")" ] || fail "-f differs: $(cat "$dir/file")"
  has "$out" "The capital" || fail "no text from -f"
  printf '%s\r\n' "$prompt" | "$kvattn" generate -q --model "$model" -n 6 --json "$dir/in" \
    --file - >"$out" 2>"$err" || fail "--file -: exit $?"
  [ "$(jq -c .prompt_token_ids "$dir/in")" = "$(jq -c .prompt_token_ids "$dir/pos")" ] ||
    fail "--file - differs: $(cat "$dir/in")"
  # Positional prompts first, then the files in order.
  printf 'Say hello.' >"$dir/h.txt"
  run generate -q --model "$model" -n 2 --json - -f "$dir/h.txt" "$prompt" -f "$dir/p.txt" ||
    fail "exit $?"
  jq -e -s --arg p "$prompt" 'map(.prompt) == [$p, "Say hello.", $p]' "$out" >/dev/null ||
    fail "prompt order: $(cat "$out")"
  # Refused before the model loads, naming the file.
  run generate --model "$model" -n 1 -f "$dir/missing.txt" && fail "a missing file accepted"
  has "$err" "generate: --file: cannot read '$dir/missing.txt'" || fail "missing file: no clear error"
  has "$err" "\.cpp:[0-9]+\)" && fail "a source location in a user's error"
  KVATTN_ERROR_LOCATIONS=1 "$kvattn" generate --model "$model" -n 1 -f "$dir/missing.txt" \
    >"$out" 2>"$err" && fail "a missing file accepted"
  has "$err" "cannot read '$dir/missing.txt' \(generate_command\.cpp:[0-9]+\)$" ||
    fail "KVATTN_ERROR_LOCATIONS=1 keeps no location"
  has "$err" "loaded|loading" && fail "missing file: checked only after loading"
  run generate --model "$model" -n 1 -f "$dir" && fail "a directory accepted"
  has "$err" "is a directory, not a prompt file" || fail "directory: no clear error"
  run generate --model "$model" -n 1 && fail "no prompt accepted"
  has "$err" "generate: no prompt: give prompt text or --file FILE" || fail "no prompt: no clear error"
  echo hi | "$kvattn" generate --model "$model" -n 1 -f - -f - >"$out" 2>"$err" &&
    fail "stdin twice accepted"
  has "$err" "more than once" || fail "stdin twice: no clear error" ;;
*) echo "unknown case $case"; exit 2 ;;
esac
echo "ok ($case)"
