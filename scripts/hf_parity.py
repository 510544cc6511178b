#!/usr/bin/env python3
"""HF-parity oracle for the GPU machine: a random model of the Qwen3-0.6B shape in bf16.

Writes to --out:
  config.json, model.safetensors   the random checkpoint (bf16), for kvattn's load_hf_model
  expected.json                    8 token-id prompts and HF's greedy 32 new tokens for each
  logits.safetensors               "logits": float32 [8, 32, vocab], HF's logits at every step

Then run the GPU test that compares kvattn with it:
  KVATTN_HF_PARITY_DIR=<out> ./build/tests/engine/engine_hf_parity_gpu_test
It reports per prompt how many of the 32 tokens match, the logit margin HF had at the first
divergence (a bf16 near-tie explains it), and the relative logit error.

Weights are drawn with a fixed seed and scaled so activations are O(1) (HF's default init,
std 0.02, makes every logit nearly equal: every step would be a near-tie). The lm_head is
untied (a random tied one makes greedy repeat the last prompt token forever) and its rows
have log-normal norms (with equal norms the top-2 logits of 152k tokens are often equal in
bf16, and token equality says nothing).
"""
import argparse
import json
import math
import os

import torch
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

PROMPT_LENGTHS = [1, 5, 17, 33, 64, 100, 127, 200]
NEW_TOKENS = 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="a 2-layer, 4k-vocab smoke-test shape")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    shape = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                 num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128)
    if args.small:
        shape.update(vocab_size=4096, num_hidden_layers=2)
    cfg = Qwen3Config(**shape, max_position_embeddings=40960, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    gen = torch.Generator().manual_seed(2024)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name == "lm_head.weight":
                # Log-normal row norms: the top logits come from a few large rows and stand
                # apart by far more than a bf16 step, so exact bf16 ties become rare.
                rows = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1])
                p.copy_(rows * torch.exp(0.7 * torch.randn(p.shape[0], 1, generator=gen)))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
    model = model.to(device=args.device, dtype=torch.bfloat16).eval()
    model.save_pretrained(args.out, safe_serialization=True)
    with open(os.path.join(args.out, "config.json")) as f:
        c = json.load(f)
    c.setdefault("rope_theta", cfg.rope_theta if hasattr(cfg, "rope_theta") else 1000000.0)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)

    gen = torch.Generator().manual_seed(7)
    cases, all_logits = [], []
    with torch.no_grad():
        for n in PROMPT_LENGTHS:
            prompt = torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist()
            out = model.generate(torch.tensor([prompt], device=args.device), do_sample=False,
                                 max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                 output_logits=True, return_dict_in_generate=True,
                                 pad_token_id=0)
            tokens = out.sequences[0, n:].tolist()
            logits = torch.stack([l[0].float() for l in out.logits]).cpu()  # [32, vocab]
            cases.append({"prompt": prompt, "greedy": tokens})
            all_logits.append(logits)
            top2 = logits.topk(2, dim=-1).values
            print(f"prompt {n:4d}: min top-2 margin {float((top2[:, 0] - top2[:, 1]).min()):.4f}")
    save_file({"logits": torch.stack(all_logits).contiguous()},
              os.path.join(args.out, "logits.safetensors"))
    import transformers
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "dtype": "bfloat16", "device": args.device, "cases": cases}, f)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
