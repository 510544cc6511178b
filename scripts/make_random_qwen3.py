#!/usr/bin/env python3
"""A random Qwen3-shaped HF checkpoint (config.json + model.safetensors, bf16) for benchmarks:
no HF generation, weights drawn on the GPU (fast even for the 8B shape).

  python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06
  python3 scripts/make_random_qwen3.py --shape 8b --layers 8 --out /tmp/q8b   # 8B layer shape, fewer layers
  python3 scripts/make_random_qwen3.py --shape smollm2-135m --out /tmp/smol    # the default model's shape

`smollm2-135m` is a Llama checkpoint (no q/k norms, tied embeddings) of SmolLM2-135M's shape:
on CUDA the engine dequantises GGUF weights to bf16 at load, so this times the same network as
the embedded default model (models/SmolLM2-135M-Instruct.Q4_1.gguf, 98 MB: over the device
carry) without carrying it.

Weights are scaled as in scripts/hf_parity.py (1/sqrt(fan_in) projections, norms near 1), so
activations stay O(1). --layers overrides the depth (the per-layer shape is unchanged); the
config records the real depth used.
"""
import argparse
import json
import math
import os

import torch
from safetensors.torch import save_file

SHAPES = {
    "0.6b": dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                 num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128),
    "8b": dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288,
               num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128),
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         head_dim=64),
}
# What differs between the families this script writes (config keys beyond the shape, and
# whether the attention has Qwen3's per-head q/k norms).
FAMILY = {
    "qwen3": dict(config=dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                              max_position_embeddings=40960, rms_norm_eps=1e-6,
                              rope_theta=1000000.0, tie_word_embeddings=False),
                  qk_norm=True),
    "llama": dict(config=dict(architectures=["LlamaForCausalLM"], model_type="llama",
                              max_position_embeddings=8192, rms_norm_eps=1e-5,
                              rope_theta=100000.0, tie_word_embeddings=True),
                  qk_norm=False),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=SHAPES, default="0.6b")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    s = dict(SHAPES[args.shape])
    family = FAMILY["llama" if args.shape.startswith("smollm2") else "qwen3"]
    tied = family["config"]["tie_word_embeddings"]
    if args.layers > 0:
        s["num_hidden_layers"] = args.layers
    os.makedirs(args.out, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    h, d, L = s["hidden_size"], s["head_dim"], s["num_hidden_layers"]
    nh, nkv, inter, V = (s["num_attention_heads"], s["num_key_value_heads"],
                         s["intermediate_size"], s["vocab_size"])

    def proj(out, inp):
        return (torch.randn(out, inp, generator=g, device=dev) / math.sqrt(inp)).bfloat16().cpu()

    def norm(n):
        return (1.0 + 0.2 * torch.randn(n, generator=g, device=dev)).bfloat16().cpu()

    # A tied table serves as the lm_head too: unit-variance rows would give O(sqrt(h)) logits,
    # so it is drawn at the projection scale then.
    embed = proj(V, h) if tied else torch.randn(V, h, generator=g, device=dev).bfloat16().cpu()
    t = {"model.embed_tokens.weight": embed, "model.norm.weight": norm(h)}
    if not tied:
        t["lm_head.weight"] = proj(V, h)
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm(h)
        t[p + "post_attention_layernorm.weight"] = norm(h)
        if family["qk_norm"]:
            t[p + "self_attn.q_norm.weight"] = norm(d)
            t[p + "self_attn.k_norm.weight"] = norm(d)
        t[p + "self_attn.q_proj.weight"] = proj(nh * d, h)
        t[p + "self_attn.k_proj.weight"] = proj(nkv * d, h)
        t[p + "self_attn.v_proj.weight"] = proj(nkv * d, h)
        t[p + "self_attn.o_proj.weight"] = proj(h, nh * d)
        t[p + "mlp.gate_proj.weight"] = proj(inter, h)
        t[p + "mlp.up_proj.weight"] = proj(inter, h)
        t[p + "mlp.down_proj.weight"] = proj(h, inter)
    save_file(t, os.path.join(args.out, "model.safetensors"))
    cfg = dict(s, **family["config"], bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    n = sum(x.numel() for x in t.values())
    print(f"wrote {args.out}: {cfg['model_type']} {args.shape} shape, {L} layers, {n / 1e9:.2f} B parameters")


if __name__ == "__main__":
    main()
