#!/usr/bin/env bash
# Session 45, call 3: two changes built here (sm_90a) and measured against HEAD's figures.
#   1. The Hopper prefill's shared-memory base computed once (session 26's lead 2;
#      prefill_sm90_kernel.cuh, the plain head_dim 128 kernels: -1,032 SASS instructions over
#      the eight, the key loops 6-11 shorter a tile, no spills): the prefill suite (quick),
#      then rounds alternating the carried HEAD bench (base) and the new one on the 1x16384
#      d128 and the paged-prefix (page 16) rows.
#   2. Uniform lengths promised by the plan (DecodePlan::uniform_lengths; flash-attn's int
#      cache_seqlens): the decode suite (quick; UniformLengthsPromise is new), then the C++
#      bench's "uniform" rows beside the default on the acceptance shapes (page 16).
#   run: LIMIT=450 bash scripts/sessions/gpu_session45_both.sh [CARRY] 2>&1 | tee $OUT/summary.txt
#   carry: CARRY (build-carry-s45e: every binary, built here: decode at a1ff1e5, prefill at 5234a8a,
#          the base prefill bench at 85b65d9; or build-carry-s45d:
#          gpu_prefill_bench_base alone, HEAD's bench, the rest built there), .deps/private
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh
source scripts/device_carried.sh
carried_bins "${1:-build-carry-s45d}" "$B"
trap pack_out EXIT
LIMIT=${LIMIT:-450}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
# A carry of all five binaries (build-carry-s45e: a_gpu_prefill_bench_base, b_gpu_prefill_bench,
# c_kernels_prefill_gpu_test, d_kernels_decode_gpu_test, e_gpu_decode_bench, one xz stream with
# a 512 MiB dictionary) needs no build here; else build the new ones.
if [ -x "$B/b_gpu_prefill_bench" ]; then
  mkdir -p build-gpu/tests/kernels build-gpu/bench
  ln -sf "$B/a_gpu_prefill_bench_base" "$B/gpu_prefill_bench_base"
  ln -sf "$B/b_gpu_prefill_bench" build-gpu/bench/gpu_prefill_bench
  ln -sf "$B/c_kernels_prefill_gpu_test" build-gpu/tests/kernels/kernels_prefill_gpu_test
  ln -sf "$B/d_kernels_decode_gpu_test" build-gpu/tests/kernels/kernels_decode_gpu_test
  ln -sf "$B/e_gpu_decode_bench" build-gpu/bench/gpu_decode_bench
  ldd "$B/d_kernels_decode_gpu_test" | grep "not found"
else
  step build
  kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench kernels_decode_gpu_test gpu_decode_bench
  echo "built at ${SECONDS}s"
fi
step "decode suite (quick)"
run_logged decode_test timeout 100 env KVATTN_GPU_TEST_QUICK=1 build-gpu/tests/kernels/kernels_decode_gpu_test
step "decode: uniform lengths"
room $((LIMIT - 60)) "decode uniform rows" && {
  timeout 60 build-gpu/bench/gpu_decode_bench --only decode --quick --variants uniform \
    > "$OUT/uniform.txt" 2>&1
  echo "uniform rc=$?"
  grep -E '"op": "decode (default|uniform)"' "$OUT/uniform.txt" |
    grep -E '64x4096 32/8 page|256x1024 16/8 page|8x32768 32/8 page|96x4096|256x1024 8/8' |
    sed -E 's/.*"op": "([^"]+)".*"shape": "([^"]*)".*"us": ([0-9.]+).*"note": "([^"]*)".*/\1 | \2 | \3 (\4)/'
}
step "prefill suite (quick)"
room $((LIMIT - 100)) "prefill suite" &&
  run_logged prefill_test timeout 100 env KVATTN_GPU_TEST_QUICK=1 build-gpu/tests/kernels/kernels_prefill_gpu_test
step "prefill A/B rounds"
for round in 1 2 3; do
  for side in base new; do
    room $((LIMIT - 25)) "round $round $side" || break 2
    bin=build-gpu/bench/gpu_prefill_bench
    [ "$side" = base ] && bin=$B/gpu_prefill_bench_base
    for shape in 16384 page16; do
      timeout 60 "$bin" --only "$shape" > "$OUT/ab_${side}_${shape}_$round.txt" 2>&1
      grep -E '"variant":"default"' "$OUT/ab_${side}_${shape}_$round.txt" |
        sed -E "s/.*\"shape\":\"([^\"]*)\".*\"tflops\":([0-9.]+),\"graph_ms\":[0-9.]+,\"graph_tflops\":([0-9.]+).*/round $round $side | \1 | flushed \2 | graph \3/"
    done
  done
done
echo "end ${SECONDS}s"
