"""alibi_slopes, head_dim 80/96/256, and flash_attn_with_kvcache's rotary_cos/rotary_sin,
cache_batch_idx and cache_leftpad, on the CPU with NumPy arrays, against float64 references.

The references follow flash-attn's documented semantics and its own test reference
(tests/test_flash_attn.py): ALiBi adds -slope * |i + Lk - Lq - j| to the (capped) score;
rotary rotates the new keys at positions cache_seqlens + t and q at cache_seqlens + t when causal
or local, else all of q at cache_seqlens; cache_leftpad drops the keys before it (the mask and
ALiBi count keys from there). Fresh random inputs per case; outputs start as NaN.
"""

import numpy as np
import pytest

import kvattn
from kvref import PagedCase, attention_ref, cu, max_abs, rel_err, rotary_ref, varlen_ref

TOL = 1e-5


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % (2**32))


def f32(x):
    return np.ascontiguousarray(x, dtype=np.float32)


def _check(out, lse, ref, ref_lse):
    assert rel_err(out, ref) < TOL
    dead = np.isneginf(ref_lse)
    assert np.array_equal(np.isneginf(lse), dead), "lse -inf exactly where no key is seen"
    assert max_abs(np.where(dead, 0, lse), np.where(dead, 0, ref_lse)) < 1e-4


def _slopes(rng, shape):
    return f32(rng.uniform(0.0, 1.0, shape))


# ---- ALiBi ----------------------------------------------------------------------------------


@pytest.mark.parametrize("per_seq", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window,softcap,group,d", [((-1, -1), 0.0, 1, 64), ((4, 2), 0.0, 3, 80),
                                                    ((3, -1), 5.0, 6, 96),
                                                    ((500, 500), 0.0, 8, 256),
                                                    ((0, 0), 1.0, 2, 128)])
def test_varlen_packed_alibi(rng, per_seq, causal, window, softcap, group, d):
    hk = 1 if group >= 6 else 2
    h = hk * group
    lq, lk = [9, 1, 30, 12, 3], [40, 1, 30, 5, 0]  # Lq > Lk, Lk = 0
    q = f32(rng.standard_normal((sum(lq), h, d)) * 2)
    k = f32(rng.standard_normal((sum(lk), hk, d)))
    v = f32(rng.standard_normal((sum(lk), hk, d)))
    slopes = _slopes(rng, (len(lq), h) if per_seq else (h,))
    cq, ck = cu(lq), cu(lk)
    out = np.full_like(q, np.nan)
    out, lse = kvattn.flash_attn_varlen_func(
        q, k, v, cq, ck, max(lq), max(lk), causal=causal, window_size=window, softcap=softcap,
        alibi_slopes=slopes, return_softmax_lse=True, out=out)
    ref, ref_lse = varlen_ref(q, k, v, cq, ck, causal, None, window, softcap, slopes)
    _check(out, lse, ref, ref_lse)


@pytest.mark.parametrize("block_size", [1, 16, 48])
@pytest.mark.parametrize("per_seq", [False, True])
def test_varlen_paged_alibi(rng, block_size, per_seq):
    hk, group, d = 2, 3, 96
    h = hk * group
    lk, lq = [300, 7, 3, 0], [20, 7, 6, 2]
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    case = PagedCase(rng, k_seqs, v_seqs, block_size)
    q = f32(rng.standard_normal((sum(lq), h, d)))
    slopes = _slopes(rng, (len(lq), h) if per_seq else (h,))
    cq, ck = cu(lq), cu(lk)
    out, lse = kvattn.flash_attn_varlen_func(
        q, f32(case.k_cache), f32(case.v_cache), cq, ck, max(lq), max(lk), causal=True,
        alibi_slopes=slopes, block_table=case.block_table, return_softmax_lse=True)
    kf = np.concatenate([f32(x) for x in k_seqs]).astype(np.float64)
    vf = np.concatenate([f32(x) for x in v_seqs]).astype(np.float64)
    ref, ref_lse = varlen_ref(q, kf, vf, cq, ck, True, None, (-1, -1), 0.0, slopes)
    _check(out, lse, ref, ref_lse)


@pytest.mark.parametrize("seqlen_q", [1, 3])
@pytest.mark.parametrize("block_size", [1, 16, 48])
@pytest.mark.parametrize("window,softcap", [((-1, -1), 0.0), ((20, 0), 30.0)])
def test_kvcache_paged_alibi(rng, seqlen_q, block_size, window, softcap):
    hk, group, d = 1, 4, 256
    h = hk * group
    lens = [max(n, seqlen_q) if n else 0 for n in [1, 100, 0, 333]]
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    case = PagedCase(rng, k_seqs, v_seqs, block_size)
    q = f32(rng.standard_normal((len(lens), seqlen_q, h, d)) * 3)
    slopes = _slopes(rng, (len(lens), h))
    out, lse = kvattn.flash_attn_with_kvcache(
        q, f32(case.k_cache), f32(case.v_cache), cache_seqlens=case.lens,
        block_table=case.block_table, causal=True, window_size=window, softcap=softcap,
        alibi_slopes=slopes, return_softmax_lse=True)
    for i, n in enumerate(lens):
        ref, ref_lse = attention_ref(q[i], f32(k_seqs[i]), f32(v_seqs[i]), True, None, window,
                                     softcap, slopes[i])
        if n == 0:
            assert np.all(out[i] == 0) and np.all(np.isneginf(lse[i]))
            continue
        _check(out[i], lse[i], ref, ref_lse)


def test_alibi_by_hand():
    """One query, three keys, equal scores, slope 1, not causal, Lq = 1, Lk = 3: the bias is
    -|2 - j|, so the weights are e^-2, e^-1, 1; V holds the key index."""
    d = 8
    q = np.zeros((1, 1, d), np.float32)
    k = np.zeros((3, 1, d), np.float32)
    v = np.zeros((3, 1, d), np.float32)
    v[:, 0, 0] = [0, 1, 2]
    out, lse = kvattn.flash_attn_varlen_func(q, k, v, cu([1]), cu([3]), 1, 3,
                                             alibi_slopes=np.ones(1, np.float32),
                                             return_softmax_lse=True)
    w = np.exp([-2.0, -1.0, 0.0])
    assert abs(out[0, 0, 0] - (w[1] + 2 * w[2]) / w.sum()) < 1e-6
    assert abs(lse[0, 0] - np.log(w.sum())) < 1e-6


@pytest.mark.parametrize(
    "slopes,match",
    [
        (np.zeros(3, np.float32), "alibi_slopes num_heads must be 2 but is 3"),
        (np.zeros((2, 2), np.float32), "alibi_slopes num_seqs must be 1 but is 2"),
        (np.zeros(2, np.float16), "alibi_slopes dtype must be float32"),
        (np.zeros(2, np.float64), "alibi_slopes: .*float32"),
        (np.zeros((1, 1, 2), np.float32), r"alibi_slopes must be \[num_heads\] or"),
        (np.array([0.5, np.inf], np.float32), r"alibi_slopes\[1\] must be finite"),
    ],
)
def test_bad_alibi_raises_kvattn_error(rng, slopes, match):
    q = f32(rng.standard_normal((3, 2, 8)))
    c = cu([3])
    with pytest.raises(kvattn.Error, match=match):
        kvattn.flash_attn_varlen_func(q, q, q, c, c, 3, 3, alibi_slopes=slopes)
    kc = f32(rng.standard_normal((2, 4, 1, 8)))
    q4 = f32(rng.standard_normal((1, 1, 2, 8)))
    with pytest.raises(kvattn.Error, match=match):
        kvattn.flash_attn_with_kvcache(q4, kc, kc, cache_seqlens=np.array([5], np.int32),
                                       block_table=np.array([[0, 1]], np.int32),
                                       alibi_slopes=slopes)


# ---- head_dim ----------------------------------------------------------------------------


@pytest.mark.parametrize("d", [80, 96, 256])
def test_head_dims_both_entry_points(rng, d):
    hk, h = 2, 6
    lq, lk = [5, 17], [33, 17]
    q = f32(rng.standard_normal((sum(lq), h, d)))
    k = f32(rng.standard_normal((sum(lk), hk, d)))
    v = f32(rng.standard_normal((sum(lk), hk, d)))
    cq, ck = cu(lq), cu(lk)
    out = kvattn.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=True)
    ref, _ = varlen_ref(q, k, v, cq, ck, True)
    assert rel_err(out, ref) < TOL
    kc = np.full((2, 40, hk, d), np.nan, np.float32)
    vc = np.full((2, 40, hk, d), np.nan, np.float32)
    before = np.array([10, 0], np.int32)
    for b in range(2):
        kc[b, : before[b]] = rng.standard_normal((before[b], hk, d))
        vc[b, : before[b]] = rng.standard_normal((before[b], hk, d))
    kn = f32(rng.standard_normal((2, 3, hk, d)))
    vn = f32(rng.standard_normal((2, 3, hk, d)))
    q4 = f32(rng.standard_normal((2, 3, h, d)))
    kc0, vc0 = kc.copy(), vc.copy()
    out = kvattn.flash_attn_with_kvcache(q4, kc, vc, k=kn, v=vn, cache_seqlens=before,
                                         causal=True)
    for b in range(2):
        n = before[b]
        ref, _ = attention_ref(q4[b], np.concatenate([kc0[b, :n], kn[b]]),
                               np.concatenate([vc0[b, :n], vn[b]]), True)
        assert rel_err(out[b], ref) < TOL


# ---- rotary, cache_batch_idx, cache_leftpad ----------------------------------------------


def _dense_cache(rng, rows, s_cache, hk, d, lens):
    """A dense [rows, s_cache, hk, d] cache: random keys below each row's length, NaN after."""
    kc = np.full((rows, s_cache, hk, d), np.nan, np.float32)
    vc = np.full((rows, s_cache, hk, d), np.nan, np.float32)
    for r, n in enumerate(lens):
        kc[r, :n] = rng.standard_normal((n, hk, d))
        vc[r, :n] = rng.standard_normal((n, hk, d))
    return kc, vc


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("rotary_dim_of", [lambda d: d, lambda d: d // 2])
@pytest.mark.parametrize("causal,window", [(True, (-1, -1)), (False, (-1, -1)),
                                           (False, (6, 3)), (False, (1000, 1000))])
@pytest.mark.parametrize("seqlen_new", [1, 3])
def test_kvcache_rotary_dense(rng, interleaved, rotary_dim_of, causal, window, seqlen_new):
    batch, s_cache, hk, group, d = 3, 50, 2, 3, 64
    h = hk * group
    rd = rotary_dim_of(d)
    before = np.array([7, 0, 30], np.int32)
    kc, vc = _dense_cache(rng, batch, s_cache, hk, d, before)
    angle = rng.uniform(0, 2 * np.pi, (s_cache, rd // 2))
    cos, sin = f32(np.cos(angle)), f32(np.sin(angle))
    q = f32(rng.standard_normal((batch, seqlen_new, h, d)))
    kn = f32(rng.standard_normal((batch, seqlen_new, hk, d)))
    vn = f32(rng.standard_normal((batch, seqlen_new, hk, d)))
    kc0, vc0 = kc.copy(), vc.copy()
    q0 = q.copy()
    out = kvattn.flash_attn_with_kvcache(
        q, kc, vc, k=kn, v=vn, rotary_cos=cos, rotary_sin=sin, cache_seqlens=before,
        causal=causal, window_size=window, rotary_interleaved=interleaved)
    assert np.array_equal(q, q0), "q is not modified in place"
    # flash-attn: q advances with the new tokens when causal or local (a window bound shorter
    # than the cache); (1000, 1000) is not local for a 50-slot cache.
    local = any(0 <= w < s_cache for w in window)
    for b in range(batch):
        n = before[b]
        pos_k = n + np.arange(seqlen_new)
        pos_q = pos_k if (causal or local) else np.full(seqlen_new, n)
        k_rot = rotary_ref(kn[b], cos, sin, pos_k, interleaved)
        q_rot = rotary_ref(q[b], cos, sin, pos_q, interleaved)
        assert max_abs(kc[b, n : n + seqlen_new], k_rot) < 1e-5, "rotated keys in the cache"
        assert np.array_equal(vc[b, n : n + seqlen_new], vn[b]), "values are not rotated"
        keys = np.concatenate([kc0[b, :n], k_rot])
        vals = np.concatenate([vc0[b, :n], vn[b]])
        ref, _ = attention_ref(q_rot, keys, vals, causal, None, window)
        assert rel_err(out[b], ref) < TOL


@pytest.mark.parametrize("block_size", [1, 16, 48])
def test_kvcache_rotary_paged_alibi_leftpad(rng, block_size):
    """Paged cache, rotary (NeoX, rotary_dim 32 of 80), ALiBi [batch, H] and cache_leftpad
    together; the keys before each leftpad hold NaN and must not be read."""
    hk, group, d, rd, seqlen_new = 1, 6, 80, 32, 2
    h = hk * group
    before = [40, 5, 0]
    pads = np.array([13, 5, 0], np.int32)
    cap_blocks = -(-(max(before) + seqlen_new) // block_size)
    k_seqs = [rng.standard_normal((cap_blocks * block_size, hk, d)) for _ in before]
    v_seqs = [rng.standard_normal((cap_blocks * block_size, hk, d)) for _ in before]
    for b, p in enumerate(pads):
        k_seqs[b][:p] = np.nan
        v_seqs[b][:p] = np.nan
    case = PagedCase(rng, k_seqs, v_seqs, block_size)
    kc, vc = f32(case.k_cache), f32(case.v_cache)
    seqlen_ro = cap_blocks * block_size
    angle = rng.uniform(0, 2 * np.pi, (seqlen_ro, rd // 2))
    cos, sin = f32(np.cos(angle)), f32(np.sin(angle))
    q = f32(rng.standard_normal((len(before), seqlen_new, h, d)))
    kn = f32(rng.standard_normal((len(before), seqlen_new, hk, d)))
    vn = f32(rng.standard_normal((len(before), seqlen_new, hk, d)))
    slopes = _slopes(rng, (len(before), h))
    lens = np.array(before, np.int32)
    out, lse = kvattn.flash_attn_with_kvcache(
        q, kc, vc, k=kn, v=vn, rotary_cos=cos, rotary_sin=sin, cache_seqlens=lens,
        cache_leftpad=pads, block_table=case.block_table, causal=True, alibi_slopes=slopes,
        rotary_interleaved=False, return_softmax_lse=True)
    for b, n in enumerate(before):
        pos = n + np.arange(seqlen_new)
        k_rot = rotary_ref(kn[b], cos, sin, pos, False)
        q_rot = rotary_ref(q[b], cos, sin, pos, False)
        keys = np.concatenate([f32(k_seqs[b][pads[b] : n]), k_rot])
        vals = np.concatenate([f32(v_seqs[b][pads[b] : n]), vn[b]])
        ref, ref_lse = attention_ref(q_rot, keys, vals, True, None, (-1, -1), 0.0, slopes[b])
        _check(out[b], lse[b], ref, ref_lse)


def test_kvcache_batch_idx_leftpad_dense(rng):
    """flash-attn's test shape: a dense cache indexed by cache_batch_idx, with cache_leftpad,
    new k/v appended at cache_seqlens, ALiBi [H], causal."""
    rows, s_cache, hk, group, d, seqlen_new = 5, 30, 2, 2, 64, 3
    h = hk * group
    idx = np.array([4, 0, 2], np.int32)
    before = np.array([12, 20, 3], np.int32)
    pads = np.array([4, 0, 3], np.int32)
    lens_by_row = [0] * rows
    for r, n in zip(idx, before):
        lens_by_row[r] = n
    kc, vc = _dense_cache(rng, rows, s_cache, hk, d, lens_by_row)
    for r, p in zip(idx, pads):
        kc[r, :p] = np.nan
        vc[r, :p] = np.nan
    kc0, vc0 = kc.copy(), vc.copy()
    q = f32(rng.standard_normal((3, seqlen_new, h, d)))
    kn = f32(rng.standard_normal((3, seqlen_new, hk, d)))
    vn = f32(rng.standard_normal((3, seqlen_new, hk, d)))
    slopes = _slopes(rng, (h,))
    out = np.full_like(q, np.nan)
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=before,
                                         cache_batch_idx=idx, cache_leftpad=pads, causal=True,
                                         alibi_slopes=slopes, out=out)
    for b in range(3):
        r, n, p = idx[b], before[b], pads[b]
        assert np.array_equal(kc[r, n : n + seqlen_new], kn[b])
        keys = np.concatenate([kc0[r, p:n], kn[b]])
        vals = np.concatenate([vc0[r, p:n], vn[b]])
        ref, _ = attention_ref(q[b], keys, vals, True, None, (-1, -1), 0.0, slopes)
        assert rel_err(out[b], ref) < TOL


def _kvcache_call(rng, **kwargs):
    kc = f32(rng.standard_normal((2, 8, 1, 16)))
    q = f32(rng.standard_normal((2, 1, 1, 16)))
    kn = f32(rng.standard_normal((2, 1, 1, 16)))
    base = dict(k=kn, v=kn, cache_seqlens=np.array([2, 3], np.int32))
    base.update(kwargs)
    return kvattn.flash_attn_with_kvcache(q, kc, kc.copy(), **base)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(rotary_cos=np.ones((8, 4), np.float32)), "rotary_cos and rotary_sin must be given together"),
        (dict(rotary_cos=np.ones((8, 4), np.float32), rotary_sin=np.ones((8, 2), np.float32)),
         r"must both be \[seqlen_ro, rotary_dim / 2\]"),
        (dict(rotary_cos=np.ones((8, 9), np.float32), rotary_sin=np.ones((8, 9), np.float32)),
         r"rotary_dim .* must be in \[2, head_dim = 16\] but is 18"),
        (dict(rotary_cos=np.ones((3, 4), np.float32), rotary_sin=np.ones((3, 4), np.float32)),
         "rotary_cos has 3 positions"),
        (dict(rotary_cos=np.ones((8, 4), np.float32), rotary_sin=np.ones((8, 4), np.float32),
              k=None, v=None), "k and v must be given too"),
        (dict(cache_batch_idx=np.array([0, 2], np.int32)), r"cache_batch_idx\[1\] must be in"),
        (dict(cache_batch_idx=np.array([0, 1], np.int64)), "cache_batch_idx must be int32"),
        (dict(cache_batch_idx=np.array([0], np.int32)), r"cache_batch_idx must be int32 \[batch\]"),
        (dict(cache_leftpad=np.array([0, -1], np.int32)), r"cache_leftpad\[1\] must be in >= 0"),
        (dict(cache_leftpad=np.array([0, 5], np.int32)),
         r"cache_leftpad\[1\] must be <= cache_seqlens\[1\] \+ seqlen_new = 4 but is 5"),
        (dict(cache_leftpad=np.array([0, 1, 2], np.int32)), "cache_leftpad must be int32"),
    ],
)
def test_bad_rotary_batch_idx_leftpad(rng, kwargs, match):
    with pytest.raises(kvattn.Error, match=match):
        _kvcache_call(rng, **kwargs)


def test_bad_leftpad_writes_nothing(rng):
    kc = f32(rng.standard_normal((2, 8, 1, 16)))
    kc0 = kc.copy()
    q = f32(rng.standard_normal((2, 1, 1, 16)))
    kn = f32(rng.standard_normal((2, 1, 1, 16)))
    with pytest.raises(kvattn.Error, match="cache_leftpad"):
        kvattn.flash_attn_with_kvcache(q, kc, kc.copy(), k=kn, v=kn,
                                       cache_seqlens=np.array([2, 3], np.int32),
                                       cache_leftpad=np.array([4, 0], np.int32))
    assert np.array_equal(kc, kc0)


def test_still_unsupported_raise_not_implemented(rng):
    kc = f32(rng.standard_normal((2, 4, 1, 8)))
    q = f32(rng.standard_normal((1, 1, 1, 8)))
    with pytest.raises(NotImplementedError, match="cache_batch_idx"):
        kvattn.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=np.array([3], np.int32),
                                       block_table=np.array([[0, 1]], np.int32),
                                       cache_batch_idx=np.array([0], np.int32))
