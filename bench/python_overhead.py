#!/usr/bin/env python3
"""Host cost per call of kvattn.flash_attn_with_kvcache (decode) against the C++ entry.

Runs the C++ baseline (bench/decode_call_overhead.cu, built as
<build>/bench/decode_call_overhead) and then times, on the same shape, nano-vLLM's decode call

    flash_attn_with_kvcache(q.unsqueeze(1), k_cache, v_cache, cache_seqlens=context_lens,
                            block_table=block_tables, softmax_scale=scale, causal=True)

from Python: calls in chunks (100 by default, 2000 in all) with a device sync between chunks
outside the timing, so the launch queue never fills and only host time is measured. The
acceptance (issue 7) is "Python adds <= 5 us over C++", judged on the call itself (q already
[batch, 1, heads, dim]); the nano-vLLM line adds the layer's q.unsqueeze(1). Both sides run
the same shape on the same (legacy default) stream and plan the split-KV decode per call; the
C++ entry writes into a preallocated out, while the Python call allocates its output
(flash-attn's API returns a new tensor), so the allocation is part of what Python adds. Also shown, to explain the figure: the
bare extension call (kvattn._C.kvcache), the call with a preallocated out=, and
torch.empty_like(q) alone (the output allocation flash-attn's API implies).

    python3 bench/python_overhead.py [--cpp build-gpu/bench/decode_call_overhead]
Writes $OUT/python_overhead.json when OUT is set.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def time_calls(fn, calls, chunk, sync):
    for _ in range(50):
        fn()
    sync()
    per_call = []
    done = 0
    perf = time.perf_counter_ns
    while done < calls:
        n = min(chunk, calls - done)
        t0 = perf()
        for _ in range(n):
            fn()
        t1 = perf()
        sync()
        per_call.append((t1 - t0) / n / 1000.0)
        done += n
    per_call.sort()
    return {"median_us": per_call[len(per_call) // 2], "min_us": per_call[0],
            "mean_us": statistics.fmean(per_call)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpp", default=None, help="the C++ baseline binary")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--chunk", type=int, default=100)
    p.add_argument("--limit-us", type=float, default=5.0)
    args = p.parse_args()

    import torch

    import kvattn

    if not (torch.cuda.is_available() and kvattn.cuda_available()):
        print("python_overhead: no CUDA device (or kvattn without CUDA), skipped")
        return 0

    shape = ["--batch", str(args.batch), "--heads", str(args.heads), "--kv-heads", str(args.kv_heads),
             "--head-dim", str(args.head_dim), "--block-size", str(args.block_size),
             "--context", str(args.context), "--calls", str(args.calls), "--chunk", str(args.chunk)]
    cpp = None
    cpp_bin = args.cpp
    if cpp_bin is None:
        for cand in ("build-gpu/bench/decode_call_overhead", "build/bench/decode_call_overhead"):
            if os.path.exists(cand):
                cpp_bin = cand
                break
    if cpp_bin and os.path.exists(cpp_bin):
        r = subprocess.run([cpp_bin] + shape, capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                cpp = json.loads(line)
    else:
        print("python_overhead: C++ baseline %r not found; Python figures only" % cpp_bin)

    dev = "cuda"
    dtype = torch.bfloat16
    b, h, hk, d, bs = args.batch, args.heads, args.kv_heads, args.head_dim, args.block_size
    per_seq = -(-args.context // bs)
    q = torch.randn(b, h, d, dtype=dtype, device=dev)  # [tokens, heads, dim] as the layer has it
    k_cache = torch.randn(b * per_seq, bs, hk, d, dtype=dtype, device=dev)
    v_cache = torch.randn_like(k_cache)
    block_tables = torch.arange(b * per_seq, dtype=torch.int32, device=dev).view(b, per_seq)
    context_lens = torch.full((b,), args.context, dtype=torch.int32, device=dev)
    scale = d ** -0.5
    q4 = q.unsqueeze(1)
    out = torch.empty_like(q4)
    fa = kvattn.flash_attn_with_kvcache
    raw = kvattn._C.kvcache
    sync = torch.cuda.synchronize

    variants = {}
    with torch.inference_mode():
        variants["flash_attn_with_kvcache (nano-vLLM call)"] = time_calls(
            lambda: fa(q.unsqueeze(1), k_cache, v_cache, cache_seqlens=context_lens,
                       block_table=block_tables, softmax_scale=scale, causal=True),
            args.calls, args.chunk, sync)
        variants["flash_attn_with_kvcache, q4 given"] = time_calls(
            lambda: fa(q4, k_cache, v_cache, cache_seqlens=context_lens, block_table=block_tables,
                       softmax_scale=scale, causal=True),
            args.calls, args.chunk, sync)
        variants["flash_attn_with_kvcache, out= given"] = time_calls(
            lambda: fa(q4, k_cache, v_cache, cache_seqlens=context_lens, block_table=block_tables,
                       softmax_scale=scale, causal=True, out=out),
            args.calls, args.chunk, sync)
        variants["kvattn._C.kvcache (bare extension)"] = time_calls(
            lambda: raw(q4, k_cache, v_cache, block_tables, context_lens, scale, True, 0, None, False),
            args.calls, args.chunk, sync)
        # The binding's own host cost: the same call with the library call skipped
        # (_C._set_dry_run: import, checks, output allocation, plan, stream; no launch).
        if hasattr(kvattn._C, "_set_dry_run"):
            kvattn._C._set_dry_run(True)
            try:
                variants["kvattn._C.kvcache, no launch (binding only)"] = time_calls(
                    lambda: raw(q4, k_cache, v_cache, block_tables, context_lens, scale, True, 0,
                                None, False),
                    args.calls, args.chunk, sync)
                variants["kvattn._C.kvcache, no launch, out= given"] = time_calls(
                    lambda: raw(q4, k_cache, v_cache, block_tables, context_lens, scale, True, 0,
                                out, False),
                    args.calls, args.chunk, sync)
            finally:
                kvattn._C._set_dry_run(False)
        variants["torch.empty_like(q4) alone"] = time_calls(
            lambda: torch.empty_like(q4), args.calls, args.chunk, sync)
        variants["q.unsqueeze(1) alone"] = time_calls(
            lambda: q.unsqueeze(1), args.calls, args.chunk, sync)

    # the result must be right too: one call against torch's SDPA on the dense keys
    with torch.inference_mode():
        o = fa(q4, k_cache, v_cache, cache_seqlens=context_lens, block_table=block_tables,
               softmax_scale=scale, causal=True)
        kd = k_cache.view(b, per_seq * bs, hk, d)[:, : args.context].transpose(1, 2).float()
        vd = v_cache.view(b, per_seq * bs, hk, d)[:, : args.context].transpose(1, 2).float()
        kd = kd.repeat_interleave(h // hk, dim=1)
        vd = vd.repeat_interleave(h // hk, dim=1)
        ref = torch.nn.functional.scaled_dot_product_attention(q4.transpose(1, 2).float(), kd, vd,
                                                               scale=scale)
        err = ((o.transpose(1, 2).float() - ref).norm() / ref.norm()).item()

    print()
    print("python_overhead: batch %d, heads %d/%d, head_dim %d, block %d, context %d, bf16 "
          "(torch %s); rel err vs SDPA %.2e" % (b, h, hk, d, bs, args.context, torch.__version__, err))
    print("  %-44s %9s %9s %9s" % ("variant", "median", "min", "mean"))
    if cpp:
        print("  %-44s %7.2fus %7.2fus %9s" % ("C++ decode_attention (library plan)",
                                                cpp["library_plan_us"], cpp["library_plan_min_us"], ""))
        print("  %-44s %7.2fus %7.2fus %9s" % ("C++ decode_attention (own plan)",
                                                cpp["own_plan_us"], cpp["own_plan_min_us"], ""))
    for name, s in variants.items():
        print("  %-44s %7.2fus %7.2fus %7.2fus" % (name, s["median_us"], s["min_us"], s["mean_us"]))
    result = {"shape": vars(args), "torch": torch.__version__, "rel_err_vs_sdpa": err,
              "cpp": cpp, "python": variants,
              "dlpack_c_exchange_api": bool(kvattn._C.inspect(q)[6])}
    verdict = 0
    if cpp:
        py = variants["flash_attn_with_kvcache, q4 given"]["median_us"]
        added = py - cpp["library_plan_us"]
        result["python_added_us"] = added
        result["limit_us"] = args.limit_us
        result["pass"] = added <= args.limit_us
        print("  Python adds %.2f us per call over the C++ entry (limit %.1f us): %s"
              % (added, args.limit_us, "PASS" if added <= args.limit_us else "FAIL"))
        verdict = 0 if added <= args.limit_us else 1
    if err > 1e-2:
        print("  WRONG RESULT: rel err %.3g vs SDPA" % err)
        verdict = 1
    out_dir = os.environ.get("OUT")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "python_overhead.json"), "w") as f:
            json.dump(result, f, indent=1)
    return verdict


if __name__ == "__main__":
    sys.exit(main())
