"""kvattn's Python API on the CPU with NumPy arrays (what CI runs: no torch, no GPU)."""

import numpy as np
import pytest

import kvattn
from kvref import PagedCase, attention_ref, cu, max_abs, rel_err, varlen_ref

TOL = 1e-5  # float32 (DESIGN §5)


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % (2**32))


def f32(x):
    return np.ascontiguousarray(x, dtype=np.float32)


# ---- the boundary --------------------------------------------------------------------------


def test_zero_copy_views(rng):
    a = f32(rng.standard_normal((7, 4, 16)))
    ptr, dtype, dev, shape, strides, stream, fast = kvattn._C.inspect(a)
    assert ptr == a.ctypes.data and dtype == "float32" and dev == "cpu"
    assert shape == (7, 4, 16) and strides == (64, 16, 1) and stream == 0
    s = a[1::2]  # a strided view: same memory, token stride doubled
    ptr, _, _, shape, strides, _, _ = kvattn._C.inspect(s)
    assert ptr == a.ctypes.data + 64 * 4 and shape == (3, 4, 16) and strides == (128, 16, 1)


def test_error_is_runtime_and_value_error():
    assert issubclass(kvattn.Error, RuntimeError) and issubclass(kvattn.Error, ValueError)


def test_non_array_argument_is_type_error():
    k = np.zeros((2, 1, 8), np.float32)
    kc = np.zeros((2, 4, 1, 8), np.float32)
    with pytest.raises(TypeError, match="slot_mapping"):
        kvattn.store_kvcache(k, k, kc, kc, [0, 1])


# ---- store_kvcache ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("slot_dtype", [np.int32, np.int64])
def test_store_kvcache_bit_exact_negative_slots(rng, dtype, slot_dtype):
    tokens, hk, d, nb, bs = 9, 2, 64, 5, 4
    # key/value cut out of a fused buffer: token stride 3 * hk * d
    fused = rng.standard_normal((tokens, 3, hk, d)).astype(dtype)
    key, value = fused[:, 1], fused[:, 2]
    kc = np.full((nb, bs, hk, d), 7, dtype)
    vc = np.full((nb, bs, hk, d), 7, dtype)
    slots = rng.permutation(nb * bs)[:tokens].astype(slot_dtype)
    slots[[2, 5]] = -1
    before_k, before_v = kc.copy(), vc.copy()
    kvattn.store_kvcache(key, value, kc, vc, slots)
    exp_k, exp_v = before_k.reshape(-1, hk, d), before_v.reshape(-1, hk, d)
    for i, s in enumerate(slots):
        if s >= 0:
            exp_k[s] = key[i]
            exp_v[s] = value[i]
    assert np.array_equal(kc.reshape(-1, hk, d).view(np.uint8), exp_k.view(np.uint8))
    assert np.array_equal(vc.reshape(-1, hk, d).view(np.uint8), exp_v.view(np.uint8))


def test_store_kvcache_shorter_slot_mapping_and_bad_input(rng):
    key = f32(rng.standard_normal((4, 2, 8)))
    kc = np.zeros((2, 4, 2, 8), np.float32)
    vc = np.zeros((2, 4, 2, 8), np.float32)
    kvattn.store_kvcache(key, key, kc, vc, np.array([3, 0], np.int32))  # pads ignored
    assert np.array_equal(kc.reshape(-1, 2, 8)[3], key[0])
    with pytest.raises(kvattn.Error, match="slot_mapping"):
        kvattn.store_kvcache(key, key, kc, vc, np.array([0, 8], np.int32))  # out of range
    with pytest.raises(kvattn.Error, match="head_dim"):
        kvattn.store_kvcache(key, key, np.zeros((2, 4, 2, 4), np.float32), vc, np.array([0], np.int32))
    with pytest.raises(kvattn.Error, match="stride"):  # head stride != head_dim
        kvattn.store_kvcache(f32(rng.standard_normal((4, 2, 16)))[:, :, :8], key, kc, vc,
                             np.array([0], np.int32))


# ---- flash_attn_varlen_func ------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("group", [1, 4])
def test_varlen_packed(rng, causal, group):
    hk, d = 2, 32
    h = hk * group
    lq = [5, 1, 17, 0, 9]
    lk = [5, 3, 17, 4, 12] if not causal else [5, 1, 17, 0, 9]
    q = f32(rng.standard_normal((sum(lq), h, d)))
    k = f32(rng.standard_normal((sum(lk), hk, d)))
    v = f32(rng.standard_normal((sum(lk), hk, d)))
    cq, ck = cu(lq), cu(lk)
    out = kvattn.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=causal)
    ref, _ = varlen_ref(q, k, v, cq, ck, causal)
    assert out.shape == q.shape and out.dtype == np.float32
    assert rel_err(out, ref) < TOL


@pytest.mark.parametrize("block_size", [1, 16, 256])
def test_varlen_paged_prefix_hit(rng, block_size):
    """Keys of each sequence come from the paged cache (cached prefix + this step's tokens)."""
    hk, group, d = 2, 2, 16
    h = hk * group
    lk = [40, 7, 300]
    lq = [8, 7, 1]  # the first and last sequences hit a cached prefix
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    case = PagedCase(rng, k_seqs, v_seqs, block_size)
    q = f32(rng.standard_normal((sum(lq), h, d)))
    cq, ck = cu(lq), cu(lk)
    out, lse = kvattn.flash_attn_varlen_func(
        q, f32(case.k_cache), f32(case.v_cache), cq, ck, max(lq), max(lk), softmax_scale=0.3,
        causal=True, block_table=case.block_table, return_softmax_lse=True)
    kf = [f32(x).astype(np.float64) for x in k_seqs]
    vf = [f32(x).astype(np.float64) for x in v_seqs]
    ref, ref_lse = varlen_ref(q, np.concatenate(kf), np.concatenate(vf), cq, ck, True, 0.3)
    assert rel_err(out, ref) < TOL
    assert lse.shape == (h, sum(lq)) and lse.dtype == np.float32
    assert max_abs(lse, ref_lse) < 1e-4


def test_varlen_seqused_k(rng):
    """vLLM's seqused_k (keyword, cu_seqlens_k omitted): the same result as cu_seqlens_k, paged
    (a stale cu_seqlens_k beside a block table is ignored, as vLLM's kernels do) and packed."""
    hk, group, d = 2, 3, 16
    lk, lq = [33, 5, 70], [4, 5, 1]
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    case = PagedCase(rng, k_seqs, v_seqs, 16)
    q = f32(rng.standard_normal((sum(lq), hk * group, d)))
    cq, ck = cu(lq), cu(lk)
    used = np.array(lk, np.int32)
    kc, vc = f32(case.k_cache), f32(case.v_cache)
    want = kvattn.flash_attn_varlen_func(q, kc, vc, cq, ck, max(lq), max(lk), causal=True,
                                         block_table=case.block_table)
    got = kvattn.flash_attn_varlen_func(q=q, k=kc, v=vc, cu_seqlens_q=cq, max_seqlen_q=max(lq),
                                        seqused_k=used, max_seqlen_k=max(lk), causal=True,
                                        block_table=case.block_table)
    assert np.array_equal(got, want)
    stale = cu([1, 1, 1])
    got = kvattn.flash_attn_varlen_func(q, kc, vc, cq, stale, max(lq), max(lk), causal=True,
                                        block_table=case.block_table, seqused_k=used)
    assert np.array_equal(got, want)
    kp = f32(np.concatenate(k_seqs))
    vp = f32(np.concatenate(v_seqs))
    packed = kvattn.flash_attn_varlen_func(q, kp, vp, cq, None, max(lq), max(lk), causal=True,
                                           seqused_k=used)
    assert np.array_equal(packed, kvattn.flash_attn_varlen_func(q, kp, vp, cq, ck, max(lq),
                                                                max(lk), causal=True))
    with pytest.raises(kvattn.Error, match="give cu_seqlens_k"):
        kvattn.flash_attn_varlen_func(q, kp, vp, cq, None, max(lq), max(lk))
    with pytest.raises(kvattn.Error, match="max_seqlen_k is required"):
        kvattn.flash_attn_varlen_func(q, kp, vp, cq, ck, max(lq))
    with pytest.raises(kvattn.Error, match="seqused_k must be an int32"):
        kvattn.flash_attn_varlen_func(q, kp, vp, cq, None, max(lq), max(lk),
                                      seqused_k=used.astype(np.int64))
    with pytest.raises(NotImplementedError, match="seqused_k"):
        kvattn.flash_attn_varlen_func(q, kp, vp, cq, ck, max(lq), max(lk), seqused_k=used)


def test_varlen_return_conventions_and_out(rng):
    q = f32(rng.standard_normal((6, 2, 8)))
    k = f32(rng.standard_normal((6, 2, 8)))
    c = cu([6])
    o1 = kvattn.flash_attn_varlen_func(q, k, k, c, c, 6, 6)
    o2, lse, probs = kvattn.flash_attn_varlen_func(q, k, k, c, c, 6, 6, return_attn_probs=True)
    assert probs is None and lse.shape == (2, 6)
    out = np.full_like(q, np.nan)
    o3 = kvattn.flash_attn_varlen_func(q, k, k, c, c, 6, 6, out=out)
    assert o3 is out
    assert np.array_equal(o1, o2) and np.array_equal(o1, out)


def test_softmax_scale_zero_is_uniform(rng):
    q = f32(rng.standard_normal((4, 1, 8)))
    k = f32(rng.standard_normal((4, 1, 8)))
    v = f32(rng.standard_normal((4, 1, 8)))
    c = cu([4])
    out, lse = kvattn.flash_attn_varlen_func(q, k, v, c, c, 4, 4, softmax_scale=0.0,
                                             return_softmax_lse=True)
    assert rel_err(out, np.broadcast_to(v.mean(axis=0), out.shape)) < TOL
    assert max_abs(lse, np.log(4.0)) < 1e-6


# ---- flash_attn_with_kvcache -----------------------------------------------------------------


@pytest.mark.parametrize("seqlen_q", [1, 3])
@pytest.mark.parametrize("block_size", [1, 16])
def test_kvcache_paged(rng, seqlen_q, block_size):
    hk, group, d = 2, 8, 16
    h = hk * group
    lens = [1, 33, 0, 100]  # 0: a padded sequence, outputs zeros
    lens = [max(n, 0) for n in lens]
    if seqlen_q > 1:
        lens = [max(n, seqlen_q) if n else 0 for n in lens]
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    case = PagedCase(rng, k_seqs, v_seqs, block_size)
    b = len(lens)
    q = f32(rng.standard_normal((b, seqlen_q, h, d)))
    out, lse = kvattn.flash_attn_with_kvcache(
        q, f32(case.k_cache), f32(case.v_cache), cache_seqlens=case.lens,
        block_table=case.block_table, causal=True, return_softmax_lse=True)
    assert out.shape == q.shape and out.dtype == np.float32
    assert lse.shape == (b, h, seqlen_q) and lse.dtype == np.float32
    for i in range(b):
        ref, ref_lse = attention_ref(q[i], f32(k_seqs[i]), f32(v_seqs[i]), True)
        if lens[i] == 0:
            assert np.all(out[i] == 0)
            continue
        assert rel_err(out[i], ref) < TOL
        assert max_abs(lse[i], ref_lse) < 1e-4


def test_kvcache_dense_cache_append_kv(rng):
    """A [batch, seqlen_cache, kv_heads, dim] cache, new k/v appended first (flash-attn)."""
    b, s_cache, hk, h, d, s_new = 3, 20, 1, 4, 16, 2
    kc = f32(rng.standard_normal((b, s_cache, hk, d)))
    vc = f32(rng.standard_normal((b, s_cache, hk, d)))
    before = np.array([5, 0, 18], np.int32)  # keys already cached (flash-attn's cache_seqlens)
    k_new = f32(rng.standard_normal((b, s_new, hk, d)))
    v_new = f32(rng.standard_normal((b, s_new, hk, d)))
    q = f32(rng.standard_normal((b, s_new, h, d)))
    kc0, vc0 = kc.copy(), vc.copy()
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, k=k_new, v=v_new, cache_seqlens=before,
                                         causal=True)
    assert np.array_equal(before, [5, 0, 18])  # not modified, as in flash-attn
    for i in range(b):
        n = before[i]
        assert np.array_equal(kc[i, n : n + s_new], k_new[i])
        assert np.array_equal(kc[i, :n], kc0[i, :n]) and np.array_equal(kc[i, n + s_new :], kc0[i, n + s_new :])
        keys = np.concatenate([kc0[i, :n], k_new[i]])
        vals = np.concatenate([vc0[i, :n], v_new[i]])
        ref, _ = attention_ref(q[i], keys, vals, True)
        assert rel_err(out[i], ref) < TOL


def test_kvcache_int_seqlens_batch_idx_and_default(rng):
    b, s_cache, hk, d = 2, 12, 2, 8
    kc = f32(rng.standard_normal((4, s_cache, hk, d)))
    vc = f32(rng.standard_normal((4, s_cache, hk, d)))
    q = f32(rng.standard_normal((b, 1, hk, d)))
    idx = np.array([3, 1], np.int32)
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=7, cache_batch_idx=idx)
    for i in range(b):
        ref, _ = attention_ref(q[i], kc[idx[i], :7], vc[idx[i], :7], False)
        assert rel_err(out[i], ref) < TOL
    full = kvattn.flash_attn_with_kvcache(q, kc[:2], vc[:2])  # None: the whole cache
    for i in range(b):
        ref, _ = attention_ref(q[i], kc[i], vc[i], False)
        assert rel_err(full[i], ref) < TOL


def test_kvcache_append_past_capacity_raises(rng):
    kc = np.zeros((1, 4, 1, 8), np.float32)
    k = np.ones((1, 2, 1, 8), np.float32)
    q = np.ones((1, 1, 1, 8), np.float32)
    with pytest.raises(kvattn.Error, match=r"position 4, past the block table's 4 slots"):
        kvattn.flash_attn_with_kvcache(q, kc, kc.copy(), k=k, v=k, cache_seqlens=3)
    assert not kc.any()  # nothing written


@pytest.mark.parametrize(
    "lens,table,k_shape,match",
    [
        ([2, 31], [[0, 1], [2, 3]], (2, 2, 2, 8), r"sequence 1 .*cache_seqlens\[1\] = 31"),
        ([2, -1], [[0, 1], [2, 3]], (2, 2, 2, 8), r"negative position \(cache_seqlens\[1\] = -1\)"),
        ([2, 15], [[0, 1], [2, -1]], (2, 2, 2, 8), r"block_table\[1\]\[1\] = -1, a padding"),
        ([2, 15], [[0, 1], [2, 8]], (2, 2, 2, 8), r"block_table\[1\]\[1\] = 8, outside the cache's 8"),
        ([0, 0], np.zeros((2, 0), np.int32), (2, 2, 2, 8), r"past the block table's 0 slots"),
        ([2, 2], [[0, 1], [2, 3]], (1, 2, 2, 8), r"k must have shape \[batch = 2"),
        ([2, 2], [[0, 1], [2, 3]], (2, 2, 1, 8), r"k must have shape"),
        ([2], [[0, 1], [2, 3]], (2, 2, 2, 8), r"cache_seqlens must have shape \[batch = 2\]"),
    ],
)
def test_kvcache_append_errors_name_what_the_caller_passed(rng, lens, table, k_shape, match):
    """Lengths and shapes of an append are named as the caller gave them (cache_seqlens, the
    block table, k), not as store_kv's slot_mapping or a reshape error; nothing is written."""
    kc = np.zeros((8, 16, 2, 8), np.float32)
    vc = np.zeros_like(kc)
    q = f32(rng.standard_normal((2, 1, 2, 8)))
    k = f32(rng.standard_normal(k_shape))
    with pytest.raises(kvattn.Error, match=match):
        kvattn.flash_attn_with_kvcache(q, kc, vc, k=k, v=k.copy(), block_table=np.array(table, np.int32),
                                       cache_seqlens=np.array(lens, np.int32))
    assert not kc.any() and not vc.any()


def test_kvcache_seqlens_of_another_batch_names_cache_seqlens(rng):
    """The decode path without an append (straight to the extension) names cache_seqlens too."""
    kc = f32(rng.standard_normal((4, 16, 2, 8)))
    q = f32(rng.standard_normal((2, 1, 2, 8)))
    bt = np.array([[0, 1], [2, 3]], np.int32)
    for lens in (np.array([3], np.int32), np.array([3, 3, 3], np.int32), np.array([[3, 3]], np.int32)):
        with pytest.raises(kvattn.Error, match=r"cache_seqlens must have shape \[batch = 2\]"):
            kvattn.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=lens, block_table=bt)


@pytest.mark.parametrize("lens", [2**31, 2**32 + 5, -1])
def test_kvcache_int_seqlens_out_of_int32_raises(rng, lens):
    kc = f32(rng.standard_normal((2, 16, 1, 8)))
    q = f32(rng.standard_normal((2, 1, 1, 8)))
    with pytest.raises(kvattn.Error, match=r"cache_seqlens must be in \[0, 2\^31\)"):
        kvattn.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=lens)


def test_readonly_array_error_names_the_argument(rng):
    """NumPy's legacy __dlpack__() refuses read-only arrays: the error names the argument and
    says what to pass (a writable copy), keeping NumPy's message as the cause."""
    q = f32(rng.standard_normal((3, 2, 8)))
    k = q.copy()
    k.setflags(write=False)
    c = cu([3])
    with pytest.raises(TypeError, match=r"kvattn: k could not be exported through DLPack") as e:
        kvattn.flash_attn_varlen_func(q, k, q, c, c, 3, 3)
    assert e.value.__cause__ is not None
    out = kvattn.flash_attn_varlen_func(q, np.array(k), q, c, c, 3, 3)  # the advice works
    assert np.isfinite(out).all()


def test_kvcache_bad_seqlens_dtype(rng):
    kc = np.zeros((2, 4, 1, 8), np.float32)
    q = np.ones((1, 1, 1, 8), np.float32)
    with pytest.raises(kvattn.Error, match="cache_seqlens dtype must be int32"):
        kvattn.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=np.array([2], np.int64),
                                       block_table=np.array([[0]], np.int32))


# ---- unsupported arguments -------------------------------------------------------------------


def _varlen_args(rng):
    q = f32(rng.standard_normal((3, 2, 8)))
    c = cu([3])
    return (q, q, q, c, c, 3, 3)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(dropout_p=0.1), "dropout_p"),
    ],
)
def test_varlen_unsupported(rng, kwargs, name):
    with pytest.raises(NotImplementedError, match=name):
        kvattn.flash_attn_varlen_func(*_varlen_args(rng), **kwargs)


def test_varlen_window_equivalents(rng):
    args = _varlen_args(rng)
    causal = kvattn.flash_attn_varlen_func(*args, causal=True)
    assert np.array_equal(kvattn.flash_attn_varlen_func(*args, window_size=(-1, 0)), causal)
    assert np.array_equal(kvattn.flash_attn_varlen_func(*args, causal=True, window_size=(-1, 5)), causal)
    kvattn.flash_attn_varlen_func(*args, deterministic=True)  # forward-only: accepted


@pytest.mark.parametrize("name", ["k", "num_splits"])
def test_kvcache_unsupported(rng, name):
    kc = f32(rng.standard_normal((2, 4, 1, 8)))
    q = f32(rng.standard_normal((1, 1, 1, 8)))
    bt = np.array([[0, 1]], np.int32)
    lens = np.array([5], np.int32)
    t = np.zeros((1, 1, 1, 8), np.float32)
    kwargs = {
        "k": dict(k=t),  # k without v
        "num_splits": dict(num_splits=4),
    }[name]
    exc = ValueError if name == "k" else NotImplementedError
    with pytest.raises(exc, match=name):
        kvattn.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=lens, block_table=bt, **kwargs)
