"""window_size and softcap through the flash-attn entry points, on the CPU with NumPy arrays.

Each case checks flash-attn's documented semantics against a float64 NumPy reference
(kvref.attention_ref): query i (bottom-right aligned) attends to keys
[i + Lk - Lq - left, i + Lk - Lq + right] inclusive, -1 meaning unbounded, causal meaning
right = 0; softcap replaces each scaled score s by softcap * tanh(s / softcap). A row that sees
no key outputs zeros with lse -inf.
"""

import numpy as np
import pytest

import kvattn
from kvref import PagedCase, attention_ref, cu, max_abs, rel_err, varlen_ref

TOL = 1e-5

WINDOWS = [(-1, -1), (0, 0), (3, -1), (16, 0), (2, 5), (-1, 4), (1000, 1000)]


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


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softcap", [0.0, 5.0])
def test_varlen_packed(rng, window, causal, softcap):
    hk, group, d = 2, 3, 64
    h = hk * group
    lq, lk = [9, 1, 30, 12, 0], [40, 1, 30, 5, 4]  # Lq > Lk in the fourth: rows see nothing
    q = f32(rng.standard_normal((sum(lq), h, d)) * 2)
    k = f32(rng.standard_normal((sum(lk), hk, d)))
    v = f32(rng.standard_normal((sum(lk), hk, d)))
    cq, ck = cu(lq), cu(lk)
    out = np.full_like(q, np.nan)
    out, lse = kvattn.flash_attn_varlen_func(
        q, k, v, cq, ck, max(lq), max(lk), causal=causal, window_size=window, softcap=softcap,
        return_softmax_lse=True, out=out)
    ref, ref_lse = varlen_ref(q, k, v, cq, ck, causal, None, window, softcap)
    _check(out, lse, ref, ref_lse)


@pytest.mark.parametrize("block_size", [1, 16, 256])
@pytest.mark.parametrize("window", [(0, -1), (7, 0), (2, 3), (-1, 2)])
@pytest.mark.parametrize("softcap", [0.0, 2.0])
def test_varlen_paged(rng, block_size, window, softcap):
    hk, group, d = 1, 4, 128
    h = hk * group
    lk, lq = [300, 7, 3], [20, 7, 6]
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    case = PagedCase(rng, k_seqs, v_seqs, block_size)
    q = f32(rng.standard_normal((sum(lq), h, d)))
    cq, ck = cu(lq), cu(lk)
    out, lse = kvattn.flash_attn_varlen_func(
        q, f32(case.k_cache), f32(case.v_cache), cq, ck, max(lq), max(lk), causal=True,
        window_size=window, softcap=softcap, block_table=case.block_table,
        return_softmax_lse=True)
    kf = np.concatenate([f32(x) for x in k_seqs]).astype(np.float64)
    vf = np.concatenate([f32(x) for x in v_seqs]).astype(np.float64)
    ref, ref_lse = varlen_ref(q, kf, vf, cq, ck, True, None, window, softcap)
    _check(out, lse, ref, ref_lse)


@pytest.mark.parametrize("seqlen_q", [1, 3])
@pytest.mark.parametrize("block_size", [1, 16, 256])
@pytest.mark.parametrize("window", [(0, -1), (5, 0), (64, -1), (4, 2)])
@pytest.mark.parametrize("softcap", [0.0, 30.0])
def test_kvcache_paged(rng, seqlen_q, block_size, window, softcap):
    hk, group, d = 2, 2, 64
    h = hk * group
    lens = [1, 100, 0, 700]
    lens = [max(n, seqlen_q) if n else 0 for n in lens]
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    case = PagedCase(rng, k_seqs, v_seqs, block_size)
    q = f32(rng.standard_normal((len(lens), seqlen_q, h, d)) * 3)
    out, lse = kvattn.flash_attn_with_kvcache(
        q, f32(case.k_cache), f32(case.v_cache), cache_seqlens=case.lens,
        block_table=case.block_table, causal=True, window_size=window, softcap=softcap,
        return_softmax_lse=True)
    for i, n in enumerate(lens):
        ref, ref_lse = attention_ref(q[i], f32(k_seqs[i]), f32(v_seqs[i]), True, None, window,
                                     softcap)
        if n == 0:
            assert np.all(out[i] == 0) and np.all(np.isneginf(lse[i]))
            continue
        _check(out[i], lse[i], ref, ref_lse)


def test_kvcache_dense_append_with_window(rng):
    """Dense cache, new k/v appended first: the window counts the appended keys too."""
    b, s_cache, hk, h, d, s_new = 2, 40, 1, 2, 16, 3
    kc = f32(rng.standard_normal((b, s_cache, hk, d)))
    vc = f32(rng.standard_normal((b, s_cache, hk, d)))
    before = np.array([20, 1], np.int32)
    k_new = f32(rng.standard_normal((b, s_new, hk, d)))
    v_new = f32(rng.standard_normal((b, s_new, hk, d)))
    q = f32(rng.standard_normal((b, s_new, h, d)))
    kc0, vc0 = kc.copy(), vc.copy()
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, k=k_new, v=v_new, cache_seqlens=before,
                                         causal=True, window_size=(4, 0), softcap=1.5)
    for i in range(b):
        n = before[i]
        keys = np.concatenate([kc0[i, :n], k_new[i]])
        vals = np.concatenate([vc0[i, :n], v_new[i]])
        ref, _ = attention_ref(q[i], keys, vals, True, None, (4, 0), 1.5)
        assert rel_err(out[i], ref) < TOL


def test_window_semantics_by_hand():
    """Lq = 2, Lk = 5, window (1, 0): row 0 sees keys 2..3, row 1 sees keys 3..4 (flash-attn's
    docstring formula); with V = one-hot key index and equal scores the output is the mean of
    the seen indices."""
    lq, lk, d = 2, 5, 8
    q = np.zeros((lq, 1, d), np.float32)
    k = np.zeros((lk, 1, d), np.float32)
    v = np.zeros((lk, 1, d), np.float32)
    for j in range(lk):
        v[j, 0, j] = 1.0
    out = kvattn.flash_attn_varlen_func(q, k, v, cu([lq]), cu([lk]), lq, lk, window_size=(1, 0))
    want = np.zeros((lq, 1, d), np.float32)
    want[0, 0, [2, 3]] = 0.5
    want[1, 0, [3, 4]] = 0.5
    assert np.allclose(out, want, atol=1e-7)


def test_softcap_semantics_by_hand():
    """Two keys with scaled scores 3 and 0, softcap 1: weights softmax([tanh(3), 0])."""
    d = 4
    q = np.zeros((1, 1, d), np.float32)
    q[0, 0, 0] = 3.0
    k = np.zeros((2, 1, d), np.float32)
    k[0, 0, 0] = 1.0
    v = np.zeros((2, 1, d), np.float32)
    v[0, 0, 0] = 1.0
    v[1, 0, 1] = 1.0
    out, lse = kvattn.flash_attn_varlen_func(q, k, v, cu([1]), cu([2]), 1, 2, softmax_scale=1.0,
                                             softcap=1.0, return_softmax_lse=True)
    t = np.tanh(3.0)
    p0 = np.exp(t) / (np.exp(t) + 1.0)
    assert abs(out[0, 0, 0] - p0) < 1e-6 and abs(out[0, 0, 1] - (1 - p0)) < 1e-6
    assert abs(lse[0, 0] - np.log(np.exp(t) + 1.0)) < 1e-6


def test_causal_overrides_right_bound(rng):
    """flash-attn sets right = 0 under causal: (w, w) with causal equals (w, 0)."""
    q = f32(rng.standard_normal((10, 2, 16)))
    k = f32(rng.standard_normal((14, 2, 16)))
    cq, ck = cu([10]), cu([14])
    a = kvattn.flash_attn_varlen_func(q, k, k, cq, ck, 10, 14, causal=True, window_size=(3, 3))
    b = kvattn.flash_attn_varlen_func(q, k, k, cq, ck, 10, 14, causal=True, window_size=(3, 0))
    assert np.array_equal(a, b)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(window_size=(-2, 0)), "window_size left must be >= -1"),
        (dict(window_size=(0, -5)), "window_size right must be >= -1"),
        (dict(window_size=(1, 2, 3)), "window_size must be a pair"),
        (dict(window_size=(1.5, 0)), "window_size must be a pair"),
        (dict(softcap=-1.0), "softcap must be finite and >= 0"),
        (dict(softcap=float("nan")), "softcap must be finite and >= 0"),
        (dict(softcap="big"), "softcap must be a number"),
    ],
)
def test_bad_values_raise_kvattn_error(rng, kwargs, match):
    q = f32(rng.standard_normal((3, 2, 8)))
    c = cu([3])
    with pytest.raises(kvattn.Error, match=match):
        kvattn.flash_attn_varlen_func(q, q, q, c, c, 3, 3, **kwargs)
    kc = f32(rng.standard_normal((2, 4, 1, 8)))
    q4 = f32(rng.standard_normal((1, 1, 1, 8)))
    with pytest.raises(kvattn.Error, match=match):
        kvattn.flash_attn_with_kvcache(q4, kc, kc, cache_seqlens=np.array([5], np.int32),
                                       block_table=np.array([[0, 1]], np.int32), **kwargs)
