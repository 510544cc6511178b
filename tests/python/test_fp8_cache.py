"""fp8 (e4m3) KV caches through the Python API on the CPU: NumPy uint8 arrays holding e4m3
bytes (NumPy has no fp8 dtype) and, when torch is installed, torch.float8_e4m3fn caches, with
k_scale / v_scale keyword arguments as in vLLM and FlashInfer. The references here are
independent of the C++ encoder: e4m3 values from the format's definition, encoding by nearest
search with ties to the even code."""

import numpy as np
import pytest

import kvattn
from kvref import PagedCase, attention_ref, cu, rel_err


def _e4m3_values():
    """The value of each of the 256 codes (NaN for 0x7f and 0xff)."""
    vals = np.empty(256, np.float64)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 3) & 0xF, c & 7
        if e == 15 and m == 7:
            vals[c] = np.nan
        elif e == 0:
            vals[c] = s * m * 2.0**-9
        else:
            vals[c] = s * (1 + m / 8) * 2.0 ** (e - 7)
    return vals


E4M3 = _e4m3_values()
FINITE = np.array([c for c in range(256) if not np.isnan(E4M3[c]) and c != 0x80])  # +0 only


def encode_ref(x):
    """float32 array -> e4m3 codes: saturate to +-448, nearest value, ties to the even code."""
    x = np.clip(np.asarray(x, np.float32).astype(np.float64), -448.0, 448.0)
    err = np.abs(x[..., None] - E4M3[FINITE])
    best = err.min(axis=-1, keepdims=True)
    cand = np.where(err == best, FINITE, 1 << 20)
    even = np.where(cand % 2 == 0, cand, 1 << 20).min(axis=-1)
    code = np.where(even < (1 << 20), even, cand.min(axis=-1))
    return np.where((code == 0) & np.signbit(x), 0x80, code).astype(np.uint8)


def dequant(codes, scale):
    """[..., Hk, D] codes and a [Hk] scale -> float64 values as kvattn reads them."""
    return E4M3[codes] * np.asarray(scale, np.float64)[:, None]


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % (2**32))


def test_store_kvcache_quantises_like_the_reference_encoder(rng):
    hk, d, nb, bs = 3, 16, 4, 5
    key = (rng.standard_normal((9, hk, d)) * 50).astype(np.float32)
    value = rng.standard_normal((9, hk, d)).astype(np.float32)
    kc = np.full((nb, bs, hk, d), 0xA5, np.uint8)
    vc = np.full((nb, bs, hk, d), 0xA5, np.uint8)
    slots = np.array([3, -1, 0, 19, 7, 8, 12, -1], np.int64)  # 8 of 9 tokens
    k_scale = np.array([0.05, 0.5, 2.0], np.float32)
    kvattn.store_kvcache(key, value, kc, vc, slots, k_scale=k_scale, v_scale=0.01)
    ek = np.full_like(kc, 0xA5)
    ev = np.full_like(vc, 0xA5)
    for i, s in enumerate(slots):
        if s < 0:
            continue
        ek[s // bs, s % bs] = encode_ref(key[i] / k_scale[:, None])
        ev[s // bs, s % bs] = encode_ref(value[i] / np.float32(0.01))
    np.testing.assert_array_equal(kc, ek)
    np.testing.assert_array_equal(vc, ev)


@pytest.mark.parametrize("group", [1, 3, 8])
@pytest.mark.parametrize("block_size", [1, 16, 7])
def test_decode_and_paged_prefill_read_the_stored_bytes(rng, group, block_size):
    hk, d = 2, 32
    h = hk * group
    lens = [1, 54, 0, 97]
    k_seqs = [rng.integers(0, 0x7E, (n, hk, d)).astype(np.uint8) for n in lens]
    v_seqs = [(rng.integers(0, 0x7E, (n, hk, d)) | 0x80 * rng.integers(0, 2, (n, hk, d))).astype(np.uint8)
              for n in lens]
    case = PagedCase(rng, k_seqs, v_seqs, block_size)
    kc = np.ascontiguousarray(case.k_cache.astype(np.uint8) & 0x7E)  # spare slots: finite junk
    vc = np.ascontiguousarray(case.v_cache.astype(np.uint8) & 0x7E)
    for b, (k, v) in enumerate(zip(k_seqs, v_seqs)):  # the sequences' bytes, exactly
        for j in range(len(k)):
            blk = case.block_table[b, j // block_size]
            kc[blk, j % block_size] = k[j]
            vc[blk, j % block_size] = v[j]
    ks = rng.uniform(0.001, 0.02, hk).astype(np.float32)
    vs = rng.uniform(0.001, 0.02, hk).astype(np.float32)

    # Decode, q_len 2 (causal, bottom-right aligned).
    q = rng.standard_normal((len(lens), 2, h, d)).astype(np.float32)
    seqlens = np.maximum(case.lens, 0).astype(np.int32)
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens,
                                         block_table=case.block_table, causal=True,
                                         k_scale=ks, v_scale=vs)
    for b, n in enumerate(lens):
        ref, _ = attention_ref(q[b], dequant(k_seqs[b], ks), dequant(v_seqs[b], vs), True)
        assert rel_err(out[b], ref) < 1e-5 if n else not out[b].any()

    # Paged prefill: each sequence's last Lq of its keys are queries (a prefix hit).
    lq = [min(n, 3) for n in lens]
    qp = rng.standard_normal((sum(lq), h, d)).astype(np.float32)
    outp = kvattn.flash_attn_varlen_func(qp, kc, vc, cu(lq), cu(lens), max(lq), max(lens),
                                         causal=True, block_table=case.block_table,
                                         k_scale=ks, v_scale=vs)
    at = 0
    for b, n in enumerate(lens):
        ref, _ = attention_ref(qp[at:at + lq[b]], dequant(k_seqs[b], ks), dequant(v_seqs[b], vs), True)
        if lq[b]:
            assert rel_err(outp[at:at + lq[b]], ref) < 1e-5
        at += lq[b]


def test_with_kvcache_appends_new_tokens_quantised(rng):
    hk, d, bs = 2, 8, 4
    kc = np.zeros((3, bs, hk, d), np.uint8)
    vc = np.zeros((3, bs, hk, d), np.uint8)
    table = np.array([[2, 0]], np.int32)
    q = rng.standard_normal((1, 1, 4, d)).astype(np.float32)
    k = rng.standard_normal((1, 1, hk, d)).astype(np.float32)
    v = rng.standard_normal((1, 1, hk, d)).astype(np.float32)
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, k=k, v=v, cache_seqlens=5,
                                         block_table=table, causal=True, k_scale=0.25,
                                         v_scale=np.array([0.5], np.float32))
    np.testing.assert_array_equal(kc[0, 1], encode_ref(k[0, 0] / 0.25))
    np.testing.assert_array_equal(vc[0, 1], encode_ref(v[0, 0] / 0.5))
    keys = np.concatenate([kc[2], kc[0, :2]])  # positions 0..5
    vals = np.concatenate([vc[2], vc[0, :2]])
    ref, _ = attention_ref(q[0], dequant(keys, [0.25] * hk), dequant(vals, [0.5] * hk), True)
    assert rel_err(out[0], ref) < 1e-5


def test_bad_scales_name_the_argument(rng):
    k = rng.standard_normal((2, 2, 8)).astype(np.float32)
    kc = np.zeros((2, 4, 2, 8), np.uint8)
    slots = np.array([0, 1], np.int32)
    with pytest.raises(kvattn.Error, match=r"k_scale num_kv_heads must be 2 but is 3"):
        kvattn.store_kvcache(k, k, kc, kc, slots, k_scale=np.ones(3, np.float32))
    with pytest.raises(kvattn.Error, match=r"v_scale\[0\] must be finite and > 0 but is 0"):
        kvattn.store_kvcache(k, k, kc, kc, slots, v_scale=0.0)
    with pytest.raises(kvattn.Error, match=r"k_scale dtype must be float32 but is"):
        kvattn.store_kvcache(k, k, kc, kc, slots, k_scale=np.ones(2, np.int32))
    fc = np.zeros((2, 4, 2, 8), np.float32)
    with pytest.raises(kvattn.Error, match=r"k_scale applies to float8_e4m3 caches only"):
        kvattn.store_kvcache(k, k, fc, fc, slots, k_scale=1.0)


def test_torch_float8_cache_matches_the_uint8_view(rng):
    torch = pytest.importorskip("torch")
    hk, d = 2, 16
    key = torch.randn(5, hk, d)
    kc = torch.zeros(2, 4, hk, d, dtype=torch.float8_e4m3fn)
    vc = torch.zeros(2, 4, hk, d, dtype=torch.float8_e4m3fn)
    slots = torch.tensor([0, 1, 2, 5, 6], dtype=torch.int64)
    kvattn.store_kvcache(key, key, kc, vc, slots, k_scale=0.5, v_scale=torch.tensor([0.25]))
    ref = (key / 0.5).to(torch.float8_e4m3fn)  # torch's own e4m3 rounding (saturation aside)
    assert torch.equal(kc.view(torch.uint8).reshape(-1, hk, d)[[0, 1, 2, 5, 6]],
                       ref.view(torch.uint8))
    q = torch.randn(1, 1, 4, d)
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=torch.tensor([7], dtype=torch.int32),
                                         block_table=torch.tensor([[0, 1]], dtype=torch.int32),
                                         k_scale=0.5, v_scale=0.25, causal=True)
    kd = kc.to(torch.float32).reshape(-1, hk, d)[:7] * 0.5
    vd = vc.to(torch.float32).reshape(-1, hk, d)[:7] * 0.25
    r, _ = attention_ref(q[0].double().numpy(), kd.double().numpy(), vd.double().numpy(), True)
    assert rel_err(out[0].numpy(), r) < 1e-5
