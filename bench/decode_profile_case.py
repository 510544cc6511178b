# One paged decode shape called repeatedly through kvattn's Python module, for a profiler
# (scripts/gpu_decode_profile.sh runs it under ncu): random bf16 K/V, page 16, shuffled pages,
# uniform lengths; with --fp8 the cache holds e4m3 codes with per-KV-head scales.
#   python3 bench/decode_profile_case.py B L Hq Hkv D [--fp8] [--calls N]
import argparse

import torch

import kvattn

ap = argparse.ArgumentParser()
for name in ("B", "L", "Hq", "Hkv", "D"):
    ap.add_argument(name, type=int)
ap.add_argument("--fp8", action="store_true")
ap.add_argument("--calls", type=int, default=8)
a = ap.parse_args()

P = 16
dev = "cuda"
torch.manual_seed(5)
pages = (a.L + P - 1) // P
kc = torch.randn(a.B * pages, P, a.Hkv, a.D, dtype=torch.bfloat16, device=dev)
vc = torch.randn_like(kc)
bt = torch.randperm(a.B * pages, device=dev).int().view(a.B, pages)
sl = torch.full((a.B,), a.L, dtype=torch.int32, device=dev)
q = torch.randn(a.B, 1, a.Hq, a.D, dtype=torch.bfloat16, device=dev)
kw = {}
if a.fp8:
    ks = (kc.float().abs().amax(dim=(0, 1, 3)) / 448).contiguous()
    vs = (vc.float().abs().amax(dim=(0, 1, 3)) / 448).contiguous()
    kc = (kc.float() / ks.view(1, 1, -1, 1)).to(torch.float8_e4m3fn)
    vc = (vc.float() / vs.view(1, 1, -1, 1)).to(torch.float8_e4m3fn)
    kw = {"k_scale": ks, "v_scale": vs}
for _ in range(a.calls):
    kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=sl, block_table=bt, **kw)
torch.cuda.synchronize()
print(f"decode {a.B}x{a.L} {a.Hq}/{a.Hkv} d{a.D} {'fp8' if a.fp8 else 'bf16'}: {a.calls} calls")
