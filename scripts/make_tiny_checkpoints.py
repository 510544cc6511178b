#!/usr/bin/env python3
"""Writes the tiny random checkpoints the engine tests compare against HF transformers.

For each of a random Llama and a random Qwen3 (hidden 64, 2 layers, 4 query / 2 KV heads,
head_dim 64 -- the smallest the CUDA attention kernels take --, vocab 320) it saves, under
tests/data/tiny_<arch>/:
  config.json, model.safetensors   -- what kvattn's load_hf_model reads (float32, no tokenizer)
  expected.json                    -- fixed token-id prompts, HF's greedy continuation of each,
                                      and HF's float32 logits at every step of that continuation.

The model families of issue 19 (tiny_llama3: rope_scaling llama3 + tied embeddings; tiny_qwen2:
q/k/v biases + YaRN; tiny_mistral: sliding window 8) are smaller (2 query / 1 KV head of 64,
vocab 256), stored as bf16 (the float32 model that makes the logits holds the same bf16-exact
values), and also written as GGUF with gguf-py under llama.cpp's tensor names and metadata
keys (model.gguf: Q/K rows permuted for the llama architecture as convert_hf_to_gguf.py does,
Llama 3's scaling as the rope_freqs tensor). tiny_gemma2 / tiny_gemma3 (Gemma2ForCausalLM,
Gemma3ForCausalLM: hidden 32, 2 query / 1 KV head of 256, GeGLU, sandwich norms stored as w
(GGUF: w + 1, as convert_hf_to_gguf.py writes them), tied embeddings, window 8 on the sliding
layers; gemma2 with attention and final logit soft-capping and query_pre_attn_scalar 64,
gemma3 with q/k norms, a local RoPE base and linear scaling on its global layer) follow the
same pattern. tiny_gemma (GemmaForCausalLM, Gemma 1: hidden 32, 4 query / 2 KV heads of 64 --
head_dim 64 where hidden / heads is 8, as gemma-7b's 256 is not 3072 / 16 --, GeGLU, the
embedding scale, (1 + w) norms without the sandwich ones, tied, no window or soft-cap; its
config.json says hidden_act "gelu" as the released Gemma 1 configs do; GGUF arch "gemma" as
convert_hf_to_gguf.py's GemmaModel writes it: norms + 1, no lm_head, no rope keys) too.
The tiny_llama checkpoint also gets the logits of
HF with linear and dynamic-NTK rope scaling (expected_rope_{linear,dynamic}.json; the config
changes are in the file).

Run it in an environment with torch, transformers and gguf (CPU is enough):
  python3 scripts/make_tiny_checkpoints.py [--out tests/data] [--families llama3 qwen2 ...]
The weights are drawn with a fixed seed and scaled so activations are O(1) (HF's default
init, std 0.02, would make every logit nearly equal and the comparison meaningless).
"""
import argparse
import json
import math
import os

import numpy as np
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


# ---- issue 19 families ----------------------------------------------------------------------

SMALL_VOCAB = 256


def small_kwargs():
    return dict(vocab_size=SMALL_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=1,
                eos_token_id=2, attn_implementation="eager", torch_dtype=torch.float32)


def build_family(name):
    from transformers import (MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)
    if name == "llama3":
        # Llama 3.2-style: tied embeddings, rope_theta 500000 and llama3 scaling whose
        # original context (64) is short enough that the blend covers the mid frequencies.
        cfg = LlamaConfig(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                           "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64},
                          tie_word_embeddings=True, **small_kwargs())
        model, seed = LlamaForCausalLM(cfg), 111
    elif name == "qwen2":
        # Qwen2.5-style: q/k/v biases, YaRN with a short original context (32).
        cfg = Qwen2Config(rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0,
                                           "factor": 4.0,
                                           "original_max_position_embeddings": 32},
                          tie_word_embeddings=False,
                          **dict(small_kwargs(), max_position_embeddings=128))
        model, seed = Qwen2ForCausalLM(cfg), 222
    elif name == "mistral":
        cfg = MistralConfig(rope_theta=1000000.0, sliding_window=8, tie_word_embeddings=False,
                            **small_kwargs())
        model, seed = MistralForCausalLM(cfg), 333
    else:
        raise ValueError(name)
    gen = torch.Generator().manual_seed(seed)
    tied = cfg.tie_word_embeddings
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
                if pname == "model.norm.weight" and tied:
                    p.mul_(0.3)
            elif pname.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))  # large enough to matter
            elif p.dim() == 2 and "embed_tokens" in pname:
                p.copy_(torch.randn(p.shape, generator=gen) * (0.1 if tied else 1.0))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            p.copy_(p.to(torch.bfloat16).float())  # bf16-exact: the files are bf16
    model.eval()
    return model


def build_gemma(name):
    """Gemma 2 / Gemma 3 (text): the values are chosen to matter at these sizes: a window of 8,
    query_pre_attn_scalar 64 (not head_dim), soft caps near the score and logit ranges."""
    common = dict(vocab_size=SMALL_VOCAB, hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                  head_dim=256, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  bos_token_id=2, eos_token_id=1, pad_token_id=0, query_pre_attn_scalar=64,
                  sliding_window=8, tie_word_embeddings=True,
                  hidden_activation="gelu_pytorch_tanh", attn_implementation="eager",
                  torch_dtype=torch.float32)
    if name == "gemma":
        from transformers import GemmaConfig, GemmaForCausalLM
        g1 = {k: v for k, v in common.items()
              if k not in ("query_pre_attn_scalar", "sliding_window", "hidden_activation")}
        g1.update(num_attention_heads=4, num_key_value_heads=2, head_dim=64)
        cfg = GemmaConfig(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                          hidden_act="gelu_pytorch_tanh", **g1)
        model, seed = GemmaForCausalLM(cfg), 666
    elif name == "gemma2":
        from transformers import Gemma2Config, Gemma2ForCausalLM
        cfg = Gemma2Config(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                           attn_logit_softcapping=5.0, final_logit_softcapping=2.0, **common)
        model, seed = Gemma2ForCausalLM(cfg), 444
    elif name == "gemma3":
        from transformers import Gemma3TextConfig, Gemma3ForCausalLM
        cfg = Gemma3TextConfig(
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default",
                                                   "rope_theta": 10000.0}},
            layer_types=["sliding_attention", "full_attention"], **common)
        model, seed = Gemma3ForCausalLM(cfg), 555
    else:
        raise ValueError(name)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):  # Gemma's RMSNorm scales by (1 + w)
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
                if pname == "model.norm.weight":
                    p.copy_(3.5 * (1 + p) - 1)  # tied lm_head: logits O(1), soft-capped
            elif p.dim() == 2 and "embed_tokens" in pname:
                # Small: scaled by sqrt(hidden) on input, it would otherwise dominate the
                # residual stream and greedy would repeat the last token.
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            p.copy_(p.to(torch.bfloat16).float())
    model.eval()
    return model


def add_gguf_tensor(w, gname, t, quant=True):
    """Adds tensor t to GGUFWriter w as gname: matrices as BF16 bytes ([rows, 2 cols] from
    gguf.quants.quantize) when quant, everything else as float32."""
    import gguf  # as the writers: only the GGUF steps need the package
    if quant and t.dim() == 2:
        a = t.detach().float().numpy()
        w.add_tensor(gname, gguf.quants.quantize(a, gguf.GGMLQuantizationType.BF16),
                     raw_dtype=gguf.GGMLQuantizationType.BF16)
    else:
        w.add_tensor(gname, t.detach().float().numpy())


def write_gguf_gemma(name, model, out):
    """convert_hf_to_gguf.py's GemmaModel / Gemma2Model / Gemma3Model: norms + 1, no lm_head
    (tied), NeoX RoPE (no Q/K permutation). Gemma 1 ("gemma"): GemmaModel's keys only (no rope,
    window or scale key: llama.cpp's gemma graph scales by 1/sqrt(key_length)). Two keys
    llama.cpp's gemma2/gemma3 loaders do not read, written because this file is not a real Gemma
    size: attention.scale (llama.cpp derives it from the layer count, 27B or not) and, for
    gemma3, attention.sliding_window_pattern (llama.cpp assumes every 6th layer global)."""
    import gguf
    cfg = model.config
    w = gguf.GGUFWriter(os.path.join(out, "model.gguf"), name)
    w.add_name(f"tiny {name}")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    if name == "gemma":
        pass
    elif name == "gemma2":
        w.add_sliding_window(cfg.sliding_window)
        w.add_attention_scale(cfg.query_pre_attn_scalar ** -0.5)
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    else:
        w.add_sliding_window(cfg.sliding_window)
        w.add_attention_scale(cfg.query_pre_attn_scalar ** -0.5)
        full = cfg.rope_parameters["full_attention"]
        w.add_rope_freq_base(full["rope_theta"])
        if full.get("rope_type") == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(full["factor"])
        w.add_sliding_window_pattern([t == "sliding_attention" for t in cfg.layer_types])

    def put(gname, t):
        add_gguf_tensor(w, gname, t)

    sd = model.state_dict()
    names = {"input_layernorm.weight": "attn_norm.weight",
             "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
             "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.o_proj.weight": "attn_output.weight",
             "self_attn.q_norm.weight": "attn_q_norm.weight",
             "self_attn.k_norm.weight": "attn_k_norm.weight",
             # Gemma 1's post_attention_layernorm is the MLP's input norm (Llama's ffn_norm).
             "post_attention_layernorm.weight": ("ffn_norm.weight" if name == "gemma"
                                                 else "post_attention_norm.weight"),
             "pre_feedforward_layernorm.weight": "ffn_norm.weight",
             "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight"}
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", sd["model.norm.weight"] + 1)
    for i in range(cfg.num_hidden_layers):
        for hf, g in names.items():
            key = f"model.layers.{i}.{hf}"
            if key in sd:
                t = sd[key]
                put(f"blk.{i}.{g}", t + 1 if hf.endswith("norm.weight") else t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_gemma(name, root):
    model = build_gemma(name)
    out = os.path.join(root, f"tiny_{name}")
    os.makedirs(out, exist_ok=True)
    write_config(model, out)
    if name == "gemma":  # the released Gemma 1 configs' legacy value (transformers: tanh GELU)
        cfg_path = os.path.join(out, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["hidden_act"] = "gelu"
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
    write_safetensors_bf16(model, out)
    write_gguf_gemma(name, model, out)
    write_expected(model, os.path.join(out, "expected.json"), SMALL_VOCAB, 43)
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters())} parameters")


def write_config(model, out):
    model.config.save_pretrained(out)
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.setdefault("rope_theta", cfg.get("rope_parameters", {}).get("rope_theta"))
    if cfg["rope_theta"] is None:  # per-layer-type rope_parameters (Gemma 3)
        del cfg["rope_theta"]
    cfg.pop("_sliding_window_pattern", None)  # private; layer_types says it
    cfg["dtype"] = "bfloat16"
    cfg["architectures"] = [type(model).__name__]
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    gen_cfg = os.path.join(out, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)


def write_safetensors_bf16(model, out):
    from safetensors.torch import save_file
    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    path = os.path.join(out, "model.safetensors")
    save_file(sd, path, metadata={"format": "pt"})
    os.chmod(path, 0o644)


def llama3_rope_factors(cfg):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors: Llama 3 scaling as factors."""
    rp = cfg.rope_parameters
    base, dim = rp["rope_theta"], cfg.head_dim
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def permute_qk(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute (rotate-half rows -> interleaved pairs)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_gguf(name, model, out):
    import gguf
    cfg = model.config
    arch = "qwen2" if name == "qwen2" else "llama"
    w = gguf.GGUFWriter(os.path.join(out, "model.gguf"), arch)
    w.add_name(f"tiny {name}")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    rp = cfg.rope_parameters
    if rp.get("rope_type") == "yarn":  # convert_hf_to_gguf.py's Qwen2Model
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp["factor"])
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    if getattr(cfg, "sliding_window", None):
        w.add_sliding_window(cfg.sliding_window)

    def put(gname, t, quant=True):
        add_gguf_tensor(w, gname, t, quant)

    if rp.get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(cfg))
    sd = model.state_dict()
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        put("output.weight", sd["lm_head.weight"])
    names = {"input_layernorm.weight": "attn_norm.weight",
             "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
             "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.o_proj.weight": "attn_output.weight",
             "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
             "self_attn.v_proj.bias": "attn_v.bias",
             "post_attention_layernorm.weight": "ffn_norm.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight"}
    for i in range(cfg.num_hidden_layers):
        for hf, g in names.items():
            key = f"model.layers.{i}.{hf}"
            if key not in sd:
                continue
            t = sd[key]
            if arch == "llama" and hf == "self_attn.q_proj.weight":
                t = torch.from_numpy(permute_qk(t.numpy(), cfg.num_attention_heads,
                                                cfg.num_attention_heads))
            elif arch == "llama" and hf == "self_attn.k_proj.weight":
                t = torch.from_numpy(permute_qk(t.numpy(), cfg.num_attention_heads,
                                                cfg.num_key_value_heads))
            put(f"blk.{i}.{g}", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def greedy_cached(model, prompt):
    """Greedy with HF's KV cache (one forward per new token): what dynamic-NTK RoPE needs,
    since its frequencies follow the length at the time each key was computed."""
    ids = list(prompt)
    steps = []
    past = None
    inp = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            o = model(inp, past_key_values=past, use_cache=True)
            past = o.past_key_values
            logits = o.logits[0, -1].float()
            steps.append([float(x) for x in logits])
            ids.append(int(torch.argmax(logits)))
            inp = torch.tensor([[ids[-1]]])
    return ids[len(prompt):], steps


def write_expected(model, path, vocab, seed, greedy=greedy_with_logits, round_logits=True):
    import transformers
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for n in PROMPT_LENGTHS:
        prompt = torch.randint(3, vocab, (n,), generator=gen).tolist()
        tokens, logits = greedy(model, prompt)
        if round_logits:  # 8 significant digits: float32 precision, half the text
            logits = [[float(f"{x:.8g}") for x in row] for row in logits]
        cases.append({"prompt": prompt, "greedy": tokens, "logits": logits})
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "new_tokens": NEW_TOKENS, "cases": cases}
    with open(path, "w") as f:
        json.dump(meta, f, separators=(",", ":"))


def make_family(name, root):
    model = build_family(name)
    out = os.path.join(root, f"tiny_{name}")
    os.makedirs(out, exist_ok=True)
    write_config(model, out)
    write_safetensors_bf16(model, out)
    write_gguf(name, model, out)
    write_expected(model, os.path.join(out, "expected.json"), SMALL_VOCAB, 42)
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters())} parameters")


PHI3_ORIGINAL = 32  # the tiny Phi-3's original context: prompts of 1 and 7 tokens stay below it


def build_phi3(name="phi3"):
    """Phi-3 (Phi3ForCausalLM): fused qkv_proj / gate_up_proj, LongRoPE short / long factors over
    an original context of 32 in 128 positions (HF picks the long ones per forward pass when
    the sequence is longer than 32: here the 33- and 70-token prompts), a window of 16.
    "phi4mini": Phi-4-mini's shape instead: partial rotary embeddings (half of each head's 64
    dims rotate), tied embeddings, no window."""
    from transformers import Phi3Config, Phi3ForCausalLM
    partial = 0.5 if name == "phi4mini" else 1.0
    gen = torch.Generator().manual_seed(444 if name == "phi3" else 555)
    half = int(64 * partial) // 2  # head_dim 64
    short = (1.0 + 0.1 * torch.rand(half, generator=gen)).tolist()
    long = torch.linspace(1.0, 12.0, half).mul(1.0 + 0.05 * torch.rand(half, generator=gen)).tolist()
    tied = name == "phi4mini"
    cfg = Phi3Config(vocab_size=SMALL_VOCAB, hidden_size=128, intermediate_size=96,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                     max_position_embeddings=128, original_max_position_embeddings=PHI3_ORIGINAL,
                     rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long,
                                   "rope_theta": 10000.0},
                     partial_rotary_factor=partial,
                     sliding_window=None if tied else 16, rms_norm_eps=1e-6, bos_token_id=1,
                     eos_token_id=2, pad_token_id=0, tie_word_embeddings=tied,
                     attn_implementation="eager", torch_dtype=torch.float32)
    model = Phi3ForCausalLM(cfg)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 2 and "embed_tokens" in pname:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            p.copy_(p.to(torch.bfloat16).float())
    model.eval()
    return model


def write_gguf_phi3(model, out):
    """convert_hf_to_gguf.py's Phi3MiniModel: fused attn_qkv and ffn_up (gate rows, then up)
    as the checkpoint has them, rope_factors_{long,short} tensors, the LongRoPE attention factor
    and original context as rope.scaling.* keys, the window as attention.sliding_window."""
    import gguf
    cfg = model.config
    rp = cfg.rope_parameters
    w = gguf.GGUFWriter(os.path.join(out, "model.gguf"), "phi3")
    w.add_name("tiny " + os.path.basename(out)[len("tiny_"):])
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(int(cfg.hidden_size // cfg.num_attention_heads
                                   * rp.get("partial_rotary_factor", 1.0)))
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_rope_scaling_orig_ctx_len(cfg.original_max_position_embeddings)
    scale = cfg.max_position_embeddings / cfg.original_max_position_embeddings
    w.add_rope_scaling_attn_factors(
        max(math.sqrt(1 + math.log(scale) / math.log(cfg.original_max_position_embeddings)), 1.0))
    if cfg.sliding_window:
        w.add_sliding_window(cfg.sliding_window)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)

    def put(gname, t):
        add_gguf_tensor(w, gname, t)

    w.add_tensor("rope_factors_long.weight", np.array(rp["long_factor"], dtype=np.float32))
    w.add_tensor("rope_factors_short.weight", np.array(rp["short_factor"], dtype=np.float32))
    sd = model.state_dict()
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        put("output.weight", sd["lm_head.weight"])
    names = {"input_layernorm.weight": "attn_norm.weight",
             "self_attn.qkv_proj.weight": "attn_qkv.weight",
             "self_attn.o_proj.weight": "attn_output.weight",
             "post_attention_layernorm.weight": "ffn_norm.weight",
             "mlp.gate_up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for i in range(cfg.num_hidden_layers):
        for hf, g in names.items():
            put(f"blk.{i}.{g}", sd[f"model.layers.{i}.{hf}"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_phi3(root, name="phi3"):
    model = build_phi3(name)
    out = os.path.join(root, "tiny_" + name)
    os.makedirs(out, exist_ok=True)
    write_config(model, out)
    write_safetensors_bf16(model, out)
    write_gguf_phi3(model, out)
    write_expected(model, os.path.join(out, "expected.json"), SMALL_VOCAB, 44 if name == "phi3" else 45)
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters())} parameters")


def make_llama_rope_variants(root):
    """HF's logits of tiny_llama's weights under linear and dynamic-NTK scaling."""
    src = os.path.join(root, "tiny_llama")
    variants = {
        "linear": ({"rope_type": "linear", "factor": 4.0}, {}, greedy_with_logits),
        # max_position_embeddings 16: the 33- and 70-token prompts grow the base.
        "dynamic": ({"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 16},
                    greedy_cached),
    }
    for kind, (rope, extra, greedy) in variants.items():
        cfg = LlamaConfig.from_pretrained(src)
        cfg.rope_parameters = dict(rope, rope_theta=cfg.rope_parameters["rope_theta"])
        for k, v in extra.items():
            setattr(cfg, k, v)
        cfg._attn_implementation = "eager"
        model = LlamaForCausalLM.from_pretrained(src, config=cfg, torch_dtype=torch.float32)
        model.eval()
        path = os.path.join(src, f"expected_rope_{kind}.json")
        write_expected(model, path, VOCAB, 7, greedy)
        with open(path) as f:
            meta = json.load(f)
        meta["config"] = dict(extra, rope_parameters=cfg.rope_parameters)
        with open(path, "w") as f:
            json.dump(meta, f, separators=(",", ":"))
        print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    ap.add_argument("--families", nargs="*",
                    default=["llama", "qwen3", "llama3", "qwen2", "mistral", "llama_rope",
                             "gemma", "gemma2", "gemma3", "phi3", "phi4mini"])
    args = ap.parse_args()
    torch.manual_seed(0)
    for name in args.families:
        if name in ("llama3", "qwen2", "mistral"):
            make_family(name, args.out)
        elif name in ("gemma", "gemma2", "gemma3"):
            make_gemma(name, args.out)
        elif name in ("phi3", "phi4mini"):
            make_phi3(args.out, name)
        elif name == "llama_rope":
            make_llama_rope_variants(args.out)
        elif name in ("llama", "qwen3"):
            make_base(name, args.out)
        else:
            raise SystemExit(f"unknown family {name}")


def make_base(arch, root):
    model = build(arch)
    out = os.path.join(root, f"tiny_{arch}")
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
