"""flash-attn's batched and packed entry points (kvattn/batched.py) on the CPU with NumPy,
against the float64 reference: flash_attn_func, the kv- and qkv-packed forms and their varlen
forms, with GQA, causal and not, window, softcap, ALiBi, return_attn_probs and out=."""

import numpy as np
import pytest

import kvattn
from kvref import attention_ref, cu, rel_err, varlen_ref

TOL = 1e-5  # float32


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % (2**32))


def f32(x):
    return np.ascontiguousarray(x, dtype=np.float32)


def batched_ref(q, k, v, causal, **kw):
    """Per batch row: out [B, Sq, H, D], lse [B, H, Sq]."""
    outs, lses = zip(*[attention_ref(q[b], k[b], v[b], causal, **kw) for b in range(q.shape[0])])
    return np.stack(outs), np.stack(lses)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(1, 1), (7, 7), (5, 19), (19, 5), (64, 64)])
@pytest.mark.parametrize("h,hk", [(4, 4), (6, 2)])
def test_flash_attn_func(rng, causal, sq, sk, h, hk):
    b, d = 3, 32
    q = f32(rng.standard_normal((b, sq, h, d)))
    k = f32(rng.standard_normal((b, sk, hk, d)))
    v = f32(rng.standard_normal((b, sk, hk, d)))
    out, lse, probs = kvattn.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    ref, ref_lse = batched_ref(q, k, v, causal)
    assert out.shape == (b, sq, h, d) and out.dtype == np.float32
    assert lse.shape == (b, h, sq) and probs is None
    assert rel_err(out, ref) < TOL
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.max(np.abs(lse[finite] - ref_lse[finite]), initial=0.0) < 1e-4
    plain = kvattn.flash_attn_func(q, k, v, causal=causal)
    assert np.array_equal(plain, out)


def test_flash_attn_func_features_and_out(rng):
    b, sq, sk, h, hk, d = 2, 9, 13, 4, 2, 16
    q = f32(rng.standard_normal((b, sq, h, d)))
    k = f32(rng.standard_normal((b, sk, hk, d)))
    v = f32(rng.standard_normal((b, sk, hk, d)))
    slopes = f32(rng.uniform(0.1, 1.0, (b, h)))
    kw = dict(scale=0.3, window=(4, 1), softcap=2.0)
    ref = np.stack([attention_ref(q[i], k[i], v[i], True, alibi=slopes[i], **kw)[0]
                    for i in range(b)])
    out = np.full((b, sq, h, d), np.nan, np.float32)
    got = kvattn.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True, window_size=(4, 1),
                                 softcap=2.0, alibi_slopes=slopes, out=out)
    assert rel_err(got, ref) < TOL
    assert rel_err(out, ref) < TOL  # written in place
    with pytest.raises(kvattn.Error, match="out must be contiguous"):
        kvattn.flash_attn_func(q, k, v, out=np.zeros((b, sq, h, 2 * d), np.float32)[..., ::2])


def test_packed_forms(rng):
    b, s, h, d = 2, 11, 4, 32
    qkv = f32(rng.standard_normal((b, s, 3, h, d)))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    ref, _ = batched_ref(q, k, v, True)
    assert rel_err(kvattn.flash_attn_qkvpacked_func(qkv, causal=True), ref) < TOL
    kv = np.ascontiguousarray(qkv[:, :, 1:])
    assert rel_err(kvattn.flash_attn_kvpacked_func(f32(q), kv, causal=True), ref) < TOL
    # varlen forms over the same rows, one sequence a batch row
    c = cu([s] * b)
    total = qkv.reshape(b * s, 3, h, d)
    vref, vlse = varlen_ref(total[:, 0], total[:, 1], total[:, 2], c, c, True)
    out, lse, _ = kvattn.flash_attn_varlen_qkvpacked_func(total, c, s, causal=True,
                                                           return_attn_probs=True)
    assert rel_err(out, vref) < TOL and lse.shape == (h, b * s)
    assert rel_err(lse, vlse) < 1e-5
    out = kvattn.flash_attn_varlen_kvpacked_func(f32(total[:, 0]), np.ascontiguousarray(
        total[:, 1:]), c, c, s, s, causal=True)
    assert rel_err(out, vref) < TOL


def test_shapes_are_named():
    q = np.zeros((2, 3, 4, 8), np.float32)
    with pytest.raises(kvattn.Error, match="q must be"):
        kvattn.flash_attn_func(q[0], q, q)
    with pytest.raises(kvattn.Error, match="with one batch and head_dim"):
        kvattn.flash_attn_func(q, q[:1], q[:1])
    with pytest.raises(kvattn.Error, match="kv must stack 2 tensors"):
        kvattn.flash_attn_kvpacked_func(q, np.zeros((2, 3, 3, 4, 8), np.float32))
    with pytest.raises(kvattn.Error, match="qkv must be"):
        kvattn.flash_attn_qkvpacked_func(q)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        kvattn.flash_attn_func(q, q, q, dropout_p=0.1)
