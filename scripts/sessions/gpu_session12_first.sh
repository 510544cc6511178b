#!/usr/bin/env bash
# The first GPU call of the session after session 11: correctness of everything session 11
# wrote without device time, in one build (Release, sm_90a, benches on). Each part is off by
# default in the library (or a test-only path), so a failure here blocks only that part:
#   1. decode: the fp8 small-kernel / swapped-stream rule (fd88cd8): the fp8 tests and
#      `gpu_decode_bench --only fp8` (1x8192 d128/d64 and 4x8192 now in it);
#   2. GGUF quant types on the GPU (engine_gguf_quant_types_gpu_test, issue 19);
#   3. cascade decode + merge_attention_states (scripts/gpu_cascade.sh's tests; issue 20);
#   4. the engine row kernels' rewrite (KVATTN_LEGACY_KERNELS=0; scripts/gpu_engine_kernels.sh
#      tests) and the fused decode GEMVs (KVATTN_FUSED_GEMV=1; scripts/gpu_fused_gemv.sh tests;
#      its engine_cuda_gemv_gpu_test decides whether Gemv::env_mode's default goes back to
#      kAuto: the rewritten plain GEMV is off by default until then).
# Then, in later calls: `bash scripts/gpu_engine_kernels.sh bench`, `bash scripts/gpu_fused_gemv.sh
# bench`, `SKIP_BUILD=1 bash scripts/gpu_cascade.sh` (its bench part), `bash
# scripts/gpu_ncu_single_stream.sh`, and the peers (scripts/sessions/gpu_session10_peers.sh style, with
# .peers/whl from scripts/device_deps.sh for FlashInfer).
#   run: bash scripts/sessions/gpu_session12_first.sh > $OUT/summary.txt 2>&1; tail -n 150 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step "build (every target of this call and of the follow-up scripts)"
kvattn_gpu_build ON kernels_decode_gpu_test gpu_decode_bench engine_gguf_quant_types_gpu_test \
  attention_attention_cascade_gpu_test kernels_merge_attention_gpu_test \
  engine_cascade_decode_gpu_test engine_row_kernels_gpu_test engine_fused_rope_kv_gpu_test \
  engine_fused_kernels_gpu_test engine_pdl_gpu_test gpu_engine_kernels_bench \
  engine_cuda_gemv_fused_gpu_test engine_fused_gemv_engine_gpu_test engine_cuda_gemv_gpu_test \
  gpu_fused_gemv_bench kvattn_cli

step "1. decode fp8: tests, then the small-batch rule's timing"
run_test decode_fp8 200 build-gpu/tests/kernels/kernels_decode_gpu_test --gtest_filter='*Fp8*'
timeout 120 build-gpu/bench/gpu_decode_bench --only fp8 --reps 30 >"$OUT/fp8_bench.log" 2>&1
echo "bench rc=$?"
grep '^{' "$OUT/fp8_bench.log" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if "us" in r and r["op"] in ("decode default", "decode noswap", "decode swap nosmall"):
        print("%-28s %-20s %8.2f us  %s" % (r["shape"], r["op"], r["us"], r.get("note", "")[:34]))'

step "2. GGUF quantization types on the GPU"
run_test gguf_quant 300 build-gpu/tests/engine/engine_gguf_quant_types_gpu_test
grep -E "gpu vs cpu float32" "$OUT/gguf_quant.log" | head -10

step "3. cascade decode and merge_attention_states"
SKIP_BUILD=1 CASCADE_TESTS_ONLY=1 bash scripts/gpu_cascade.sh

step "4a. engine row kernels (rewrite vs legacy)"
bash scripts/gpu_engine_kernels.sh tests 2>&1 | grep -vE "^\[[0-9]+/[0-9]+\]"
step "4b. fused decode GEMVs"
bash scripts/gpu_fused_gemv.sh tests 2>&1 | grep -vE "^\[[0-9]+/[0-9]+\]"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
