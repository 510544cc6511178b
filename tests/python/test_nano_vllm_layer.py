"""A nano-vLLM attention layer on kvattn instead of flash-attn, against a dense reference.

The layer is nano-vLLM's `Attention` (and the seed's `EfficientAttentionLayer`) with only the
import changed: store the step's K/V first, then varlen prefill (reading the paged cache when
block tables are set, i.e. on prefix-cache hits) or decode with `flash_attn_with_kvcache`. A tiny
model runner drives it like nano-vLLM's: a warm-up prefill before the cache exists, a prefill
step, a prefix-hit prefill (including a prompt that hits completely and recomputes its last
token), then 20 decode steps with a CUDA-graph-style padded row (slot -1, context length 0).
K/V of a token are a function of its whole prefix (as in a real model), so a prefix hit is only
right if the shared blocks hold exactly what the reference recomputes densely.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import kvattn  # noqa: E402
from kvattn import flash_attn_varlen_func, flash_attn_with_kvcache, store_kvcache  # noqa: E402
from kvref import attention_ref, rel_err  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and kvattn.cuda_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (or kvattn built without CUDA)")


# ---- the layer, as nano-vLLM writes it (flash_attn -> kvattn) --------------------------------


@dataclass
class Context:
    is_prefill: bool = False
    cu_seqlens_q: Optional[torch.Tensor] = None
    cu_seqlens_k: Optional[torch.Tensor] = None
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0
    slot_mapping: Optional[torch.Tensor] = None
    context_lens: Optional[torch.Tensor] = None
    block_tables: Optional[torch.Tensor] = None


class Attention(nn.Module):
    def __init__(self, num_heads, head_dim, scale, num_kv_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scale = scale
        self.num_kv_heads = num_kv_heads
        self.k_cache = self.v_cache = torch.tensor([])

    def forward(self, q, k, v, context: Context):
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        k_cache, v_cache = self.k_cache, self.v_cache
        if k_cache.numel() and v_cache.numel():
            store_kvcache(k, v, k_cache, v_cache, context.slot_mapping)
        if context.is_prefill:
            if context.block_tables is not None:  # prefix cache
                k, v = k_cache, v_cache
            o = flash_attn_varlen_func(q, k, v,
                                       max_seqlen_q=context.max_seqlen_q, cu_seqlens_q=context.cu_seqlens_q,
                                       max_seqlen_k=context.max_seqlen_k, cu_seqlens_k=context.cu_seqlens_k,
                                       softmax_scale=self.scale, causal=True, block_table=context.block_tables)
        else:  # decode
            o = flash_attn_with_kvcache(q.unsqueeze(1), k_cache, v_cache,
                                        cache_seqlens=context.context_lens, block_table=context.block_tables,
                                        softmax_scale=self.scale, causal=True)
        o = o.view(-1, self.num_heads * self.head_dim)
        return o


# ---- a tiny model runner: block manager with prefix caching, q/k/v per prefix ----------------


class Runner:
    def __init__(self, device, dtype, num_heads, num_kv_heads, head_dim, block_size, num_blocks, seed):
        self.device, self.dtype = device, dtype
        self.h, self.hk, self.d, self.bs = num_heads, num_kv_heads, head_dim, block_size
        self.rng = np.random.default_rng(seed)
        self.layer = Attention(num_heads, head_dim, head_dim ** -0.5, num_kv_heads)
        self.num_blocks = num_blocks
        self.free = list(self.rng.permutation(num_blocks))
        self.prefix_blocks = {}  # tuple(tokens of the full prefix through a block) -> block id
        self.qkv_of = {}  # tuple(prefix tokens) -> fused qkv row (float64)
        self.seqs = {}  # name -> dict(tokens, blocks)

    def bind_cache(self):
        # K and V in one allocation, as engines do: block stride = 2 blocks.
        kv = torch.empty(self.num_blocks, 2, self.bs, self.hk, self.d, dtype=self.dtype, device=self.device)
        kv.normal_()  # never zeros
        self.layer.k_cache, self.layer.v_cache = kv[:, 0], kv[:, 1]

    def row(self, key):
        """The fused [q | k | v] projection of the token whose prefix hashes to `key`."""
        if key not in self.qkv_of:
            self.qkv_of[key] = self.rng.standard_normal((self.h + 2 * self.hk) * self.d)
        return self.qkv_of[key]

    @staticmethod
    def chain(tokens, h=0):
        """Prefix hashes: keys[p] identifies tokens[: p + 1] (a block hash chain, as vLLM's)."""
        keys = []
        for t in tokens:
            h = hash((h, t))
            keys.append(h)
        return keys

    def fused(self, rows):
        t = torch.from_numpy(np.stack(rows)).to(self.dtype).to(self.device)
        return t, t.to("cpu", torch.float64).numpy()

    def split(self, qkv):
        return qkv.split([self.h * self.d, self.hk * self.d, self.hk * self.d], dim=-1)

    def kv_dense(self, name):
        """Reference keys/values [L, hk, d] of a sequence, rounded to the dtype."""
        rows = np.stack([self.row(k) for k in self.seqs[name]["keys"]])
        rows = torch.from_numpy(rows).to(self.dtype).to(torch.float64).numpy()
        hd, kd = self.h * self.d, self.hk * self.d
        return (rows[:, hd : hd + kd].reshape(-1, self.hk, self.d),
                rows[:, hd + kd :].reshape(-1, self.hk, self.d))

    def allocate(self, name, tokens):
        """nano-vLLM's BlockManager.allocate: reuse cached full blocks, count cached tokens."""
        keys = self.chain(tokens)
        blocks, cached, hit = [], 0, True
        for j in range(-(-len(tokens) // self.bs)):
            end = (j + 1) * self.bs
            key = keys[end - 1] if end <= len(tokens) else None
            if hit and key is not None and key in self.prefix_blocks:
                blocks.append(self.prefix_blocks[key])
                cached += self.bs
            else:
                hit = False
                blocks.append(self.free.pop())
        # a prompt that hits completely still recomputes its last token
        cached = min(cached, len(tokens) - 1)
        self.seqs[name] = dict(tokens=list(tokens), keys=keys, blocks=blocks)
        return cached

    def register_full_blocks(self, name):
        s = self.seqs[name]
        for j in range(len(s["tokens"]) // self.bs):
            self.prefix_blocks.setdefault(s["keys"][(j + 1) * self.bs - 1], s["blocks"][j])

    def slot(self, name, pos):
        return self.seqs[name]["blocks"][pos // self.bs] * self.bs + pos % self.bs

    def i32(self, x):
        return torch.tensor(x, dtype=torch.int32, device=self.device)

    def block_tables(self, names, pad_rows=0):
        width = max(len(self.seqs[n]["blocks"]) for n in names)
        rows = [self.seqs[n]["blocks"] + [-1] * (width - len(self.seqs[n]["blocks"])) for n in names]
        rows += [[-1] * width] * pad_rows
        return self.i32(rows)

    # -- steps --

    def prefill(self, prompts, use_cache=True):
        """prompts: {name: tokens}. Returns the worst relative error over the batch."""
        rows, ref_rows, cu_q, cu_k, slots, names = [], [], [0], [0], [], []
        for name, tokens in prompts.items():
            if use_cache:
                cached = self.allocate(name, tokens)
            else:
                cached = 0
                self.seqs[name] = dict(tokens=list(tokens), keys=self.chain(tokens), blocks=[])
            names.append(name)
            for p in range(cached, len(tokens)):
                rows.append(self.row(self.seqs[name]["keys"][p]))
                if use_cache:
                    slots.append(self.slot(name, p))
            cu_q.append(cu_q[-1] + len(tokens) - cached)
            cu_k.append(cu_k[-1] + len(tokens))
        qkv, qkv64 = self.fused(rows)
        q, k, v = self.split(qkv)
        paged = cu_k[-1] > cu_q[-1]
        ctx = Context(
            is_prefill=True, cu_seqlens_q=self.i32(cu_q), cu_seqlens_k=self.i32(cu_k),
            max_seqlen_q=max(b - a for a, b in zip(cu_q, cu_q[1:])),
            max_seqlen_k=max(b - a for a, b in zip(cu_k, cu_k[1:])),
            slot_mapping=self.i32(slots) if use_cache else None,
            block_tables=self.block_tables(names) if paged else None)
        with torch.inference_mode():
            out = self.layer(q, k, v, ctx)
        assert out.shape == (cu_q[-1], self.h * self.d) and out.dtype == self.dtype
        out = out.to("cpu", torch.float64).numpy().reshape(-1, self.h, self.d)
        worst = 0.0
        for i, name in enumerate(names):
            kd, vd = self.kv_dense(name)
            lq = cu_q[i + 1] - cu_q[i]
            qd = qkv64[cu_q[i] : cu_q[i + 1], : self.h * self.d].reshape(lq, self.h, self.d)
            ref, _ = attention_ref(qd, kd, vd, causal=True)
            worst = max(worst, rel_err(out[cu_q[i] : cu_q[i + 1]], ref))
        if use_cache:
            for name in names:
                self.register_full_blocks(name)
        return worst

    def decode(self, names, pad_rows=1):
        rows, slots, lens = [], [], []
        for name in names:
            s = self.seqs[name]
            s["tokens"].append(int(self.rng.integers(0, 50000)))
            s["keys"] += self.chain(s["tokens"][-1:], s["keys"][-1])
            pos = len(s["tokens"]) - 1
            if pos // self.bs == len(s["blocks"]):
                s["blocks"].append(self.free.pop())
            rows.append(self.row(s["keys"][-1]))
            slots.append(self.slot(name, pos))
            lens.append(len(s["tokens"]))
        for _ in range(pad_rows):  # CUDA-graph padding
            rows.append(np.zeros((self.h + 2 * self.hk) * self.d))
            slots.append(-1)
            lens.append(0)
        qkv, qkv64 = self.fused(rows)
        q, k, v = self.split(qkv)
        ctx = Context(is_prefill=False, slot_mapping=self.i32(slots), context_lens=self.i32(lens),
                      block_tables=self.block_tables(names, pad_rows))
        with torch.inference_mode():
            out = self.layer(q, k, v, ctx)
        assert out.shape == (len(rows), self.h * self.d) and out.dtype == self.dtype
        out = out.to("cpu", torch.float64).numpy().reshape(-1, self.h, self.d)
        assert np.all(out[len(names) :] == 0), "padded rows must output zeros"
        errs = []
        for i, name in enumerate(names):
            kd, vd = self.kv_dense(name)
            qd = qkv64[i : i + 1, : self.h * self.d].reshape(1, self.h, self.d)
            ref, _ = attention_ref(qd, kd, vd, causal=True)
            errs.append(rel_err(out[i : i + 1], ref))
        for name in names:
            self.register_full_blocks(name)
        return max(errs)


CONFIGS = [
    pytest.param("cuda", torch.bfloat16, marks=needs_cuda, id="cuda-bf16"),
    pytest.param("cuda", torch.float16, marks=needs_cuda, id="cuda-fp16"),
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cpu", torch.float32, id="cpu-f32"),
]


@pytest.mark.parametrize("device,dtype", CONFIGS)
@pytest.mark.parametrize("block_size", [16, 256])
@pytest.mark.parametrize("heads", [(16, 2, 128), (4, 4, 64)], ids=["gqa8-d128", "mha-d64"])
def test_nano_vllm_attention_layer(device, dtype, block_size, heads):
    h, hk, d = heads
    tol = 1e-2 if dtype != torch.float32 else 1e-5
    r = Runner(device, dtype, h, hk, d, block_size, num_blocks=64, seed=block_size * 1000 + h)
    rng = np.random.default_rng(7)
    tok = lambda n: [int(t) for t in rng.integers(0, 50000, size=n)]  # noqa: E731
    bs = block_size

    # warm-up before the KV pool exists: no store, packed prefill (nano-vLLM's warmup_model)
    assert r.prefill({"warm": tok(19)}, use_cache=False) < tol
    r.bind_cache()

    # 1. prefill, no prefix hits: lengths around block boundaries
    a, b, c = tok(2 * bs + 5), tok(bs), tok(3 * bs + 17)
    assert r.prefill({"A": a, "B": b, "C": c}) < tol

    # 2. prefix-hit prefill: D shares A's two full blocks, E hits nothing, F is B again
    #    (a complete hit: its last token is recomputed into the shared block)
    d_tokens = a[: 2 * bs + 3] + tok(11)
    e_tokens = tok(20)
    f_tokens = list(b)
    assert r.prefill({"D": d_tokens, "E": e_tokens, "F": f_tokens}) < tol
    assert r.seqs["D"]["blocks"][:2] == r.seqs["A"]["blocks"][:2]
    assert r.seqs["F"]["blocks"] == r.seqs["B"]["blocks"]

    # 3. twenty decode steps over every live sequence plus one padded row
    names = ["A", "B", "C", "D", "E", "F"]
    worst = max(r.decode(names) for _ in range(20))
    assert worst < tol, "decode rel err %.3g" % worst
