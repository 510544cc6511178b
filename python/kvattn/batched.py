"""flash-attn 2's batched and packed entry points over kvattn's varlen attention.

``flash_attn_func`` (q [batch, seqlen_q, heads, dim], k/v [batch, seqlen_k, kv_heads, dim]),
``flash_attn_kvpacked_func`` / ``flash_attn_qkvpacked_func`` (K and V, or Q, K and V, stacked
on a dimension of one tensor) and their varlen forms, with flash-attn's signatures: what
Hugging Face transformers and other flash-attn users call besides the varlen function. Each is
``flash_attn_varlen_func`` over the batch's rows (one sequence per batch row, equal lengths:
cu_seqlens every seqlen rows), so semantics, supported arguments and errors are that
function's: bottom-right causal, window_size, softcap, alibi_slopes ([heads] or
[batch, heads]), softmax_scale, ``return_attn_probs`` -> (out, lse, None) with flash-attn's
lse shape ([batch, heads, seqlen_q] here, [heads, total_q] for the varlen forms), ``out=``,
forward only. A packed tensor's parts are strided views; they are read as such, not copied,
when the kernels take their strides, else made contiguous.
"""

from . import _C
from .interface import _lse_bhs, flash_attn_varlen_func

__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
]


def _shape(fn, name, x, ndim, what):
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != ndim:
        raise _C.Error("kvattn.%s: %s must be %s but has shape %s" % (fn, name, what, list(shape)))
    return shape


def _rows(x, n, heads, dim):
    """x as [n, heads, dim] rows: a view (strided rows included) when its layout allows, else
    a copy (reshape's rule in both torch and NumPy)."""
    return x.reshape(n, heads, dim)


def _cu_seqlens(like, batch, seqlen):
    """int32 [batch + 1] = 0, seqlen, 2 seqlen, ... on like's device."""
    if type(like).__module__.startswith("torch"):
        import torch

        return torch.arange(0, (batch + 1) * seqlen, seqlen, dtype=torch.int32,
                            device=like.device)[: batch + 1]
    import numpy

    return (numpy.arange(batch + 1, dtype=numpy.int64) * seqlen).astype(numpy.int32)


def _unpack(fn, name, x, index, count):
    """Part `index` of x's packing dimension (x [..., count, heads, dim])."""
    if x.shape[-3] != count:
        raise _C.Error("kvattn.%s: %s must stack %d tensors on dimension %d but has %d there"
                       % (fn, name, count, x.ndim - 3, x.shape[-3]))
    return x[..., index, :, :]


def _batched(fn, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
             deterministic, return_attn_probs, out):
    b, sq, h, d = _shape(fn, "q", q, 4, "[batch, seqlen_q, num_heads, head_dim]")
    kb, sk, hk, kd = _shape(fn, "k", k, 4, "[batch, seqlen_k, num_kv_heads, head_dim]")
    if tuple(v.shape) != (kb, sk, hk, kd) or kb != b or kd != d:
        raise _C.Error("kvattn.%s: q %s, k %s and v %s must be [batch, seqlen, heads, head_dim] "
                       "with one batch and head_dim" % (fn, list(q.shape), list(k.shape),
                                                         list(v.shape)))
    out_rows = None
    if out is not None:
        if tuple(out.shape) != (b, sq, h, d):
            raise _C.Error("kvattn.%s: out must be [batch, seqlen_q, num_heads, head_dim] = %s "
                           "but is %s" % (fn, [b, sq, h, d], list(out.shape)))
        contiguous = (out.is_contiguous() if hasattr(out, "is_contiguous")
                      else out.flags["C_CONTIGUOUS"])
        if not contiguous:
            raise _C.Error("kvattn.%s: out must be contiguous (it is written through a view)"
                           % fn)
        out_rows = out.reshape(b * sq, h, d)
    res = flash_attn_varlen_func(
        _rows(q, b * sq, h, d), _rows(k, b * sk, hk, d), _rows(v, b * sk, hk, d),
        _cu_seqlens(q, b, sq), _cu_seqlens(q, b, sk), sq, sk, dropout_p=dropout_p,
        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
        alibi_slopes=alibi_slopes, deterministic=deterministic,
        return_attn_probs=return_attn_probs, out=out_rows)
    if return_attn_probs:
        o, lse, _ = res
        return o.reshape(b, sq, h, d), _lse_bhs(lse, b, sq), None
    return res.reshape(b, sq, h, d)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, *, out=None):
    """q: [batch, seqlen_q, num_heads, head_dim]; k, v: [batch, seqlen_k, num_kv_heads,
    head_dim]. Returns out [batch, seqlen_q, num_heads, head_dim]; with return_attn_probs
    (out, lse [batch, num_heads, seqlen_q], None). The rest as flash_attn_varlen_func."""
    return _batched("flash_attn_func", q, k, v, dropout_p, softmax_scale, causal, window_size,
                    softcap, alibi_slopes, deterministic, return_attn_probs, out)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False, *, out=None):
    """kv: [batch, seqlen_k, 2, num_kv_heads, head_dim] (K then V); otherwise flash_attn_func."""
    fn = "flash_attn_kvpacked_func"
    _shape(fn, "kv", kv, 5, "[batch, seqlen_k, 2, num_kv_heads, head_dim]")
    return _batched(fn, q, _unpack(fn, "kv", kv, 0, 2), _unpack(fn, "kv", kv, 1, 2), dropout_p,
                    softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                    return_attn_probs, out)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, *, out=None):
    """qkv: [batch, seqlen, 3, num_heads, head_dim] (Q, K, V; as in flash-attn, no GQA)."""
    fn = "flash_attn_qkvpacked_func"
    _shape(fn, "qkv", qkv, 5, "[batch, seqlen, 3, num_heads, head_dim]")
    return _batched(fn, _unpack(fn, "qkv", qkv, 0, 3), _unpack(fn, "qkv", qkv, 1, 3),
                    _unpack(fn, "qkv", qkv, 2, 3), dropout_p, softmax_scale, causal, window_size,
                    softcap, alibi_slopes, deterministic, return_attn_probs, out)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False, *, out=None):
    """kv: [total_k, 2, num_kv_heads, head_dim] (K then V); otherwise flash_attn_varlen_func."""
    fn = "flash_attn_varlen_kvpacked_func"
    _shape(fn, "kv", kv, 4, "[total_k, 2, num_kv_heads, head_dim]")
    return flash_attn_varlen_func(
        q, _unpack(fn, "kv", kv, 0, 2), _unpack(fn, "kv", kv, 1, 2), cu_seqlens_q, cu_seqlens_k,
        max_seqlen_q, max_seqlen_k, dropout_p=dropout_p, softmax_scale=softmax_scale,
        causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
        deterministic=deterministic, return_attn_probs=return_attn_probs, out=out)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, out=None):
    """qkv: [total, 3, num_heads, head_dim] (Q, K, V); otherwise flash_attn_varlen_func."""
    fn = "flash_attn_varlen_qkvpacked_func"
    _shape(fn, "qkv", qkv, 4, "[total, 3, num_heads, head_dim]")
    return flash_attn_varlen_func(
        _unpack(fn, "qkv", qkv, 0, 3), _unpack(fn, "qkv", qkv, 1, 3),
        _unpack(fn, "qkv", qkv, 2, 3), cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
        dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
        window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
        deterministic=deterministic, return_attn_probs=return_attn_probs, out=out)
