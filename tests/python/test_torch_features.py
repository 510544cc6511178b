"""torch inputs for issue 18's arguments on the CPU: autograd-safe inputs (forward runs, a
backward raises), rotary_cos/rotary_sin in float32 and bfloat16, ALiBi, cache_leftpad, against
float64 references (kvref). Skips without torch.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kvattn  # noqa: E402
from kvref import attention_ref, cu, rel_err, rotary_ref, varlen_ref  # noqa: E402


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % (2**32))


def T(x, dtype=torch.float32):
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype)


def F(t):
    return t.detach().to("cpu", torch.float64).numpy()


# ---- autograd -------------------------------------------------------------------------------


def test_varlen_requires_grad_runs_forward_then_backward_raises(rng):
    q = T(rng.standard_normal((6, 4, 64))).requires_grad_()
    k = T(rng.standard_normal((9, 2, 64))).requires_grad_()
    v = T(rng.standard_normal((9, 2, 64)))
    cq, ck = torch.tensor([0, 2, 6], dtype=torch.int32), torch.tensor([0, 4, 9], dtype=torch.int32)
    out, lse = kvattn.flash_attn_varlen_func(q, k, v, cq, ck, 4, 5, causal=True,
                                             return_softmax_lse=True)
    assert out.requires_grad and out.grad_fn is not None
    with torch.no_grad():
        plain = kvattn.flash_attn_varlen_func(q, k, v, cq, ck, 4, 5, causal=True)
    assert not plain.requires_grad
    assert torch.equal(out.detach(), plain)  # same forward, on the same (uncopied) memory
    ref, _ = varlen_ref(F(q), F(k), F(v), cu([2, 4]), cu([4, 5]), True)
    assert rel_err(F(out), ref) < 1e-5
    with pytest.raises(NotImplementedError, match="flash_attn_varlen_func has no backward"):
        out.sum().backward()
    assert q.grad is None


def test_kvcache_decode_requires_grad(rng):
    """The decode hot path (paged, no new keys): q requiring grad takes the forward-only route."""
    q = T(rng.standard_normal((2, 1, 4, 64))).requires_grad_()
    kc = T(rng.standard_normal((4, 16, 2, 64)))
    vc = T(rng.standard_normal((4, 16, 2, 64)))
    bt = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    lens = torch.tensor([20, 5], dtype=torch.int32)
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=bt,
                                         causal=True)
    assert out.grad_fn is not None
    with torch.no_grad():
        plain = kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=bt,
                                               causal=True)
    assert torch.equal(out.detach(), plain)
    with pytest.raises(NotImplementedError, match="flash_attn_with_kvcache has no backward"):
        (out * 2).sum().backward()


def test_kvcache_append_requires_grad_and_out_refused(rng):
    q = T(rng.standard_normal((1, 2, 2, 32))).requires_grad_()
    kc = T(rng.standard_normal((1, 10, 1, 32)))
    vc = T(rng.standard_normal((1, 10, 1, 32)))
    kn = T(rng.standard_normal((1, 2, 1, 32))).requires_grad_()
    vn = T(rng.standard_normal((1, 2, 1, 32)))
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=4, causal=True)
    assert torch.equal(kc[0, 4:6], kn[0].detach())  # written in place through the detached view
    keys = np.concatenate([F(kc)[0, :6]])
    ref, _ = attention_ref(F(q)[0], keys, F(vc)[0, :6], True)
    assert rel_err(F(out)[0], ref) < 1e-5
    with pytest.raises(NotImplementedError, match="out="):
        kvattn.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=4,
                                       out=torch.empty(1, 2, 2, 32))
    with pytest.raises(NotImplementedError, match="no backward"):
        out.sum().backward()


def test_store_kvcache_requires_grad_writes_detached(rng):
    key = T(rng.standard_normal((3, 2, 16))).requires_grad_()
    kc = torch.zeros(2, 4, 2, 16)
    vc = torch.zeros(2, 4, 2, 16)
    kvattn.store_kvcache(key, key * 2, kc, vc, torch.tensor([5, -1, 0], dtype=torch.int32))
    assert torch.equal(kc[1, 1], key[0].detach()) and torch.equal(kc[0, 0], key[2].detach())
    assert torch.equal(vc[1, 1], 2 * key[0].detach())
    assert not kc.requires_grad


# ---- rotary, ALiBi, leftpad with torch tensors ------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_kvcache_rotary_torch(rng, dtype, interleaved, causal):
    batch, s_cache, hk, h, d, rd, s_new = 2, 24, 1, 3, 64, 32, 3
    before = np.array([5, 11], np.int32)
    kc = T(rng.standard_normal((batch, s_cache, hk, d)), dtype)
    vc = T(rng.standard_normal((batch, s_cache, hk, d)), dtype)
    angle = rng.uniform(0, 2 * np.pi, (s_cache, rd // 2))
    cos, sin = T(np.cos(angle), dtype), T(np.sin(angle), dtype)
    q = T(rng.standard_normal((batch, s_new, h, d)), dtype)
    kn = T(rng.standard_normal((batch, s_new, hk, d)), dtype)
    vn = T(rng.standard_normal((batch, s_new, hk, d)), dtype)
    kc0, vc0 = F(kc), F(vc)
    slopes = T(rng.uniform(0, 0.5, (batch, h)))
    pads = torch.tensor([2, 0], dtype=torch.int32)
    out = kvattn.flash_attn_with_kvcache(
        q, kc, vc, k=kn, v=vn, rotary_cos=cos, rotary_sin=sin, cache_seqlens=T(before, torch.int32),
        cache_leftpad=pads, causal=causal, rotary_interleaved=interleaved, alibi_slopes=slopes)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for b in range(batch):
        n, p = before[b], int(pads[b])
        pos = n + np.arange(s_new)
        k_rot = rotary_ref(F(kn)[b], F(cos), F(sin), pos, interleaved)
        q_rot = rotary_ref(F(q)[b], F(cos), F(sin), pos if causal else np.full(s_new, n),
                           interleaved)
        assert rel_err(F(kc)[b, n : n + s_new], k_rot) < tol
        keys = np.concatenate([kc0[b, p:n], F(kc)[b, n : n + s_new]])  # the stored (rounded) keys
        vals = np.concatenate([vc0[b, p:n], F(vn)[b]])
        ref, _ = attention_ref(q_rot, keys, vals, causal, None, (-1, -1), 0.0, F(slopes)[b])
        assert rel_err(F(out)[b], ref) < tol


# ---- vLLM's seqused_k with torch tensors ----------------------------------------------------


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_varlen_seqused_k_torch(rng, device):
    """seqused_k (int32 [batch]) in place of cu_seqlens_k: equal to the cu_seqlens_k call, on
    the tensor's device (the prefix sum runs there)."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    lq, lk = [3, 1], [20, 9]
    q = T(rng.standard_normal((sum(lq), 4, 64)), dtype).to(device)
    k = T(rng.standard_normal((sum(lk), 2, 64)), dtype).to(device)
    v = T(rng.standard_normal((sum(lk), 2, 64)), dtype).to(device)
    cq = torch.tensor(cu(lq), device=device)
    ck = torch.tensor(cu(lk), device=device)
    used = torch.tensor(lk, dtype=torch.int32, device=device)
    want = kvattn.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=True)
    got = kvattn.flash_attn_varlen_func(q=q, k=k, v=v, cu_seqlens_q=cq, max_seqlen_q=max(lq),
                                        seqused_k=used, max_seqlen_k=max(lk), causal=True)
    assert torch.equal(got, want)
