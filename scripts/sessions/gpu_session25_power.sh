#!/usr/bin/env bash
# Session 25, call 1: prefill under sustained load (bench/prefill_power_probe.py): kvattn, FA3
# (FlashInfer 0.5.3) and cuDNN, randn and uniform inputs, burst and sustained TFLOP/s with the
# SM clock and board power nvidia-smi sampled meanwhile: does kvattn's gap to FA3 in the peers'
# harness come from cycles or from energy (a lower clock under the power cap)?
#   run: bash scripts/sessions/gpu_session25_power.sh > $OUT/summary.txt 2>&1   (carry .deps .peers)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.sm,temperature.gpu --format=csv
PEERS_TIMEOUT=${PEERS_TIMEOUT:-420} kvattn_run_peers bench/prefill_power_probe.py power_probe.log 40
nvidia-smi --query-gpu=clocks_event_reasons.active,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown --format=csv 2>&1 | head -3
