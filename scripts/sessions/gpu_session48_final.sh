#!/usr/bin/env bash
# Session 48's last call. On an H200 (the acceptance card, none since session 46): the
# acceptance figures first (scripts/gpu_acceptance.sh: decode peers with fp8 / bf16 after the
# permute diet and the XOR addresses, the engine, prefill peers if room), then the check
# below if room. On any other card only the check: the decode and prefill GPU tests as split
# into files by concern this session (carried, built here at sm_90a): each whole suite
# (quick), the same test list as before the split, racecheck + memcheck on moved cases.
#   run: LIMIT=570 bash scripts/sessions/gpu_session48_final.sh 2>&1 | tee $OUT/summary.txt
#   (PARTS and ACC_LIMIT, if set, go to gpu_acceptance.sh: its parts and its own limit)
#   carry: build-carry-s48b, .deps/private, .peers
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh  # B, carried_bins, run_logged, both_sanitizers, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-570}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
if [[ $gpu == *H200* ]]; then
  echo "== an H200: the acceptance figures first"
  mkdir -p "$OUT/acceptance"
  OUT="$OUT/acceptance" LIMIT=${ACC_LIMIT:-$((LIMIT - 70))} bash scripts/gpu_acceptance.sh 2>&1 |
    tee "$OUT/acceptance/summary.txt"
fi
room $((LIMIT - 60)) "the split decode test" || exit 0
source scripts/device_env.sh      # step
carried_bins build-carry-s48b "$B"
# split_check NAME LIST_BEFORE SANITIZER_FILTER: the carried binary's test list (Suite.Name,
# sorted) against the list of the file before the split, its suite (quick), the sanitizers.
split_check() {
  local bin="$B/kernels_$1_gpu_test"
  step "the split $1 test: list, suite (quick), sanitizers"
  "$bin" --gtest_list_tests 2>&1 |
    awk '/^[A-Za-z]/ {suite = $1} /^  [A-Za-z]/ {print suite $1}' | LC_ALL=C sort > "$OUT/$1_list.txt"
  # One collation on both sides (session 49's run: the device's locale ordered them otherwise).
  if diff <(LC_ALL=C sort "$2") "$OUT/$1_list.txt" > "$OUT/$1_list.diff"; then
    echo "$1 test list: identical to before the split ($(wc -l < "$OUT/$1_list.txt") tests)"
  else
    echo "$1 test list DIFFERS from before the split:"; head -n 20 "$OUT/$1_list.diff"
  fi
  run_logged "$1_test_split" timeout 220 env KVATTN_GPU_TEST_QUICK=1 "$bin"
  room $((LIMIT - 40)) "$1 sanitizers" && both_sanitizers "$1" "$bin" "$3"
}
split_check decode build-carry-s48b/test_list_before.txt \
  'DecodeGpu.TmaCopyIssue:DecodeGpu.Fp8CodesReadExactly'
[ -x "$B/kernels_prefill_gpu_test" ] && room $((LIMIT - 90)) "the split prefill test" &&
  split_check prefill build-carry-s48b/prefill_list_before.txt "${PREFILL_SANITIZE:-PrefillGpu.TileEdges}"
echo "end ${SECONDS}s"
