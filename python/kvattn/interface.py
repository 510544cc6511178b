"""flash-attn compatible entry points over kvattn's kernels.

The signatures and defaults are flash-attn 2's (``flash_attn.flash_attn_interface``), plus
vLLM's ``return_softmax_lse`` / ``out=`` extensions. Arguments kvattn does not implement raise
``NotImplementedError`` naming the argument when they differ from their default; nothing is
silently ignored. Bad tensors (shape, stride, dtype, device) raise ``kvattn.Error`` with
kvattn's message.

Autograd: inputs that require grad (with grad mode on) run the forward on detached views (no
copy); the outputs then carry a grad_fn whose backward raises NotImplementedError (kvattn is
forward-only). The extension signals such inputs with ``_C.NeedsGrad`` before it runs
anything, so calls without them pay nothing for this.
"""

import operator

from . import _C

_varlen = _C.varlen
_kvcache = _C.kvcache
_NO_WINDOW = (-1, -1)
# flash-attn honours softmax_scale=0.0 (uniform attention); kvattn's 0 means 1/sqrt(head_dim).
# The smallest normal float32 gives flash-attn's result: every scaled score rounds to 0.
_TINY_SCALE = 1.1754943508222875e-38

_store = _C.store_kvcache


def _fp8_bytes(cache):
    """A float8_e4m3 cache as the uint8 view kvattn reads (uint8 caches hold e4m3 bytes).

    torch.float8_e4m3fn tensors cross as their bytes; other 8-bit float formats are refused.
    16- and 32-bit caches (the usual case) return after one attribute read.
    """
    dt = getattr(cache, "dtype", None)
    if getattr(dt, "itemsize", 0) != 1 or not _is_torch(cache):
        return cache
    name = str(dt)
    if name == "torch.float8_e4m3fn":
        import torch

        return cache.view(torch.uint8)
    if name.startswith("torch.float8"):
        raise _C.Error("kvattn: fp8 KV caches must be torch.float8_e4m3fn (OCP e4m3) but are %s"
                       % name)
    return cache


def _kv_scale(scale, cache, name):
    """k_scale / v_scale as float32 [num_kv_heads] in the cache's framework and device.

    A Python number or a one-element tensor/array (vLLM's per-layer scale) is broadcast to
    every KV head; a [num_kv_heads] float32 tensor/array passes through (kvattn checks it).
    """
    if scale is None:
        return None
    heads = cache.shape[2] if len(cache.shape) == 4 else 1
    if _is_torch(cache):
        import torch

        if isinstance(scale, torch.Tensor):
            if scale.numel() == 1 and heads != 1:
                return scale.reshape(1).to(torch.float32).repeat(heads)
            return scale
        return torch.full((heads,), float(scale), dtype=torch.float32, device=cache.device)
    import numpy

    if hasattr(scale, "shape"):
        if getattr(scale, "size", 0) == 1 and heads != 1:
            return numpy.full((heads,), float(numpy.asarray(scale).reshape(-1)[0]), numpy.float32)
        return scale
    return numpy.full((heads,), float(scale), dtype=numpy.float32)


def store_kvcache(key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
    """Writes key/value [tokens, kv_heads, dim] into the paged caches at slot_mapping.

    Negative slots are skipped; a slot_mapping shorter than key writes only its tokens. With an
    fp8 cache (torch.float8_e4m3fn, or a uint8 NumPy/torch array holding e4m3 bytes) each
    value is stored as e4m3(sat(x / scale)) with the scale of its KV head (k_scale / v_scale:
    a number, or float32 [num_kv_heads]; None = 1.0), as vLLM's reshape_and_cache_flash does.
    fp8 caches are CPU-only for now (CUDA raises kvattn.Error). Tensors that require grad are
    written through detached views (no copy): a cache write has no gradient, in flash-attn's
    in-place cache update either.
    """
    k_cache = _fp8_bytes(k_cache)
    v_cache = _fp8_bytes(v_cache)
    try:
        if k_scale is None and v_scale is None:
            return _store(key, value, k_cache, v_cache, slot_mapping)
        return _store(key, value, k_cache, v_cache, slot_mapping,
                      _kv_scale(k_scale, k_cache, "k_scale"),
                      _kv_scale(v_scale, v_cache, "v_scale"))
    except _C.NeedsGrad:
        key, value, k_cache, v_cache = (x.detach() if _is_torch(x) else x
                                        for x in (key, value, k_cache, v_cache))
        return store_kvcache(key, value, k_cache, v_cache, slot_mapping, k_scale=k_scale,
                             v_scale=v_scale)


def _unsupported(fn, name, value, hint=""):
    if hasattr(value, "shape"):
        value = "a tensor of shape %s" % (tuple(value.shape),)
    raise NotImplementedError(
        "kvattn.%s: %s=%s is not supported by kvattn%s" % (fn, name, value, hint)
    )


def _scale(softmax_scale):
    if softmax_scale is None:
        return 0.0
    s = float(softmax_scale)
    return _TINY_SCALE if s == 0.0 else s


def _window(fn, window_size):
    """flash-attn's window_size (left, right) as two ints; None or (-1, -1) is no window.

    Query i (bottom-right aligned, offset = Lk - Lq) sees key j iff j >= i + offset - left
    (left >= 0) and j <= i + offset + right (right >= 0); causal sets right to 0. The library
    checks the values (each >= -1)."""
    if window_size is None:
        return -1, -1
    try:
        left, right = window_size
        return operator.index(left), operator.index(right)
    except (TypeError, ValueError):
        raise _C.Error("kvattn.%s: window_size must be a pair (left, right) of ints but is %r"
                       % (fn, window_size)) from None


def _softcap(fn, softcap):
    try:
        return float(softcap or 0.0)
    except (TypeError, ValueError):
        raise _C.Error("kvattn.%s: softcap must be a number (0 = off) but is %r"
                       % (fn, softcap)) from None


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _lse_bhs(lse, batch, seqlen_q):
    """kvattn's decode LSE [heads, batch * seqlen_q] -> flash-attn's [batch, heads, seqlen_q]."""
    heads = lse.shape[0]
    lse = lse.reshape(heads, batch, seqlen_q)
    if hasattr(lse, "permute"):
        return lse.permute(1, 0, 2).contiguous()
    return lse.transpose(1, 0, 2).copy()


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    return_softmax_lse=False,
    *,
    out=None,
    k_scale=None,
    v_scale=None,
    seqused_k=None,
):
    """Attention over packed variable-length sequences (flash-attn 2 semantics).

    q: [total_q, num_heads, head_dim]. k, v: [total_k, num_kv_heads, head_dim], or, when
    ``block_table`` ([batch, max_blocks] int32) is given, the paged caches
    [num_blocks, block_size, num_kv_heads, head_dim] (any block_size; flash-attn needs a
    multiple of 256). cu_seqlens_q/k: int32 [batch + 1]. The causal mask is bottom-right
    aligned. Returns out [total_q, num_heads, head_dim] in q's dtype; with
    ``return_softmax_lse`` (vLLM) ``(out, lse)``, with ``return_attn_probs`` (flash-attn)
    ``(out, lse, None)`` (flash-attn also returns None probabilities without dropout); lse is
    float32 [num_heads, total_q], natural log. ``deterministic`` only concerns flash-attn's
    backward pass; kvattn's forward is deterministic and it has no backward.
    ``window_size`` = (left, right) (-1 = unbounded) and ``softcap`` (> 0: each scaled score s
    becomes softcap * tanh(s / softcap) before the softmax; 0 = off) have flash-attn's meanings,
    combined with ``causal`` and the bottom-right alignment.
    ``seqused_k`` (vLLM's fork, keyword): int32 [batch], each sequence's key count, instead of
    ``cu_seqlens_k``; with ``block_table`` the keys are read through it (cu_seqlens_k, if also
    given, is then ignored as vLLM's kernels ignore it), without one K/V are packed by these
    lengths. ``max_seqlen_q`` and ``max_seqlen_k`` are required (keywords with vLLM's order).
    ``alibi_slopes``: float32 [num_heads] or [batch, num_heads]; the score of query i and key j
    gets -slope * |i + Lk - Lq - j| added (after softcap), flash-attn's documented bias.
    head_dim: any on the CPU; 64, 80, 96, 128 and 256 on CUDA, fp8 caches included (the
    environment's KVATTN_FP8_EXTENDED_FORMS=0 turns off fp8 with window_size, softcap,
    alibi_slopes or head_dim 80/96/256: kvattn.Error naming them).

    fp8 paged caches (torch.float8_e4m3fn, or uint8 e4m3 bytes) are read as e4m3 * scale with
    ``k_scale`` / ``v_scale`` (a number or float32 [num_kv_heads]; None = 1.0), float32
    accumulation; on CUDA with bfloat16/float16 q only.
    """
    cu_seqlens_k = _keys_cu_seqlens(cu_seqlens_k, seqused_k, block_table)
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if value is None:
            raise _C.Error("kvattn.flash_attn_varlen_func: %s is required" % name)
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs,
            block_table, return_softmax_lse, out, k_scale, v_scale)
    try:
        return _varlen_impl(*args)
    except _C.NeedsGrad:
        return _forward_only("flash_attn_varlen_func", _varlen_impl, args, out)


def _keys_cu_seqlens(cu_seqlens_k, seqused_k, block_table):
    """The kernels' cu_seqlens_k: as given, or [0, cumsum(seqused_k)] (vLLM's per-sequence key
    counts; paged K/V only need the lengths, packed K/V are then packed by them)."""
    fn = "kvattn.flash_attn_varlen_func"
    if seqused_k is None:
        if cu_seqlens_k is None:
            raise _C.Error("%s: give cu_seqlens_k (int32 [batch + 1]) or seqused_k "
                           "(int32 [batch])" % fn)
        return cu_seqlens_k
    if cu_seqlens_k is not None and block_table is None:
        _unsupported("flash_attn_varlen_func", "seqused_k", seqused_k,
                     " together with cu_seqlens_k on packed K/V (give one of them, or a "
                     "block_table)")
    shape = tuple(getattr(seqused_k, "shape", ()))
    if len(shape) != 1 or "int32" not in str(getattr(seqused_k, "dtype", "")):
        raise _C.Error("%s: seqused_k must be an int32 tensor [batch] but is %s of shape %s"
                       % (fn, getattr(seqused_k, "dtype", type(seqused_k).__name__), shape))
    if _is_torch(seqused_k):
        import torch

        zero = torch.zeros(1, dtype=torch.int32, device=seqused_k.device)
        return torch.cat([zero, torch.cumsum(seqused_k, 0, dtype=torch.int32)])
    import numpy as np

    return np.concatenate([np.zeros(1, np.int32), np.cumsum(seqused_k, dtype=np.int32)])


def _varlen_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                 softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs,
                 block_table, return_softmax_lse, out, k_scale, v_scale):
    if dropout_p:
        _unsupported("flash_attn_varlen_func", "dropout_p", dropout_p, " (inference only)")
    left, right = _window("flash_attn_varlen_func", window_size)
    softcap = _softcap("flash_attn_varlen_func", softcap)
    if block_table is not None:
        k = _fp8_bytes(k)
        v = _fp8_bytes(v)
        k_scale = _kv_scale(k_scale, k, "k_scale")
        v_scale = _kv_scale(v_scale, v, "v_scale")
    res = _varlen(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        0.0 if softmax_scale is None else _scale(softmax_scale),
        causal,
        block_table,
        out,
        return_attn_probs or return_softmax_lse,
        k_scale,
        v_scale,
        left,
        right,
        softcap,
        alibi_slopes,
    )
    if return_attn_probs:
        return res[0], res[1], None
    return res  # out, or (out, lse) with return_softmax_lse


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
    *,
    out=None,
    k_scale=None,
    v_scale=None,
):
    """Attention of q against the KV cache (flash-attn 2 semantics), usually decode.

    q: [batch, seqlen_q, num_heads, head_dim]. With ``block_table`` ([batch, max_blocks] int32)
    the caches are paged [num_blocks, block_size, num_kv_heads, head_dim]; without it they are
    [batch_cache, seqlen_cache, num_kv_heads, head_dim] (row ``cache_batch_idx[b]``, default b).
    ``cache_seqlens`` (int32 [batch] or an int; None = the whole cache) counts the keys in the
    cache *before* ``k``/``v`` are appended, as in flash-attn: without k/v it is the number of
    keys attended (kvattn's ``cache_seqlens``); with k/v [batch, seqlen_new, num_kv_heads,
    head_dim] they are first written at positions cache_seqlens .. cache_seqlens+seqlen_new-1
    (kvattn ``store_kv``), then attention reads cache_seqlens + seqlen_new keys. The caller's
    cache_seqlens is not modified (as in flash-attn). With seqlen_q > 1 and ``causal`` the mask
    is bottom-right aligned. Returns out [batch, seqlen_q, num_heads, head_dim] in q's dtype,
    and with ``return_softmax_lse`` also lse float32 [batch, num_heads, seqlen_q].
    ``num_splits``: 0 lets kvattn plan the split-KV decode, 1 forbids splitting.
    fp8 caches (torch.float8_e4m3fn, or uint8 e4m3 bytes; on CUDA for 16-bit q) are read as
    e4m3 * scale with ``k_scale`` / ``v_scale`` (a number or float32 [num_kv_heads]; None =
    1.0); new k/v are quantised with the same scales.
    ``window_size`` = (left, right) (-1 = unbounded) and ``softcap`` (> 0: each scaled score s
    becomes softcap * tanh(s / softcap) before the softmax; 0 = off) have flash-attn's meanings,
    combined with ``causal`` and the bottom-right alignment; a windowed decode reads only the
    window's pages.
    ``alibi_slopes``: float32 [num_heads] or [batch, num_heads], flash-attn's bias
    -slope * |i + Lk - Lq - j| (Lk: the keys attended).
    head_dim: any on the CPU; 64, 80, 96, 128 and 256 on CUDA (80, 96, 256: bf16/fp16 caches,
    not fp8).
    ``rotary_cos`` / ``rotary_sin`` ([seqlen_ro, rotary_dim / 2], rotary_dim <= head_dim, even;
    need k and v): the new keys are rotated at positions cache_seqlens[b] + t before they are
    written, and q at cache_seqlens[b] + t when causal or local (a window), else every query
    token at cache_seqlens[b], as flash-attn does; ``rotary_interleaved`` pairs dims (0, 1),
    (2, 3), ... (GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX); dims past rotary_dim pass
    through. Computed in float32 by the package (NumPy or torch ops), rounded to q's dtype.
    ``cache_batch_idx`` (int32 [batch], dense caches only, as in flash-attn): the cache row of
    each sequence. ``cache_leftpad`` (int32 [batch]): sequence b's keys start at cache position
    cache_leftpad[b] (the mask and ALiBi count keys from there; rotary positions stay absolute);
    CPU only, also with a block_table (flash-attn refuses that combination).
    """
    args = (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
            cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
            rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse, out, k_scale,
            v_scale)
    try:
        return _kvcache_impl(*args)
    except _C.NeedsGrad:
        return _forward_only("flash_attn_with_kvcache", _kvcache_impl, args, out)


def _kvcache_impl(
    q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
    cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
    rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse, out, k_scale, v_scale,
):
    k_cache = _fp8_bytes(k_cache)
    v_cache = _fp8_bytes(v_cache)
    if k_scale is not None or v_scale is not None:
        k_scale = _kv_scale(k_scale, k_cache, "k_scale")
        v_scale = _kv_scale(v_scale, v_cache, "v_scale")
    if (
        k is None
        and block_table is not None
        and cache_seqlens is not None
        and rotary_cos is None
        and cache_batch_idx is None
        and cache_leftpad is None
        and alibi_slopes is None
        and not softcap
        and softmax_scale != 0
        and window_size == _NO_WINDOW
        and cache_seqlens.__class__ is not int
        and v is None
        and rotary_sin is None
        and num_splits == 0
    ):
        # The decode hot path (nano-vLLM): straight to the extension.
        res = _kvcache(
            q,
            k_cache,
            v_cache,
            block_table,
            cache_seqlens,
            0.0 if softmax_scale is None else softmax_scale,
            causal,
            0,
            out,
            return_softmax_lse,
            k_scale,
            v_scale,
        )
        if return_softmax_lse:
            return res[0], _lse_bhs(res[1], q.shape[0], q.shape[1])
        return res
    return _kvcache_general(
        q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
        cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
        rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse, out, k_scale, v_scale,
    )


def _kvcache_general(
    q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
    cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
    rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse, out, k_scale, v_scale,
):
    fn = "flash_attn_with_kvcache"
    if _needs_grad(q, k, v, k_cache, v_cache, rotary_cos, rotary_sin, alibi_slopes):
        raise _C.NeedsGrad("kvattn.%s: an input requires grad" % fn)
    softcap = _softcap(fn, softcap)
    if num_splits not in (0, 1):
        _unsupported(fn, "num_splits", num_splits, " (0: kvattn plans, 1: no split)")
    if (k is None) != (v is None):
        raise ValueError("kvattn.%s: k and v must be given together" % fn)
    left, right = _window(fn, window_size)
    if len(q.shape) != 4:
        raise _C.Error("kvattn: q must have rank 4 ([batch, seqlen_q, num_heads, head_dim]) "
                       "but has shape %s" % (tuple(q.shape),))
    xp = _Ops(q)
    batch = q.shape[0]

    if block_table is None:
        # A [batch_cache, seqlen_cache, kv_heads, dim] cache is a paged cache of one block of
        # seqlen_cache slots per row: block_table[b] = [cache_batch_idx[b]] (default b).
        if len(k_cache.shape) != 4:
            raise _C.Error("kvattn: k_cache must have rank 4 ([batch_cache, seqlen_cache, "
                           "num_kv_heads, head_dim]) but has shape %s" % (tuple(k_cache.shape),))
        if cache_batch_idx is None:
            block_table = xp.arange_column(batch)
        else:
            _check_index(fn, "cache_batch_idx", cache_batch_idx, batch, 0, k_cache.shape[0] - 1,
                         "[0, k_cache.shape[0] = %d)" % k_cache.shape[0])
            block_table = xp.as_column(cache_batch_idx)
    elif cache_batch_idx is not None:
        _unsupported(fn, "cache_batch_idx", cache_batch_idx,
                     " together with block_table (flash-attn refuses it too)")

    block_size = k_cache.shape[1]
    capacity = block_table.shape[1] * block_size
    # Lengths known equal here (an int or none given) let the GPU plan for uniform lengths
    # (uniform_seqlen_k: the keys each sequence attends; -1 unknown).
    uniform_seqlen_k = -1
    if cache_seqlens is None:
        uniform_seqlen_k = 0 if k is not None else capacity
        cache_seqlens = xp.full_int32(batch, uniform_seqlen_k)
    elif isinstance(cache_seqlens, int):
        if not 0 <= cache_seqlens < 2**31:  # NumPy would wrap it into int32 silently
            raise _C.Error("kvattn.%s: cache_seqlens must be in [0, 2^31) but is %d"
                           % (fn, cache_seqlens))
        uniform_seqlen_k = cache_seqlens
        cache_seqlens = xp.full_int32(batch, cache_seqlens)
    elif hasattr(cache_seqlens, "shape") and tuple(cache_seqlens.shape) != (batch,):
        raise _C.Error("kvattn.%s: cache_seqlens must have shape [batch = %d] (q's batch) but "
                       "has shape %s" % (fn, batch, tuple(cache_seqlens.shape)))

    if cache_leftpad is not None:
        uniform_seqlen_k = -1
        _check_index(fn, "cache_leftpad", cache_leftpad, batch, 0, None, ">= 0")
        _check_leftpad_fits(fn, xp, cache_leftpad, cache_seqlens, 0 if k is None else k.shape[1])
    if rotary_cos is not None or rotary_sin is not None:
        q, k = _rotary(fn, xp, q, k, rotary_cos, rotary_sin, rotary_interleaved, cache_seqlens,
                       capacity, causal or _is_local(left, right, capacity))

    if k is not None:
        _check_new_kv(fn, k, v, batch, k_cache)
        seqlen_new = k.shape[1]
        slots = xp.append_slots(cache_seqlens, block_table, block_size, k_cache.shape[0], seqlen_new)
        _check_slots_found(fn, xp, slots, k_cache.shape[0], block_size, cache_seqlens,
                           block_table, seqlen_new)
        kv_heads, dim = k.shape[2], k.shape[3]
        _store(
            k.reshape(batch * seqlen_new, kv_heads, dim),
            v.reshape(batch * seqlen_new, kv_heads, dim),
            k_cache,
            v_cache,
            slots,
            k_scale,
            v_scale,
        )
        cache_seqlens = xp.add_int32(cache_seqlens, seqlen_new)
        if uniform_seqlen_k >= 0:
            uniform_seqlen_k += seqlen_new

    res = _kvcache(
        q, k_cache, v_cache, block_table, cache_seqlens, _scale(softmax_scale), causal,
        num_splits, out, return_softmax_lse, k_scale, v_scale, left, right, softcap,
        alibi_slopes, cache_leftpad, uniform_seqlen_k,
    )
    if return_softmax_lse:
        return res[0], _lse_bhs(res[1], q.shape[0], q.shape[1])
    return res


def _is_local(left, right, seqlen_k):
    """flash-attn's is_local, which decides the rotary positions of q: a window bound shorter
    than the cache (mha_fwd_kvcache drops bounds >= seqlen_k, the cache's capacity)."""
    return 0 <= left < seqlen_k or 0 <= right < seqlen_k


def _needs_grad(*xs):
    """True when a torch tensor among xs requires grad while grad mode is on."""
    for x in xs:
        if x is not None and _is_torch(x) and x.requires_grad:
            import torch

            return torch.is_grad_enabled()
    return False


_forward_only_cls = None


def _forward_only(fn, impl, args, out):
    """Runs impl(*args) on detached views of the inputs that require grad (no copy), under a
    torch.autograd.Function whose backward raises: the outputs carry a grad_fn, so a backward
    through them fails with a message naming kvattn instead of silently giving no gradient."""
    global _forward_only_cls
    import torch

    if out is not None:
        raise NotImplementedError(
            "kvattn.%s: out= cannot be combined with inputs that require grad (kvattn has no "
            "backward pass); pass out=None, or call under torch.no_grad()" % fn)
    if _forward_only_cls is None:

        class _ForwardOnly(torch.autograd.Function):
            @staticmethod
            def forward(ctx, name, run, *inputs):
                ctx.name = name
                return run()

            @staticmethod
            def backward(ctx, *grads):
                raise NotImplementedError(
                    "kvattn.%s has no backward pass (kvattn is forward-only): its output was "
                    "used in a backward; compute gradients with another attention "
                    "implementation, or detach the output" % ctx.name)

        _forward_only_cls = _ForwardOnly
    grads = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    detached = tuple(a.detach() if isinstance(a, torch.Tensor) and a.requires_grad else a
                     for a in args)
    return _forward_only_cls.apply(fn, lambda: impl(*detached), *grads)


def _dtype_name(x):
    return str(getattr(x, "dtype", type(x).__name__)).replace("torch.", "")


def _check_index(fn, name, idx, batch, lo, hi, want):
    """An int32 [batch] index argument; on the CPU its values lie in [lo, hi] (hi None: no
    upper bound). GPU tensors are not read (no sync): the kernels bound-check them."""
    shape = tuple(getattr(idx, "shape", ()))
    if shape != (batch,) or _dtype_name(idx) != "int32":
        raise _C.Error("kvattn.%s: %s must be int32 [batch] = [%d] but is %s %s"
                       % (fn, name, batch, _dtype_name(idx), list(shape)))
    if batch == 0 or (_is_torch(idx) and idx.device.type != "cpu"):
        return
    vals = idx.numpy() if _is_torch(idx) else idx
    bad = (vals < lo) if hi is None else ((vals < lo) | (vals > hi))
    if bad.any():
        b = int(bad.nonzero()[0][0])
        raise _C.Error("kvattn.%s: %s[%d] must be in %s but is %d"
                       % (fn, name, b, want, int(vals[b])))


def _check_new_kv(fn, k, v, batch, k_cache):
    """The appended k / v: [batch, seqlen_new, num_kv_heads, head_dim], alike, with the cache's
    heads and head_dim (flash-attn's CHECK_SHAPE), before anything reshapes them."""
    if len(k_cache.shape) != 4:
        return  # store_kv's own check names k_cache
    for name, x in (("k", k), ("v", v)):
        shape = tuple(x.shape)
        if len(shape) != 4 or shape[0] != batch or shape[2:] != tuple(k_cache.shape[2:]):
            raise _C.Error("kvattn.%s: %s must have shape [batch = %d, seqlen_new, num_kv_heads "
                           "= %d, head_dim = %d] (q's batch, the cache's heads) but has shape %s"
                           % (fn, name, batch, k_cache.shape[2], k_cache.shape[3], shape))
    if tuple(v.shape) != tuple(k.shape):
        raise _C.Error("kvattn.%s: v must have k's shape %s but has shape %s"
                       % (fn, tuple(k.shape), tuple(v.shape)))


def _check_slots_found(fn, xp, slots, num_blocks, block_size, cache_seqlens, block_table,
                       seqlen_new):
    """CPU: every new key has a slot (append_slots gives `bad` where a position is negative,
    past the block table, or on a negative block id; a block id past the cache gives more);
    else an error naming the sequence and
    cache_seqlens instead of store_kv's slot_mapping, which the caller never saw. On the GPU
    this would need a sync: store_kv skips such keys there and records a device fault."""
    if not (xp.on_cpu(slots) and xp.on_cpu(cache_seqlens) and xp.on_cpu(block_table)):
        return
    bad = num_blocks * block_size
    flat = slots.numpy() if _is_torch(slots) else slots
    missing = (flat >= bad).nonzero()[0]
    if missing.shape[0] == 0:
        return
    i = int(missing[0])
    b, t = divmod(i, seqlen_new)
    lens = cache_seqlens.numpy() if _is_torch(cache_seqlens) else cache_seqlens
    table = block_table.numpy() if _is_torch(block_table) else block_table
    pos = int(lens[b]) + t
    width = table.shape[1]
    if pos < 0:
        why = "a negative position (cache_seqlens[%d] = %d)" % (b, int(lens[b]))
    elif pos // block_size >= width:
        why = ("past the block table's %d slots a row (cache_seqlens[%d] = %d + seqlen_new = %d)"
               % (width * block_size, b, int(lens[b]), seqlen_new))
    else:
        col = pos // block_size
        blk = int(table[b][col])
        why = ("on block_table[%d][%d] = %d, %s" % (b, col, blk, "a padding block" if blk < 0
               else "outside the cache's %d blocks" % num_blocks))
    raise _C.Error("kvattn.%s: new key %d of sequence %d would go to position %d, %s"
                   % (fn, t, b, pos, why))


def _check_leftpad_fits(fn, xp, pads, cache_seqlens, seqlen_new):
    """CPU: cache_leftpad[b] <= cache_seqlens[b] + seqlen_new (the keys attended), checked
    before anything is written (the kernel checks it too, after the append)."""
    if not (xp.on_cpu(pads) and xp.on_cpu(cache_seqlens)) or pads.shape[0] == 0:
        return
    p = pads.numpy() if _is_torch(pads) else pads
    n = (cache_seqlens.numpy() if _is_torch(cache_seqlens) else cache_seqlens) + seqlen_new
    bad = p > n
    if bad.any():
        b = int(bad.nonzero()[0][0])
        raise _C.Error("kvattn.%s: cache_leftpad[%d] must be <= cache_seqlens[%d] + seqlen_new "
                       "= %d but is %d" % (fn, b, b, int(n[b]), int(p[b])))


def _rotary(fn, xp, q, k, cos, sin, interleaved, cache_seqlens, capacity, q_advances):
    """flash-attn's in-call RoPE: k (the new keys) at positions cache_seqlens[b] + t; q at
    cache_seqlens[b] + t when q_advances (causal or local), else all at cache_seqlens[b]."""
    if cos is None or sin is None:
        raise _C.Error("kvattn.%s: rotary_cos and rotary_sin must be given together but only "
                       "%s is" % (fn, "rotary_cos" if sin is None else "rotary_sin"))
    if k is None:
        raise _C.Error("kvattn.%s: rotary_cos/rotary_sin rotate the new keys: k and v must be "
                       "given too (as in flash-attn)" % fn)
    cshape, sshape = tuple(cos.shape), tuple(sin.shape)
    dim = q.shape[3]
    if len(cshape) != 2 or cshape != sshape:
        raise _C.Error("kvattn.%s: rotary_cos and rotary_sin must both be [seqlen_ro, "
                       "rotary_dim / 2] but are %s and %s" % (fn, list(cshape), list(sshape)))
    rot = 2 * cshape[1]
    if not 0 < rot <= dim:
        raise _C.Error("kvattn.%s: rotary_dim (2 * rotary_cos.shape[1]) must be in [2, head_dim "
                       "= %d] but is %d" % (fn, dim, rot))
    seqlen_q, seqlen_new = q.shape[1], k.shape[1]
    if xp.on_cpu(cache_seqlens):
        need = xp.max_int(cache_seqlens) + max(seqlen_new, seqlen_q if q_advances else 1)
        if need > cshape[0]:
            raise _C.Error("kvattn.%s: rotary_cos has %d positions (seqlen_ro) but positions up "
                           "to %d (max cache_seqlens + seqlen - 1) are rotated"
                           % (fn, cshape[0], need - 1))
    elif cshape[0] < capacity:
        raise _C.Error("kvattn.%s: rotary_cos seqlen_ro must be >= the cache's seqlen (%d) but "
                       "is %d" % (fn, capacity, cshape[0]))
    pos_k = xp.positions(cache_seqlens, seqlen_new, True, cshape[0])
    pos_q = xp.positions(cache_seqlens, seqlen_q, q_advances, cshape[0])
    return (xp.rotate(q, cos, sin, pos_q, rot, interleaved),
            xp.rotate(k, cos, sin, pos_k, rot, interleaved))


class _Ops:
    """The few array operations the general with_kvcache path needs, in q's framework."""

    _tables = {}  # (device, batch) -> int32 [batch, 1] arange, reused across calls

    def __init__(self, like):
        self.like = like
        self.torch = _is_torch(like)
        if self.torch:
            import torch

            self.t = torch
            self.device = like.device
        else:
            import numpy

            self.np = numpy

    def full_int32(self, n, value):
        if self.torch:
            return self.t.full((n,), value, dtype=self.t.int32, device=self.device)
        return self.np.full((n,), value, dtype=self.np.int32)

    def arange_column(self, n):
        if self.torch:
            key = (str(self.device), n)
            table = _Ops._tables.get(key)
            if table is None:
                table = self.t.arange(n, dtype=self.t.int32, device=self.device).reshape(n, 1)
                _Ops._tables[key] = table
            return table
        return self.np.arange(n, dtype=self.np.int32).reshape(n, 1)

    def as_column(self, idx):
        return idx.reshape(-1, 1)

    def on_cpu(self, x):
        return not self.torch or x.device.type == "cpu"

    def max_int(self, x):
        return int(x.max()) if x.shape[0] else 0

    def positions(self, cache_seqlens, n, advance, limit):
        """int64 [batch, n]: cache_seqlens[b] + t (advance) or cache_seqlens[b], clipped to
        [0, limit) so the gather never faults (store_kv reports lengths past the cache)."""
        if self.torch:
            t = self.t
            base = cache_seqlens.to(t.int64).reshape(-1, 1)
            step = t.arange(n, dtype=t.int64, device=self.device)
            return (base + step if advance else base.expand(-1, n)).clamp(0, limit - 1)
        np = self.np
        base = np.asarray(cache_seqlens, dtype=np.int64).reshape(-1, 1)
        step = np.arange(n, dtype=np.int64) if advance else np.zeros(n, np.int64)
        return np.clip(base + step, 0, limit - 1)

    def rotate(self, x, cos, sin, pos, rot, interleaved):
        """x [batch, seqlen, heads, dim] with RoPE at pos [batch, seqlen] on its first rot dims,
        in float32, returned contiguous in x's dtype."""
        half = rot // 2
        if self.torch:
            t = self.t
            c = cos.to(device=self.device, dtype=t.float32)[pos].unsqueeze(2)
            s = sin.to(device=self.device, dtype=t.float32)[pos].unsqueeze(2)
            xf = x[..., :rot].to(t.float32)
            if interleaved:
                x1, x2 = xf[..., 0::2], xf[..., 1::2]
                r = t.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
            else:
                x1, x2 = xf[..., :half], xf[..., half:]
                r = t.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
            return t.cat((r.to(x.dtype), x[..., rot:]), dim=-1).contiguous()
        np = self.np
        c = np.asarray(cos, dtype=np.float32)[pos][:, :, None, :]
        s = np.asarray(sin, dtype=np.float32)[pos][:, :, None, :]
        xf = np.asarray(x[..., :rot], dtype=np.float32)
        r = np.empty_like(xf)
        if interleaved:
            x1, x2 = xf[..., 0::2], xf[..., 1::2]
            r[..., 0::2] = x1 * c - x2 * s
            r[..., 1::2] = x2 * c + x1 * s
        else:
            x1, x2 = xf[..., :half], xf[..., half:]
            r[..., :half] = x1 * c - x2 * s
            r[..., half:] = x2 * c + x1 * s
        out = np.array(x, copy=True, order="C")
        out[..., :rot] = r.astype(x.dtype)
        return out

    def add_int32(self, lens, n):
        if self.torch:
            return (lens + n).to(self.t.int32)
        return (lens + n).astype(self.np.int32)

    def append_slots(self, cache_seqlens, block_table, block_size, num_blocks, seqlen_new):
        """Slots of positions cache_seqlens[b] + i, i < seqlen_new, through block_table.

        Positions past the table or on a negative (padding) block get slot
        num_blocks * block_size, out of range: kvattn's store_kv then throws on the CPU and
        skips and records a device fault on the GPU, instead of writing anywhere.
        """
        width = block_table.shape[1]
        bad = num_blocks * block_size
        if width == 0:  # no block to write into: every new key is out of range
            n = block_table.shape[0] * seqlen_new
            if self.torch:
                return self.t.full((n,), bad, dtype=self.t.int64, device=self.device)
            return self.np.full((n,), bad, dtype=self.np.int64)
        if self.torch:
            t = self.t
            pos = cache_seqlens.to(t.int64).reshape(-1, 1) + t.arange(
                seqlen_new, dtype=t.int64, device=self.device
            )
            col = t.div(pos, block_size, rounding_mode="floor")
            ok = (col < width) & (pos >= 0)
            blk = block_table.to(t.int64).gather(1, col.clamp(0, width - 1))
            ok &= blk >= 0
            slots = blk * block_size + (pos - col * block_size)
            return t.where(ok, slots, t.full_like(slots, bad)).reshape(-1)
        np = self.np
        pos = np.asarray(cache_seqlens, dtype=np.int64).reshape(-1, 1) + np.arange(seqlen_new)
        col = pos // block_size
        ok = (col < width) & (pos >= 0)
        blk = np.take_along_axis(np.asarray(block_table, dtype=np.int64),
                                 np.clip(col, 0, width - 1), axis=1)
        ok &= blk >= 0
        slots = blk * block_size + (pos - col * block_size)
        return np.where(ok, slots, bad).reshape(-1)
