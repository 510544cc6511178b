# Paged decode against cuDNN and FlashInfer in one process on the GPU machine, every kernel
# timed the same way (TARGETS.md): CUDA-graph replay of 20 calls, and triton's do_bench with
# its L2 flush between calls. kvattn runs with a bfloat16 and with a float8_e4m3 cache (per-KV-
# head scales), and on uniform shapes with the lengths given as an int too ("kvattn_int");
# FlashInfer's paged decode (tensor cores) runs bf16 and fp8;
# cuDNN (torch SDPA) runs on a contiguous bf16 cache. Ceilings measured in the same run: a
# read-only stream (torch.sum over 4 GiB) and a copy (read + write).
#   python3 bench/decode_peers_same_run.py   (after pip-installing kvattn and FlashInfer;
#   scripts/gpu_decode_peers.sh does both). JSON to $OUT/decode_peers.json.
import json, os, time, traceback

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import kvattn
from paged_decode_inputs import paged_decode_inputs

try:
    import flashinfer
except Exception:  # the table is still useful without it
    flashinfer = None

dev = "cuda"
OUT = os.environ.get("OUT", "/tmp")
torch.manual_seed(7)
ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
rows = []


def graph_us(fn, reps=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(); fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    return do_bench(lambda: g.replay(), warmup=10, rep=300, return_mode="median") / reps * 1e3


def flush_us(fn):
    fn()
    return do_bench(fn, warmup=30, rep=300, return_mode="median") * 1e3


def both(fn):
    r = {}
    try:
        r["flush_us"] = flush_us(fn)
        r["graph_us"] = graph_us(fn)
    except Exception:
        r["error"] = traceback.format_exc()[-300:]
    return r


def ceilings():
    x = torch.empty(1 << 30, dtype=torch.float32, device=dev).uniform_()
    y = torch.empty_like(x)
    read = do_bench(lambda: x.sum(), warmup=5, rep=200, return_mode="median") * 1e-3
    copy = do_bench(lambda: y.copy_(x), warmup=5, rep=200, return_mode="median") * 1e-3
    r = {"read_TBps": x.nbytes / read / 1e12, "copy_TBps": 2 * x.nbytes / copy / 1e12}
    del x, y
    return r


def fp8_cache(c, scale):
    return (c.float() / scale.view(1, 1, -1, 1)).clamp(-448, 448).to(torch.float8_e4m3fn)


def case(name, lens, Hq, Hkv, D, P=16):
    t0 = time.time()
    B = len(lens)
    x = paged_decode_inputs(lens, Hq, Hkv, D, P, dev)
    kc, vc, bt, sl, q = x.kc, x.vc, x.bt, x.seqlens, x.q
    ks = (kc.float().abs().amax(dim=(0, 1, 3)) / 448).contiguous()
    vs = (vc.float().abs().amax(dim=(0, 1, 3)) / 448).contiguous()
    kc8, vc8 = fp8_cache(kc, ks), fp8_cache(vc, vs)
    gb = 2 * sum(lens) * Hkv * D * 2 / 1e9
    r = {"case": f"{name} {Hq}/{Hkv} d{D} page {P}", "GB_bf16": gb}
    call16 = lambda: kvattn.flash_attn_with_kvcache(q.unsqueeze(1), kc, vc, cache_seqlens=sl,
                                                     block_table=bt)
    call8 = lambda: kvattn.flash_attn_with_kvcache(q.unsqueeze(1), kc8, vc8, cache_seqlens=sl,
                                                    block_table=bt, k_scale=ks, v_scale=vs)
    ref16 = call16()[:, 0].float()
    r["kvattn"] = both(call16)
    if len(set(lens)) == 1:
        # flash-attn's int cache_seqlens: the lengths known uniform on the host (as FlashInfer's
        # plan() and cuDNN's contiguous cache know them), so kvattn may plan for that.
        call_int = lambda: kvattn.flash_attn_with_kvcache(q.unsqueeze(1), kc, vc,
                                                          cache_seqlens=lens[0], block_table=bt)
        out_int = call_int()[:, 0].float()
        r["kvattn_int"] = both(call_int)
        r["kvattn_int"]["maxdiff_vs_kvattn_bf16"] = (out_int - ref16).abs().max().item()
    try:  # head_dim 256: no fp8 cache on CUDA (a kvattn.Error)
        out8 = call8()[:, 0].float()
        r["kvattn_fp8"] = both(call8)
        r["kvattn_fp8"]["rel_l2_vs_bf16"] = ((out8 - ref16).norm() / ref16.norm()).item()
    except Exception:
        r["kvattn_fp8"] = {"error": traceback.format_exc()[-300:]}
    if flashinfer is not None:
        # Tensor-core decode (faster than the CUDA-core one at these GQA groups: TARGETS.md).
        variants = [("flashinfer_tc1", True, False), ("flashinfer_fp8_tc1", True, True)]
        for key, tc, fp8 in variants:
            try:
                w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
                w.plan(x.indptr, x.indices, x.last, Hq, Hkv, D, P,
                       data_type=torch.float8_e4m3fn if fp8 else torch.bfloat16,
                       q_data_type=torch.bfloat16)
                if fp8:  # FlashInfer takes one scale per tensor: the largest of the heads'
                    ksc, vsc = ks.max().item(), vs.max().item()
                    k8, v8 = fp8_cache(kc, ks.max().expand_as(ks)), fp8_cache(vc, vs.max().expand_as(vs))
                    fn = lambda: w.run(q, (k8, v8), k_scale=ksc, v_scale=vsc)
                else:
                    fn = lambda: w.run(q, (kc, vc))
                out = fn().float()
                r[key] = both(fn)
                r[key]["maxdiff_vs_kvattn_bf16"] = (out - ref16).abs().max().item()
            except Exception:
                r[key] = {"error": traceback.format_exc()[-300:]}
    if len(set(lens)) == 1:  # cuDNN: contiguous cache, uniform lengths only
        L = lens[0]
        k = torch.randn(B, Hkv, L, D, dtype=torch.bfloat16, device=dev)
        v = torch.randn_like(k)
        qq = q.unsqueeze(2)

        def cud():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qq, k, v, enable_gqa=True)
        r["cuDNN"] = both(cud)
        del k, v
    r["wall_s"] = time.time() - t0
    rows.append(r)
    print(json.dumps(r), flush=True)
    json.dump({"ceilings": ceil, "rows": rows}, open(os.path.join(OUT, "decode_peers.json"), "w"),
              indent=1)


print("kvattn", getattr(kvattn, "__version__", "?"), "flashinfer",
      getattr(flashinfer, "__version__", None), torch.cuda.get_device_name(), flush=True)
ceil = ceilings()
print(json.dumps(ceil), flush=True)
g = torch.Generator().manual_seed(3)
ragged = torch.randint(1, 8193, (64,), generator=g).tolist()
# head_dim 256 first (issue 18's figure), then the issue 16 shapes; DECODE_PEERS_HEAD_DIMS
# (e.g. "128,64") keeps the rows of those head dims only.
HEAD_DIMS = {int(d) for d in os.environ.get("DECODE_PEERS_HEAD_DIMS", "256,128,64").split(",")}
# DECODE_PEERS_CASES (e.g. "1x8192"): those page-16 rows only, and no page-256 rows.
CASES = [c for c in os.environ.get("DECODE_PEERS_CASES", "").split(",") if c]
for args in [("64x4096", [4096] * 64, 16, 8, 256), ("16x8192", [8192] * 16, 16, 8, 256),
             ("64x4096", [4096] * 64, 32, 8, 128), ("256x1024", [1024] * 256, 16, 8, 128),
             ("8x32768", [32768] * 8, 32, 8, 128), ("96x4096", [4096] * 96, 9, 3, 64),
             ("256x1024", [1024] * 256, 8, 8, 64), ("1x8192", [8192], 32, 8, 128),
             ("skewed 4x16384+60x512", [16384] * 4 + [512] * 60, 32, 8, 128),
             ("ragged 64x[1,8192]", ragged, 32, 8, 128)]:
    if args[4] in HEAD_DIMS and (not CASES or args[0] in CASES):
        case(*args)
# Page 256: whether a shape's gap to cuDNN (contiguous K/V) is the page-16 layout's reads.
for args in [("64x4096", [4096] * 64, 32, 8, 128), ("96x4096", [4096] * 96, 9, 3, 64),
             ("256x1024", [1024] * 256, 8, 8, 64)]:
    if args[4] in HEAD_DIMS and not CASES:
        case(*args, P=256)

# torch's sum reads ~4.35 TB/s on the H200; loads of 1024 threads an SM or the decode's own
# cp.async ring read 4.55 (bench/micro/read_rate.cu, session 16): the sum is a floor, not the
# read ceiling.
print(f"\n=== SUMMARY: graph us / flushed us; TB/s of the bf16 bytes at graph timing; "
      f"torch.sum reads {ceil['read_TBps']:.2f} TB/s (the read ceiling is higher: "
      f"bench/micro/read_rate.cu), copy {ceil['copy_TBps']:.2f} ===")
for r in rows:
    parts = []
    for key in ("kvattn", "kvattn_int", "kvattn_fp8", "cuDNN", "flashinfer_tc0",
                "flashinfer_tc1", "flashinfer_fp8_tc1"):
        x = r.get(key)
        if x is None:
            continue
        if "error" in x:
            parts.append(f"{key} ERR")
            continue
        tb = r["GB_bf16"] / (x["graph_us"] * 1e-6) / 1e3
        parts.append(f"{key} {x['graph_us']:.1f}/{x['flush_us']:.1f} ({tb:.2f})")
    print(f"{r['case']:40s} " + "  ".join(parts))
