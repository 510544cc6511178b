# Shared by the Python timing harnesses (bench/*_same_run.py, prefill_power_probe.py): `calls`
# back-to-back calls of fn captured in one CUDA graph, after `warmup` calls on a side stream
# (allocator pools and lazy initialisation settle outside the capture, as torch requires).
import torch


def capture_calls(fn, calls=20, warmup=2):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g
