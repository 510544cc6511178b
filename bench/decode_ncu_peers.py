# The decode kernels of kvattn, cuDNN and FlashInfer on the same shapes, for Nsight Compute:
# each backend is called a few times unprofiled (warm-up, FlashInfer's JIT), then twice inside
# a cudaProfilerStart/Stop region, so `ncu --profile-from-start off` sees warm launches only
# (with `--cache-control none` the K/V stay in L2 as in graph replay). The launches of one
# backend sit in an NVTX range named after it.
#   ncu --profile-from-start off --cache-control none --nvtx ... python3 bench/decode_ncu_peers.py
#   DECODE_NCU_CASES="1x8192,64x4096,96x4096" (default all three); DECODE_NCU_BACKENDS="kvattn"
#   keeps those backends only (default all)
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kvattn
from paged_decode_inputs import paged_decode_inputs

try:
    import flashinfer
except Exception:
    flashinfer = None

dev = "cuda"
torch.manual_seed(7)
CASES = {
    "1x8192": ([8192], 32, 8, 128),
    "64x4096": ([4096] * 64, 32, 8, 128),
    "96x4096": ([4096] * 96, 9, 3, 64),
}
ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)


def backends(lens, Hq, Hkv, D, P=16):
    """name -> a callable running one decode of the shape (all inputs built here)."""
    x = paged_decode_inputs(lens, Hq, Hkv, D, P, dev)
    B, kc, vc, bt, sl, q = len(lens), x.kc, x.vc, x.bt, x.seqlens, x.q
    fns = {"kvattn": lambda: kvattn.flash_attn_with_kvcache(q.unsqueeze(1), kc, vc,
                                                            cache_seqlens=sl, block_table=bt)}
    if len(set(lens)) == 1:
        k = torch.randn(B, Hkv, lens[0], D, dtype=torch.bfloat16, device=dev)
        v = torch.randn_like(k)
        qq = q.unsqueeze(2)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qq, k, v, enable_gqa=True)
        fns["cudnn"] = cudnn
    if flashinfer is not None:
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
        w.plan(x.indptr, x.indices, x.last, Hq, Hkv, D, P, data_type=torch.bfloat16,
               q_data_type=torch.bfloat16)
        fns["flashinfer"] = lambda: w.run(q, (kc, vc))
    return fns


names = os.environ.get("DECODE_NCU_CASES", ",".join(CASES)).split(",")
keep = os.environ.get("DECODE_NCU_BACKENDS")
for name in names:
    lens, Hq, Hkv, D = CASES[name]
    fns = backends(lens, Hq, Hkv, D)
    for label, fn in fns.items():
        if keep and label not in keep.split(","):
            continue
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        with torch.cuda.nvtx.range(f"{name}:{label}"):
            fn()
            fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"{name} {label}: profiled 2 calls", flush=True)
    del fns
    torch.cuda.empty_cache()
