#!/usr/bin/env python3
"""HF transformers throughput on the GPU machine: the peer kvattn's engine is compared with.

Qwen3-0.6B shape, bf16, attn_implementation="sdpa", greedy, every sequence generating exactly
its new tokens (min_new_tokens = max_new_tokens, so no early stop). Cases, as in
../shared/TARGETS.md ("End to end"):
  B=256, 256+128     the row the acceptance compares against (always run)
  B=64, 512+128      and B=1, 128+128 (skipped with --quick)
  nano               (--nano) nano-vllm's workload: 256 sequences, input and output lengths
                     uniform in [100, 1024] (seed 0, random.randint as nano-vllm's bench.py).
                     HF generate runs one batch (left padding) until the longest output is done;
                     only each sequence's own output tokens count as useful.
Throughput = useful output tokens / wall time of generate (after a warm-up generate of the
same batch shape with 4 new tokens), CUDA-synchronized.

Weights: --model DIR (a checkpoint from scripts/hf_parity.py --out DIR) or, without it, random
weights made in place on the GPU (std 0.02 init; for throughput the values do not matter).
Prints one line per case and writes JSON to --json (default $OUT/hf_bench.json).
About 40 s on an H200 without --nano (model load included), about 2 more minutes with it.
"""
import argparse
import json
import os
import random
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

SHAPE = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
             num_attention_heads=16, num_key_value_heads=8, head_dim=128,
             max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
             tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)


def load(model_dir, device):
    if model_dir:
        m = Qwen3ForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16,
                                             attn_implementation="sdpa")
    else:
        cfg = Qwen3Config(**SHAPE, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
        torch.set_default_dtype(torch.bfloat16)
        with torch.device(device):
            m = Qwen3ForCausalLM(cfg)
        torch.set_default_dtype(torch.float32)
    return m.to(device=device, dtype=torch.bfloat16).eval()


def generate(model, prompts, new_tokens, device):
    """prompts: list of token-id lists (left-padded into one batch)."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             pad_token_id=0)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    assert out.shape[1] == width + new_tokens, out.shape
    return dt


def case(model, name, prompts, new_tokens, useful, device, rows):
    generate(model, prompts, 4, device)  # warm-up: same batch shape, few steps
    dt = generate(model, prompts, new_tokens, device)
    r = {"name": name, "batch": len(prompts), "new_tokens": new_tokens,
         "useful_output_tokens": useful, "seconds": dt, "output_tok_per_s": useful / dt}
    rows.append(r)
    print(f"HF sdpa {name}: {useful} output tokens in {dt:.2f} s = {useful / dt:,.0f} tok/s",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="", help="HF checkpoint dir (else random weights)")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "/tmp"), "hf_bench.json"))
    ap.add_argument("--quick", action="store_true", help="only B=256, 256+128")
    ap.add_argument("--nano", action="store_true", help="also nano-vllm's workload")
    args = ap.parse_args()
    device = "cuda"
    t0 = time.perf_counter()
    model = load(args.model, device)
    vocab = model.config.vocab_size
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, model ready in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    gen = torch.Generator().manual_seed(0)

    def rand_prompts(b, n):
        return torch.randint(3, vocab, (b, n), generator=gen).tolist()

    rows = []
    cases = [(256, 256, 128)] if args.quick else [(256, 256, 128), (64, 512, 128), (1, 128, 128)]
    for b, n, new in cases:
        case(model, f"B={b}, {n}+{new}", rand_prompts(b, n), new, b * new, device, rows)
    if args.nano:
        random.seed(0)
        num_seqs, max_in, max_out = 256, 1024, 1024
        prompts = [[random.randint(0, 10000) for _ in range(random.randint(100, max_in))]
                   for _ in range(num_seqs)]
        outs = [random.randint(100, max_out) for _ in range(num_seqs)]
        case(model, "nano-vllm workload (256 seqs, in/out U[100,1024])", prompts, max(outs),
             sum(outs), device, rows)
    result = {"peer": "hf_transformers_sdpa", "torch": torch.__version__,
              "transformers": __import__("transformers").__version__,
              "device": torch.cuda.get_device_name(), "dtype": "bfloat16",
              "weights": args.model or "random (in place)", "cases": rows}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
