# Causal prefill against the Hopper peers in one process, all timed the same way (TARGETS.md):
# kvattn's Python module (flash_attn_varlen_func: the Hopper kernel on sm_90), FlashInfer's
# ragged prefill with its FA3 and FA2 backends, and cuDNN through torch SDPA. Two timings per
# call: "graph" (20 back-to-back calls captured in one CUDA graph, replayed, time / 20) and
# "flushed" (triton do_bench median, L2 flushed before each call). The bf16 GEMM ceiling
# (torch matmul 8192^3) is measured in the same run. FLOPs = 4 * visible pairs * Hq * D.
#   PYTHONUNBUFFERED=1 OUT=... python3 bench/prefill_peers_same_run.py   (FlashInfer optional)
import json
import os
import time
import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import kvattn
from cuda_graph_calls import capture_calls  # bench/, beside this script

try:
    import flashinfer
except Exception:  # noqa: BLE001
    flashinfer = None

dev = "cuda"
# FlashInfer backends to time (PREFILL_PEERS_BACKENDS=fa3 skips FA2's JIT build and runs).
BACKENDS = [b for b in os.environ.get("PREFILL_PEERS_BACKENDS", "fa3,fa2").split(",") if b]
torch.manual_seed(7)
OUT = os.environ.get("OUT", "/tmp")
rows = []
ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)


def graph_ms(fn, calls=20):
    g = capture_calls(fn, calls)
    return do_bench(lambda: g.replay(), warmup=10, rep=300, return_mode="median") / calls


def both(fn, tflop):
    r = {}
    try:
        fn()
        r["flush_ms"] = do_bench(fn, warmup=30, rep=300, return_mode="median")
        r["flush_tflops"] = tflop / (r["flush_ms"] * 1e-3)
        r["graph_ms"] = graph_ms(fn)
        r["graph_tflops"] = tflop / (r["graph_ms"] * 1e-3)
    except Exception:  # noqa: BLE001
        r["error"] = traceback.format_exc()[-300:]
    return r


a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
ceiling = 2 * 8192**3 / 1e12 / (do_bench(lambda: a @ b, warmup=20, rep=200, return_mode="median") * 1e-3)
del a, b
print(f"bf16 GEMM ceiling (torch 8192^3): {ceiling:.1f} TFLOP/s", flush=True)
print("flashinfer", getattr(flashinfer, "__version__", None), flush=True)

# head_dim 256 first (issue 18's figure: the Hopper kernel's 128 x 80 tiles), then issue 15's;
# PREFILL_PEERS_HEAD_DIMS (e.g. "128,64") keeps the rows of those head dims only.
HEAD_DIMS = {int(d) for d in os.environ.get("PREFILL_PEERS_HEAD_DIMS", "256,128,64").split(",")}
# PREFILL_PEERS_SHAPE (e.g. "1x16384") keeps the shapes whose B x L it names; PREFILL_PEERS_ROUNDS
# = N times kvattn and FlashInfer again N - 1 times after cuDNN (keys "kvattn_r2", ...), so
# that an order effect (which kernel ran first, the card's clocks) shows beside the ratio.
SHAPE = os.environ.get("PREFILL_PEERS_SHAPE", "")
ROUNDS = int(os.environ.get("PREFILL_PEERS_ROUNDS", "1"))
for (B, L, Hq, Hkv, D) in [(8, 2048, 16, 8, 256), (1, 16384, 16, 8, 256),
                           (8, 2048, 32, 8, 128), (1, 16384, 32, 8, 128), (16, 1024, 16, 8, 128),
                           (4, 4096, 9, 3, 64), (8, 2048, 32, 8, 64)]:
    if D not in HEAD_DIMS or (SHAPE and SHAPE != f"{B}x{L}"):
        continue
    t0 = time.time()
    q = torch.randn(B * L, Hq, D, dtype=torch.bfloat16, device=dev)
    k = torch.randn(B * L, Hkv, D, dtype=torch.bfloat16, device=dev)
    v = torch.randn_like(k)
    cu = torch.arange(0, B + 1, dtype=torch.int32, device=dev) * L
    tflop = 4 * B * Hq * D * L * (L + 1) / 2 / 1e12
    r = {"case": f"causal {B}x{L} {Hq}/{Hkv} d{D}", "TFLOP": tflop}
    ours = lambda: kvattn.flash_attn_varlen_func(q, k, v, cu, cu, L, L, causal=True)  # noqa: E731
    r["kvattn"] = both(ours, tflop)
    ref = ours().float()
    wrappers = {}
    if flashinfer is not None:
        for backend in BACKENDS:
            try:
                w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
                wrappers[backend] = w
                w.plan(cu, cu, Hq, Hkv, D, causal=True, q_data_type=torch.bfloat16)
                out = w.run(q, k, v)
                r["flashinfer_" + backend] = both(lambda: w.run(q, k, v), tflop)
                r["flashinfer_" + backend]["maxdiff_vs_kvattn"] = (out.float() - ref).abs().max().item()
            except Exception:  # noqa: BLE001
                tb = traceback.format_exc()
                first = [ln for ln in tb.splitlines() if "error" in ln.lower()][:4]
                r["flashinfer_" + backend] = {"error": tb[-300:], "first_errors": first}
    qb = q.view(B, L, Hq, D).transpose(1, 2)
    kb = k.view(B, L, Hkv, D).transpose(1, 2)
    vb = v.view(B, L, Hkv, D).transpose(1, 2)

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, enable_gqa=True)

    r["cuDNN"] = both(cudnn, tflop)
    try:
        r["cuDNN"]["maxdiff_vs_kvattn"] = (cudnn().transpose(1, 2).reshape(B * L, Hq, D).float() - ref).abs().max().item()
    except Exception:  # noqa: BLE001
        pass
    for rnd in range(2, ROUNDS + 1):
        r[f"kvattn_r{rnd}"] = both(ours, tflop)
        for backend, w in wrappers.items():
            if "error" not in r.get("flashinfer_" + backend, {"error": 1}):
                r[f"flashinfer_{backend}_r{rnd}"] = both(lambda w=w: w.run(q, k, v), tflop)
    r["wall_s"] = time.time() - t0
    rows.append(r)
    print(json.dumps(r), flush=True)
    json.dump({"ceiling_tflops": ceiling, "rows": rows}, open(os.path.join(OUT, "prefill_peers_same_run.json"), "w"), indent=1)

print(f"\n=== prefill, same run: TFLOP/s graph / flushed (bf16 GEMM ceiling {ceiling:.0f}) ===")
for r in rows:
    parts = []
    best = 0.0
    keys = ["kvattn", "cuDNN", "flashinfer_fa3", "flashinfer_fa2"]
    keys += [k for k in r if "_r" in k and k.split("_r")[-1].isdigit()]
    for key in keys:
        x = r.get(key)
        if x is None:
            continue
        if "error" in x:
            parts.append(f"{key} ERR")
            continue
        parts.append(f"{key} {x['graph_tflops']:.0f}/{x['flush_tflops']:.0f}")
        if key != "kvattn" and not key.startswith("kvattn_r"):
            best = max(best, x["graph_tflops"])
    ours = r["kvattn"].get("graph_tflops", float("nan"))
    print(f"{r['case']:28s} " + "  ".join(parts) + f"  | kvattn / best peer (graph) {ours / best if best else float('nan'):.2f}")
