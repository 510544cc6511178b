"""Float64 references and case builders for the kvattn Python tests (NumPy only)."""

import math

import numpy as np


def attention_ref(q, k, v, causal, scale=None, window=(-1, -1), softcap=0.0, alibi=None):
    """One sequence: q [Lq, H, D], k/v [Lk, Hk, D] (float64) -> out [Lq, H, D], lse [H, Lq].

    GQA: query head h reads KV head h // (H // Hk). Causal is bottom-right aligned: query i sees
    key j iff j <= i + Lk - Lq. A row that sees no key outputs 0 and has lse -inf.
    flash-attn's window (left, right), -1 unbounded: query i sees keys
    [i + Lk - Lq - left, i + Lk - Lq + right] inclusive. softcap > 0: each scaled score s becomes
    softcap * tanh(s / softcap) before the softmax. alibi ([H] slopes): flash-attn's bias
    -slope[h] * |i + Lk - Lq - j| added to the (capped) score.
    """
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    v = np.asarray(v, np.float64)
    lq, h, d = q.shape
    lk, hk = k.shape[0], k.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    g = h // hk
    k = np.repeat(k, g, axis=1)
    v = np.repeat(v, g, axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(lq)[:, None]
    j = np.arange(lk)[None, :]
    diag = i + lk - lq
    if alibi is not None:
        slopes = np.asarray(alibi, np.float64).reshape(h, 1, 1)
        s = s - slopes * np.abs(diag - j)[None].astype(np.float64)
    if causal:
        s = np.where(j <= diag, s, -np.inf)
    if window[0] >= 0:
        s = np.where(j >= diag - window[0], s, -np.inf)
    if window[1] >= 0:
        s = np.where(j <= diag + window[1], s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if lk > 0 else np.full((h, lq, 1), -np.inf)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    denom = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = (np.log(denom) + m_safe)[..., 0]
        p = np.where(denom > 0, p / np.where(denom > 0, denom, 1.0), 0.0)
    lse = np.where(denom[..., 0] > 0, lse, -np.inf)
    out = np.einsum("hqk,khd->qhd", p, v)
    return out, lse


def varlen_ref(q, k, v, cu_q, cu_k, causal, scale=None, window=(-1, -1), softcap=0.0,
               alibi=None):
    """Packed sequences: q [total_q, H, D], k/v [total_k, Hk, D] -> out, lse [H, total_q].
    alibi: slopes [H] or [batch, H]."""
    q = np.asarray(q, np.float64)
    out = np.zeros(q.shape)
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if q1 == q0:
            continue
        a = None if alibi is None else (alibi if np.ndim(alibi) == 1 else alibi[b])
        o, l = attention_ref(q[q0:q1], k[k0:k1], v[k0:k1], causal, scale, window, softcap, a)
        out[q0:q1] = o
        lse[:, q0:q1] = l
    return out, lse


def rotary_ref(x, cos, sin, pos, interleaved):
    """flash-attn's reference RoPE (apply_rotary_emb_torch) in float64: x [S, H, D], pos [S];
    the first rotary_dim = 2 * cos.shape[1] dims are rotated, the rest pass through."""
    x = np.asarray(x, np.float64)
    rd = 2 * cos.shape[1]
    c = np.asarray(cos, np.float64)[pos]
    s = np.asarray(sin, np.float64)[pos]
    xr = x[..., :rd]
    if interleaved:
        c, s = np.repeat(c, 2, axis=-1), np.repeat(s, 2, axis=-1)
        half = np.stack([-xr[..., 1::2], xr[..., 0::2]], axis=-1).reshape(xr.shape)
    else:
        c, s = np.concatenate([c, c], -1), np.concatenate([s, s], -1)
        half = np.concatenate([-xr[..., rd // 2 :], xr[..., : rd // 2]], -1)
    out = x.copy()
    out[..., :rd] = xr * c[:, None, :] + half * s[:, None, :]
    return out


def rel_err(out, ref):
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    assert not np.isnan(out).any(), "NaN in output"
    n = np.linalg.norm(ref)
    return np.linalg.norm(out - ref) / (n if n > 0 else 1.0)


def max_abs(out, ref):
    return float(np.max(np.abs(np.asarray(out, np.float64) - np.asarray(ref, np.float64)), initial=0.0))


class PagedCase:
    """Per-sequence keys/values laid out in a shuffled paged pool.

    k_seqs/v_seqs: lists of [Lk, Hk, D] float64 arrays. Unused slots hold other random values.
    block_table: int32 [B, max_blocks], -1 padded (width >= 1).
    """

    def __init__(self, rng, k_seqs, v_seqs, block_size, spare_blocks=3, min_width=1):
        hk, d = k_seqs[0].shape[1], k_seqs[0].shape[2]
        nblk = [-(-len(k) // block_size) for k in k_seqs]
        total = sum(nblk) + spare_blocks
        width = max(max(nblk), min_width)
        perm = rng.permutation(total)
        self.k_cache = rng.standard_normal((total, block_size, hk, d)) + 3.0
        self.v_cache = rng.standard_normal((total, block_size, hk, d)) - 3.0
        self.block_table = np.full((len(k_seqs), width), -1, np.int32)
        at = 0
        for b, (k, v) in enumerate(zip(k_seqs, v_seqs)):
            for j in range(nblk[b]):
                blk = perm[at]
                at += 1
                self.block_table[b, j] = blk
                n = min(block_size, len(k) - j * block_size)
                self.k_cache[blk, :n] = k[j * block_size : j * block_size + n]
                self.v_cache[blk, :n] = v[j * block_size : j * block_size + n]
        self.lens = np.array([len(k) for k in k_seqs], np.int32)


def cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
