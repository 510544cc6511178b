#!/usr/bin/env bash
# The fp8 / bf16 decode ratio (issue 16: >= 1.7 at 64x4096 and 8x32768, same run) with and
# without session 47's permute diet, on whatever card comes (the question is the H200's: there
# the fp8 d128 kernel read at 0.81 of the read ceiling, 1.68-1.69 of bf16, in session 46). No
# build: build-carry-s47 holds gpu_decode_bench of 3576928 (old) and of c239d4a (new1: its
# head_dim 128 kernels are those of the diet as it landed). Three rounds, alternating.
#   run: bash scripts/sessions/gpu_fp8_ratio_ab.sh 2>&1 | tee $OUT/summary.txt
#   carry: build-carry-s47
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # OUT, step
source scripts/device_carried.sh  # B, pack_out
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$B"
[ -f build-carry-s47/gpu_decode_bench_old.xz ] && [ -f build-carry-s47/gpu_decode_bench_new1.xz ] || {
  echo "build-carry-s47 is missing: build gpu_decode_bench at 3576928 and c239d4a, strip, xz -6"
  echo "them to build-carry-s47/gpu_decode_bench_{old,new1}.xz (docs/notes/decode-next.md)"
  exit 1
}
for v in old new1; do
  xz -dc "build-carry-s47/gpu_decode_bench_$v.xz" > "$B/gpu_decode_bench_$v" && chmod +x "$B/gpu_decode_bench_$v"
done
step "fp8 rows beside their bf16 twins, old / new1, three rounds"
old="" new=""
for round in 1 2 3; do
  for v in old new1; do
    f="$OUT/ratio_${v}_r$round.txt"
    timeout 60 "$B/gpu_decode_bench_$v" --only fp8 --variants default > "$f" 2>&1
    echo "$v r$round rc=$?"
    if [ "$v" = old ]; then old="${old:+$old,}$f"; else new="${new:+$new,}$f"; fi
  done
done
python3 scripts/bench_ab_table.py "decode default" "old=$old" "new1=$new"
echo "end ${SECONDS}s"
