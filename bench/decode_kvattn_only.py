# kvattn's paged decode alone on issue 16's shapes, bf16 and fp8 caches, timed by CUDA-graph
# replay of 20 calls (as bench/decode_peers_same_run.py does), one line per shape: a quick
# way to compare kernel variants chosen by environment knobs (kernels/cuda/tuning.h) in one
# call, e.g. KVATTN_DECODE_STAGES=4 python3 bench/decode_kvattn_only.py
import os

import torch

import kvattn

dev = "cuda"
torch.manual_seed(7)


def graph_us(fn, reps=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / reps)
    return sorted(times)[len(times) // 2]


def case(name, lens, Hq, Hkv, D, P=16):
    B = len(lens)
    pages = [(l + P - 1) // P for l in lens]
    total, width = sum(pages), max(pages)
    kc = torch.randn(total, P, Hkv, D, dtype=torch.bfloat16, device=dev)
    vc = torch.randn_like(kc)
    perm = torch.randperm(total, device=dev).int()
    bt = torch.full((B, width), -1, dtype=torch.int32, device=dev)
    at = 0
    for b, n in enumerate(pages):
        bt[b, :n] = perm[at:at + n]
        at += n
    sl = torch.tensor(lens, dtype=torch.int32, device=dev)
    q = torch.randn(B, 1, Hq, D, dtype=torch.bfloat16, device=dev)
    ks = (kc.float().abs().amax(dim=(0, 1, 3)) / 448).contiguous()
    vs = (vc.float().abs().amax(dim=(0, 1, 3)) / 448).contiguous()
    kc8 = (kc.float() / ks.view(1, 1, -1, 1)).to(torch.float8_e4m3fn)
    vc8 = (vc.float() / vs.view(1, 1, -1, 1)).to(torch.float8_e4m3fn)
    t16 = graph_us(lambda: kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=sl, block_table=bt))
    t8 = graph_us(lambda: kvattn.flash_attn_with_kvcache(q, kc8, vc8, cache_seqlens=sl, block_table=bt,
                                                        k_scale=ks, v_scale=vs))
    gb = 2 * sum(lens) * Hkv * D * 2 / 1e9
    knobs = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("KVATTN_"))
    print(f"{knobs or 'default'} {name:10s} {Hq}/{Hkv} d{D}: "
          f"bf16 {t16:7.1f} us ({gb / t16 * 1e3:.2f} TB/s)  fp8 {t8:7.1f} us "
          f"({gb / 2 / t8 * 1e3:.2f} TB/s of fp8 bytes, {t16 / t8:.2f}x bf16)", flush=True)
    del kc, vc, kc8, vc8


for args in [("64x4096", [4096] * 64, 32, 8, 128), ("256x1024", [1024] * 256, 16, 8, 128),
             ("8x32768", [32768] * 8, 32, 8, 128), ("96x4096", [4096] * 96, 9, 3, 64),
             ("256x1024", [1024] * 256, 8, 8, 64), ("1x8192", [8192], 32, 8, 128)]:
    case(*args)
