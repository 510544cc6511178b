# Prefill under sustained load: is kvattn's gap to FA3 in the peers' harness a matter of
# cycles or of energy? For each shape, input distribution (torch.randn, as the harness, or
# uniform [-1, 1], as the C++ bench) and kernel (kvattn, FlashInfer's FA3 backend, cuDNN), the
# call's CUDA graph (20 calls) is replayed:
#   burst      after 1.5 s idle, one replay (a cool, unthrottled GPU: what a short benchmark sees);
#   sustained  back to back for SUSTAIN_S seconds (what triton's do_bench over 300 ms sees, and
#              more), timed by events over the last two thirds;
# while nvidia-smi samples the SM clock and the board power every 50 ms. A kernel that needs
# more energy per FLOP runs at a lower clock under the power cap: sustained TFLOP/s / clock
# tells cycles from energy.
#   PYTHONUNBUFFERED=1 OUT=... python3 bench/prefill_power_probe.py   (FlashInfer optional)
import datetime
import json
import os
import subprocess
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kvattn
from cuda_graph_calls import capture_calls  # bench/, beside this script

try:
    import flashinfer
except Exception:  # noqa: BLE001
    flashinfer = None

dev = "cuda"
OUT = os.environ.get("OUT", "/tmp")
SUSTAIN_S = float(os.environ.get("SUSTAIN_S", "3"))
torch.manual_seed(7)
ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)

smi_path = os.path.join(OUT, "power_probe_smi.csv")
smi = subprocess.Popen(
    ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
     "--format=csv,noheader,nounits", "-lms", "50", "-i", "0"],
    stdout=open(smi_path, "w"), stderr=subprocess.STDOUT)


def samples_between(t0, t1):
    """(clock MHz, power W) means of the nvidia-smi samples taken in [t0, t1] (time.time())."""
    clocks, powers = [], []
    with open(smi_path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 4:
                continue
            try:
                ts = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                clk, pw = float(parts[1]), float(parts[2])
            except ValueError:
                continue
            if t0 <= ts <= t1:
                clocks.append(clk)
                powers.append(pw)
    if not clocks:
        return float("nan"), float("nan"), 0
    return sum(clocks) / len(clocks), sum(powers) / len(powers), len(clocks)


def probe(fn, tflop, calls=20):
    g = capture_calls(fn, calls)
    torch.cuda.synchronize()
    r = {}
    time.sleep(1.5)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    r["burst_ms"] = a.elapsed_time(b) / calls
    # Warm-up third, then the timed two thirds; a sync every 5 replays (~100 calls) keeps the
    # host's clock in step with the GPU's work at a cost of microseconds.
    t_start = time.time()
    while time.time() - t_start < SUSTAIN_S / 3:
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
    t_mark = time.time()
    a.record()
    n = 0
    while time.time() - t_mark < 2 * SUSTAIN_S / 3:
        for _ in range(5):
            g.replay()
        n += 5
        torch.cuda.synchronize()
    b.record()
    b.synchronize()
    t_end = time.time()
    r["sustained_ms"] = a.elapsed_time(b) / (n * calls)
    r["clock_mhz"], r["power_w"], r["samples"] = samples_between(t_mark, t_end)
    r["burst_tflops"] = tflop / (r["burst_ms"] * 1e-3)
    r["sustained_tflops"] = tflop / (r["sustained_ms"] * 1e-3)
    # TFLOP per (clock GHz x second): work per SM cycle of the whole GPU, whatever the clock.
    r["tflop_per_ghz"] = r["sustained_tflops"] / (r["clock_mhz"] / 1000.0)
    return r


rows = []
for (B, L, Hq, Hkv, D) in [(8, 2048, 32, 8, 128), (1, 16384, 32, 8, 128), (8, 2048, 32, 8, 64)]:
    for dist in ("randn", "uniform"):
        gen = (lambda *s: torch.randn(*s, dtype=torch.bfloat16, device=dev)) if dist == "randn" else \
            (lambda *s: torch.rand(*s, dtype=torch.float32, device=dev).mul_(2).sub_(1).to(torch.bfloat16))
        q = gen(B * L, Hq, D)
        k = gen(B * L, Hkv, D)
        v = gen(B * L, Hkv, D)
        cu = torch.arange(0, B + 1, dtype=torch.int32, device=dev) * L
        tflop = 4 * B * Hq * D * L * (L + 1) / 2 / 1e12
        case = f"causal {B}x{L} {Hq}/{Hkv} d{D} {dist}"
        fns = {"kvattn": lambda: kvattn.flash_attn_varlen_func(q, k, v, cu, cu, L, L, causal=True)}
        if flashinfer is not None:
            w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="fa3")
            w.plan(cu, cu, Hq, Hkv, D, causal=True, q_data_type=torch.bfloat16)
            fns["fa3"] = lambda: w.run(q, k, v)
        qb = q.view(B, L, Hq, D).transpose(1, 2)
        kb = k.view(B, L, Hkv, D).transpose(1, 2)
        vb = v.view(B, L, Hkv, D).transpose(1, 2)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, enable_gqa=True)

        fns["cudnn"] = cudnn
        for name, fn in fns.items():
            try:
                r = probe(fn, tflop)
            except Exception as e:  # noqa: BLE001
                r = {"error": repr(e)[-300:]}
            r.update(case=case, kernel=name)
            rows.append(r)
            print(json.dumps(r), flush=True)
        json.dump(rows, open(os.path.join(OUT, "prefill_power_probe.json"), "w"), indent=1)
        del q, k, v, qb, kb, vb, fns

smi.terminate()
print("\n=== sustained TFLOP/s, SM clock MHz, power W, TFLOP/s per GHz; burst TFLOP/s ===")
for r in rows:
    if "error" in r:
        print(f"{r['case']:36s} {r['kernel']:7s} ERROR {r['error']}")
        continue
    print(f"{r['case']:36s} {r['kernel']:7s} sustained {r['sustained_tflops']:6.1f} at {r['clock_mhz']:6.0f} MHz "
          f"{r['power_w']:5.0f} W ({r['samples']} samples), {r['tflop_per_ghz']:6.1f} /GHz; burst {r['burst_tflops']:6.1f}")
