# One causal prefill shape, kvattn's Hopper kernel and FlashInfer's FA3 backend, a few calls
# each, for Nsight Compute to compare the two kernels side by side (scripts/
# gpu_prefill_profile.sh runs it under ncu). Not a timing harness: the times ncu reports are
# per kernel, with its own cache control; prefill_peers_same_run.py has the figures.
#   SHAPE="8,2048,32,8,128" python3 bench/prefill_profile_pair.py   (FlashInfer optional)
import os

import torch

import kvattn

try:
    import flashinfer
except Exception:  # noqa: BLE001
    flashinfer = None

B, L, Hq, Hkv, D = (int(x) for x in os.environ.get("SHAPE", "8,2048,32,8,128").split(","))
dev = "cuda"
torch.manual_seed(7)
q = torch.randn(B * L, Hq, D, dtype=torch.bfloat16, device=dev)
k = torch.randn(B * L, Hkv, D, dtype=torch.bfloat16, device=dev)
v = torch.randn_like(k)
cu = torch.arange(0, B + 1, dtype=torch.int32, device=dev) * L
calls = int(os.environ.get("CALLS", "3"))
for _ in range(calls):
    kvattn.flash_attn_varlen_func(q, k, v, cu, cu, L, L, causal=True)
torch.cuda.synchronize()
if flashinfer is not None:
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="fa3")
    w.plan(cu, cu, Hq, Hkv, D, causal=True, q_data_type=torch.bfloat16)
    for _ in range(calls):
        w.run(q, k, v)
    torch.cuda.synchronize()
print(f"ran {calls} calls each: kvattn{' and FlashInfer fa3' if flashinfer else ''}, "
      f"causal {B}x{L} {Hq}/{Hkv} d{D}", flush=True)
