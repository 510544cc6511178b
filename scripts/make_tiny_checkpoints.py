#!/usr/bin/env python3
"""Writes the tiny random checkpoints the engine tests compare against HF transformers.

For each of a random Llama and a random Qwen3 (hidden 64, 2 layers, 4 query / 2 KV heads,
head_dim 64 -- the smallest the CUDA attention kernels take --, vocab 320) it saves, under
tests/data/tiny_<arch>/:
  config.json, model.safetensors   -- what kvattn's load_hf_model reads (float32, no tokenizer)
  expected.json                    -- fixed token-id prompts, HF's greedy continuation of each,
                                      and HF's float32 logits at every step of that continuation.

Run it in an environment with torch and transformers (CPU is enough):
  python3 scripts/make_tiny_checkpoints.py [--out tests/data]
The weights are drawn with a fixed seed and scaled so activations are O(1) (HF's default
init, std 0.02, would make every logit nearly equal and the comparison meaningless).
"""
import argparse
import json
import math
import os

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM)

VOCAB = 320
NEW_TOKENS = 8
PROMPT_LENGTHS = [1, 7, 33, 70]


def common_kwargs():
    return dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=1,
                eos_token_id=2, attn_implementation="eager", torch_dtype=torch.float32)


def build(arch):
    if arch == "llama":
        cfg = LlamaConfig(rope_theta=10000.0, tie_word_embeddings=False, **common_kwargs())
        model = LlamaForCausalLM(cfg)
    else:
        cfg = Qwen3Config(rope_theta=1000000.0, tie_word_embeddings=True, **common_kwargs())
        model = Qwen3ForCausalLM(cfg)
    gen = torch.Generator().manual_seed(1234 if arch == "llama" else 5678)
    tied = cfg.tie_word_embeddings
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
                if name == "model.norm.weight" and tied:
                    p.mul_(0.3)  # tied lm_head: keep the logits O(1)
            elif p.dim() == 2 and "embed_tokens" in name:
                # Tied: a smaller embedding so the residual stream is not just the input token
                # (which would make greedy repeat the prompt's last token forever).
                p.copy_(torch.randn(p.shape, generator=gen) * (0.1 if tied else 1.0))
            else:  # linear [out, in]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
    model.eval()
    return model


def greedy_with_logits(model, prompt):
    ids = list(prompt)
    steps = []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            steps.append([float(x) for x in logits])
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    args = ap.parse_args()
    torch.manual_seed(0)
    for arch in ["llama", "qwen3"]:
        model = build(arch)
        out = os.path.join(args.out, f"tiny_{arch}")
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        # transformers 5 writes rope_theta only inside rope_parameters; add the 4.x top-level
        # key too so readers of either layout find it.
        cfg_path = os.path.join(out, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg.setdefault("rope_theta", cfg.get("rope_parameters", {}).get("rope_theta"))
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        gen_cfg = os.path.join(out, "generation_config.json")
        if os.path.exists(gen_cfg):
            os.remove(gen_cfg)
        gen = torch.Generator().manual_seed(42)
        cases = []
        for n in PROMPT_LENGTHS:
            prompt = torch.randint(3, VOCAB, (n,), generator=gen).tolist()
            tokens, logits = greedy_with_logits(model, prompt)
            cases.append({"prompt": prompt, "greedy": tokens, "logits": logits})
        import transformers
        meta = {"transformers": transformers.__version__, "torch": torch.__version__,
                "new_tokens": NEW_TOKENS, "cases": cases}
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(meta, f, separators=(",", ":"))
        print(f"wrote {out}: {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
