# Prefill peers on the shapes of bench/gpu_prefill_bench.cu, for the same run on the GPU machine:
# torch FA2 varlen (aten._flash_attention_forward, contiguous KV) and the bf16 GEMM ceiling.
# FLOPs counted as the bench does (exact visible pairs); median of triton do_bench. Prints JSON
# lines and writes $OUT/prefill_peers.json.   PYTHONUNBUFFERED=1 python3 bench/gpu_prefill_peers.py
import json, os, torch
from triton.testing import do_bench
torch.manual_seed(0)
dev = "cuda"
rows = []
def bench(fn, rep=300):
    return do_bench(fn, warmup=50, rep=rep, return_mode="median")
def row(name, ms, flops):
    r = {"name": name, "ms": ms, "TFLOP/s": flops / (ms * 1e-3) / 1e12}
    rows.append(r); print(json.dumps(r), flush=True)
print(torch.__version__, torch.cuda.get_device_name(), flush=True)
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
row("ceiling: bf16 gemm 8192^3", bench(lambda: a @ b, rep=200), 2 * 8192**3)
del a, b
for (B, Sq, Sk, Hq, Hkv, D) in [(8, 2048, 2048, 32, 8, 128), (1, 16384, 16384, 32, 8, 128),
                                (16, 1024, 1024, 16, 8, 128), (8, 512, 4096, 32, 8, 128)]:
    try:
        q = torch.randn(B * Sq, Hq, D, dtype=torch.bfloat16, device=dev)
        k = torch.randn(B * Sk, Hkv, D, dtype=torch.bfloat16, device=dev)
        v = torch.randn_like(k)
        cq = torch.arange(0, B + 1, dtype=torch.int32, device=dev) * Sq
        ck = torch.arange(0, B + 1, dtype=torch.int32, device=dev) * Sk
        flops = 4 * B * Hq * D * (Sq * (Sk - Sq) + Sq * (Sq + 1) / 2)
        f = lambda: torch.ops.aten._flash_attention_forward(q, k, v, cq, ck, Sq, Sk, 0.0, True, False, scale=D**-0.5)
        f()
        row(f"FA2 varlen causal B={B} q={Sq} k={Sk} {Hq}/{Hkv}", bench(f, rep=300), flops)
    except Exception as e:
        rows.append({"name": f"FA2 B={B} q={Sq} k={Sk}", "error": repr(e)[:300]}); print(rows[-1], flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "prefill_peers.json"), "w"), indent=1)
