"""kvattn's flash-attn API with torch tensors, against a float64 reference.

CUDA cases (bf16, fp16) run where torch sees a GPU and kvattn was built with CUDA, and skip
otherwise; the CPU cases (float32, bf16) run wherever torch is installed.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kvattn  # noqa: E402
from kvref import PagedCase, attention_ref, cu, max_abs, rel_err, varlen_ref  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and kvattn.cuda_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (or kvattn built without CUDA)")

CUDA = pytest.param("cuda", marks=needs_cuda)
DEV_DTYPES = [
    pytest.param("cuda", torch.bfloat16, marks=needs_cuda, id="cuda-bf16"),
    pytest.param("cuda", torch.float16, marks=needs_cuda, id="cuda-fp16"),
    pytest.param("cpu", torch.float32, id="cpu-f32"),
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
]
GPU_DTYPES = DEV_DTYPES[:2]


def tol(dtype):
    return (1e-5, 1e-4) if dtype == torch.float32 else (1e-2, 6e-2)  # (rel L2, max abs)


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % (2**32))


def T(x, dtype, device):
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype).to(device)


def F(t):
    """The float64 values a tensor holds (after rounding to its dtype)."""
    return t.detach().to("cpu", torch.float64).numpy()


def check(out, ref, dtype, what=""):
    r, a = tol(dtype)
    e, m = rel_err(F(out), ref), max_abs(F(out), ref)
    assert e < r and m < a, "%s rel err %.3g (< %g), max abs %.3g (< %g)" % (what, e, r, m, a)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


# ---- flash_attn_varlen_func ------------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", DEV_DTYPES)
@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_varlen_packed_causal(rng, device, dtype, group, head_dim):
    hk = 2
    h = hk * group
    lens = [1, 54, 97, 17] if device == "cuda" else [1, 21, 9]
    x = rng.standard_normal((sum(lens), h + 2 * hk, head_dim))  # a fused qkv buffer
    qkv = T(x, dtype, device)
    q, k, v = qkv[:, :h], qkv[:, h : h + hk], qkv[:, h + hk :]  # token stride (h+2hk)*dim
    c = T(cu(lens), torch.int32, device)
    out = kvattn.flash_attn_varlen_func(q, k, v, c, c, max(lens), max(lens), causal=True)
    assert out.shape == q.shape and out.dtype == dtype and out.device == q.device
    assert out.is_contiguous()
    ref, _ = varlen_ref(F(q), F(k), F(v), cu(lens), cu(lens), True)
    sync(device)
    check(out, ref, dtype)


@pytest.mark.parametrize("device,dtype", DEV_DTYPES)
@pytest.mark.parametrize("block_size", [1, 16, 256])
@pytest.mark.parametrize("group", [1, 8])
def test_varlen_paged_prefix_hits(rng, device, dtype, block_size, group):
    """Prefill whose keys are a cached prefix plus this step's tokens, read from the pages."""
    hk, d = 2, 128 if device == "cuda" else 64
    h = hk * group
    if device == "cuda":
        lk, lq = [1000, 97, 54, 300, 1], [200, 97, 0, 1, 1]
    else:
        lk, lq = [70, 9, 33, 1], [12, 9, 0, 1]
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lk]
    case = PagedCase(rng, k_seqs, v_seqs, block_size)
    kc, vc = T(case.k_cache, dtype, device), T(case.v_cache, dtype, device)
    q = T(rng.standard_normal((sum(lq), h, d)), dtype, device)
    cq, ck = cu(lq), cu(lk)
    out = torch.full_like(q, float("nan"))
    o, lse = kvattn.flash_attn_varlen_func(
        q, kc, vc, T(cq, torch.int32, device), T(ck, torch.int32, device), max(lq), max(lk),
        softmax_scale=1 / math.sqrt(d), causal=True, block_table=T(case.block_table, torch.int32, device),
        return_softmax_lse=True, out=out)
    assert o is out
    assert lse.shape == (h, sum(lq)) and lse.dtype == torch.float32 and lse.device == q.device
    # the reference reads the keys back from the (rounded) pages
    kr = np.concatenate([F(kc)[case.block_table[b]].reshape(-1, hk, d)[: lk[b]] for b in range(len(lk))])
    vr = np.concatenate([F(vc)[case.block_table[b]].reshape(-1, hk, d)[: lk[b]] for b in range(len(lk))])
    ref, ref_lse = varlen_ref(F(q), kr, vr, cq, ck, True)
    sync(device)
    check(o, ref, dtype)
    assert max_abs(F(lse), ref_lse) < (1e-4 if dtype == torch.float32 else 2e-2)


@pytest.mark.parametrize("device,dtype", DEV_DTYPES)
def test_varlen_rows_without_keys_are_zero(rng, device, dtype):
    # Lq > Lk with causal: the first Lq - Lk queries see no key (bottom-right alignment)
    lq, lk, h, d = [6], [2], 2, 64
    q = T(rng.standard_normal((6, h, d)), dtype, device)
    k = T(rng.standard_normal((2, h, d)), dtype, device)
    o, lse, probs = kvattn.flash_attn_varlen_func(
        q, k, k, T(cu(lq), torch.int32, device), T(cu(lk), torch.int32, device), 6, 2,
        causal=True, return_attn_probs=True)
    sync(device)
    assert probs is None
    assert torch.all(o[:4] == 0) and torch.all(torch.isneginf(lse[:, :4]))
    ref, _ = attention_ref(F(q), F(k), F(k), True)
    check(o, ref, dtype)


# ---- flash_attn_with_kvcache -----------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", DEV_DTYPES)
@pytest.mark.parametrize("batch", [1, 3, 17])
@pytest.mark.parametrize("block_size", [1, 16, 256])
@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_kvcache_decode_paged(rng, device, dtype, batch, block_size, group):
    hk = 2 if group < 8 else 1
    d = 128 if group % 2 == 0 else 64
    h = hk * group
    hi = 1000 if device == "cuda" else 80
    lens = rng.integers(1, hi, size=batch)
    lens[batch // 2] = 0 if batch > 1 else lens[0]  # a padded sequence outputs zeros
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    case = PagedCase(rng, k_seqs, v_seqs, block_size, min_width=2)
    kc, vc = T(case.k_cache, dtype, device), T(case.v_cache, dtype, device)
    q = T(rng.standard_normal((batch, 1, h, d)), dtype, device)
    out, lse = kvattn.flash_attn_with_kvcache(
        q, kc, vc, cache_seqlens=T(case.lens, torch.int32, device),
        block_table=T(case.block_table, torch.int32, device), softmax_scale=1 / math.sqrt(d),
        causal=True, return_softmax_lse=True)
    assert out.shape == (batch, 1, h, d) and out.dtype == dtype and out.device == q.device
    assert lse.shape == (batch, h, 1) and lse.dtype == torch.float32 and lse.is_contiguous()
    sync(device)
    for b in range(batch):
        if lens[b] == 0:
            assert torch.all(out[b] == 0)
            continue
        kr = F(kc)[case.block_table[b]].reshape(-1, hk, d)[: lens[b]]
        vr = F(vc)[case.block_table[b]].reshape(-1, hk, d)[: lens[b]]
        ref, ref_lse = attention_ref(F(q[b]), kr, vr, True)
        check(out[b], ref, dtype, "seq %d (len %d)" % (b, lens[b]))
        assert max_abs(F(lse[b]), ref_lse) < (1e-4 if dtype == torch.float32 else 2e-2)


@pytest.mark.parametrize("device,dtype", DEV_DTYPES)
@pytest.mark.parametrize("seqlen_q", [2, 5])
def test_kvcache_multi_query_causal(rng, device, dtype, seqlen_q):
    """seqlen_q > 1 (speculative verification): bottom-right aligned causal mask."""
    batch, hk, h, d, bs = 3, 2, 8, 64, 16
    lens = np.array([seqlen_q, 40, 77])
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    case = PagedCase(rng, k_seqs, k_seqs, bs)
    kc, vc = T(case.k_cache, dtype, device), T(case.v_cache, dtype, device)
    q = T(rng.standard_normal((batch, seqlen_q, h, d)), dtype, device)
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=T(case.lens, torch.int32, device),
                                         block_table=T(case.block_table, torch.int32, device),
                                         causal=True)
    sync(device)
    for b in range(batch):
        kr = F(kc)[case.block_table[b]].reshape(-1, hk, d)[: lens[b]]
        vr = F(vc)[case.block_table[b]].reshape(-1, hk, d)[: lens[b]]
        ref, _ = attention_ref(F(q[b]), kr, vr, True)
        check(out[b], ref, dtype)


@pytest.mark.parametrize("device,dtype", DEV_DTYPES)
def test_kvcache_dense_cache_with_append(rng, device, dtype):
    """flash-attn's non-paged cache + k/v appended at cache_seqlens (counted before the append)."""
    batch, s_cache, hk, h, d, s_new = 4, 64, 2, 4, 64, 1
    kc = T(rng.standard_normal((batch, s_cache, hk, d)), dtype, device)
    vc = T(rng.standard_normal((batch, s_cache, hk, d)), dtype, device)
    kc0, vc0 = kc.clone(), vc.clone()
    before = T(np.array([0, 5, 63 - s_new, 31]), torch.int32, device)
    kn = T(rng.standard_normal((batch, s_new, hk, d)), dtype, device)
    vn = T(rng.standard_normal((batch, s_new, hk, d)), dtype, device)
    q = T(rng.standard_normal((batch, s_new, h, d)), dtype, device)
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=before, causal=True)
    sync(device)
    assert torch.equal(before.cpu(), torch.tensor([0, 5, 63 - s_new, 31], dtype=torch.int32))
    for b in range(batch):
        n = int(before[b])
        assert torch.equal(kc[b, n : n + s_new], kn[b]) and torch.equal(vc[b, n : n + s_new], vn[b])
        assert torch.equal(kc[b, :n], kc0[b, :n])
        keys = np.concatenate([F(kc0[b, :n]), F(kn[b])])
        vals = np.concatenate([F(vc0[b, :n]), F(vn[b])])
        ref, _ = attention_ref(F(q[b]), keys, vals, True)
        check(out[b], ref, dtype)


@pytest.mark.parametrize("device,dtype", DEV_DTYPES)
def test_kvcache_paged_with_append(rng, device, dtype):
    batch, hk, h, d, bs = 3, 1, 8, 64, 16
    lens = np.array([15, 16, 40])  # appends cross a block boundary, start one, fill one
    k_seqs = [rng.standard_normal((n + 1, hk, d)) for n in lens]
    case = PagedCase(rng, k_seqs, k_seqs, bs)
    kc, vc = T(case.k_cache, dtype, device), T(case.v_cache, dtype, device)
    kn = T(rng.standard_normal((batch, 1, hk, d)), dtype, device)
    vn = T(rng.standard_normal((batch, 1, hk, d)), dtype, device)
    q = T(rng.standard_normal((batch, 1, h, d)), dtype, device)
    out = kvattn.flash_attn_with_kvcache(
        q, kc, vc, k=kn, v=vn, cache_seqlens=T(lens, torch.int32, device),
        block_table=T(case.block_table, torch.int32, device))
    sync(device)
    for b in range(batch):
        pages = F(kc)[case.block_table[b]].reshape(-1, hk, d)
        vpages = F(vc)[case.block_table[b]].reshape(-1, hk, d)
        assert np.array_equal(pages[lens[b]], F(kn[b, 0]))
        ref, _ = attention_ref(F(q[b]), pages[: lens[b] + 1], vpages[: lens[b] + 1], False)
        check(out[b], ref, dtype)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_kvcache_long_context_32k(rng, dtype):
    batch, hk, group, d, bs = 2, 2, 4, 128, 256
    h = hk * group
    lens = [32768, 1000]
    k_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    v_seqs = [rng.standard_normal((n, hk, d)) for n in lens]
    case = PagedCase(rng, k_seqs, v_seqs, bs)
    kc, vc = T(case.k_cache, dtype, "cuda"), T(case.v_cache, dtype, "cuda")
    q = T(rng.standard_normal((batch, 1, h, d)), dtype, "cuda")
    out = kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=T(case.lens, torch.int32, "cuda"),
                                         block_table=T(case.block_table, torch.int32, "cuda"), causal=True)
    torch.cuda.synchronize()
    for b in range(batch):
        kr = F(kc)[case.block_table[b]].reshape(-1, hk, d)[: lens[b]]
        vr = F(vc)[case.block_table[b]].reshape(-1, hk, d)[: lens[b]]
        ref, _ = attention_ref(F(q[b]), kr, vr, True)
        check(out[b], ref, dtype)


# ---- store_kvcache ---------------------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", DEV_DTYPES)
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("block_size", [1, 16, 256])
def test_store_kvcache(rng, device, dtype, slot_dtype, block_size):
    tokens, hk, d = 37, 2, 128
    nb = -(-tokens // block_size) + 2
    qkv = T(rng.standard_normal((tokens, 8 + 2 * hk, d)), dtype, device)
    key, value = qkv[:, 8 : 8 + hk], qkv[:, 8 + hk :]  # views into a fused buffer
    kc = torch.full((nb, block_size, hk, d), 7.0, dtype=dtype, device=device)
    vc = torch.full_like(kc, -7.0)
    slots = rng.permutation(nb * block_size)[:tokens]
    slots[[0, 9, 36]] = -1
    kvattn.store_kvcache(key, value, kc, vc, T(slots, slot_dtype, device))
    sync(device)
    flat_k, flat_v = kc.view(-1, hk, d).cpu(), vc.view(-1, hk, d).cpu()
    written = np.zeros(nb * block_size, bool)
    for i, s in enumerate(slots):
        if s >= 0:
            written[s] = True
            assert torch.equal(flat_k[s], key[i].cpu()) and torch.equal(flat_v[s], value[i].cpu())
    assert torch.all(flat_k[torch.from_numpy(~written)] == 7.0)
    assert torch.all(flat_v[torch.from_numpy(~written)] == -7.0)


@needs_cuda
def test_store_out_of_range_slot_is_a_device_fault(rng):
    kvattn.read_device_faults("cuda:0")  # clear
    key = torch.randn(2, 1, 64, dtype=torch.bfloat16, device="cuda")
    kc = torch.zeros(2, 4, 1, 64, dtype=torch.bfloat16, device="cuda")
    vc = torch.zeros_like(kc)
    kvattn.store_kvcache(key, key, kc, vc, torch.tensor([1, 8], dtype=torch.int32, device="cuda"))
    faults = kvattn.read_device_faults("cuda:0")
    assert faults & kvattn.FAULT_SLOT_OUT_OF_RANGE
    assert torch.equal(kc.view(-1, 1, 64)[1], key[0]) and int((kc != 0).any(dim=-1).sum()) == 1


# ---- boundary: streams, graphs, autograd, errors ---------------------------------------------


@needs_cuda
def test_runs_on_the_current_stream(rng):
    side = torch.cuda.Stream()
    q = torch.randn(3, 1, 8, 64, dtype=torch.bfloat16, device="cuda")
    assert kvattn._C.inspect(q)[5] == torch.cuda.current_stream().cuda_stream
    with torch.cuda.stream(side):
        assert kvattn._C.inspect(q)[5] == side.cuda_stream
        kc = torch.randn(4, 16, 2, 64, dtype=torch.bfloat16, device="cuda")
        bt = torch.tensor([[0, 1], [2, -1], [3, -1]], dtype=torch.int32, device="cuda")
        lens = torch.tensor([20, 16, 1], dtype=torch.int32, device="cuda")
        for _ in range(3):  # queue work behind a slow op on the side stream only
            torch.cuda._sleep(1_000_000)
            out = kvattn.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=lens, block_table=bt)
    side.synchronize()
    kr = [F(kc)[F(bt)[b].astype(int)[: -(-int(lens[b]) // 16)]].reshape(-1, 2, 64)[: int(lens[b])]
          for b in range(3)]
    for b in range(3):
        ref, _ = attention_ref(F(q[b]), kr[b], kr[b], False)
        check(out[b], ref, torch.bfloat16)


@needs_cuda
def test_cuda_graph_capture_and_replay(rng):
    """nano-vLLM captures decode in CUDA graphs: the call must be capturable and replay with
    new inputs (its split-KV workspace comes from torch's graph-aware allocator)."""
    batch, hk, h, d, bs, width = 4, 2, 16, 128, 16, 256  # capacity 4096: split-KV decode
    nb = batch * width
    kc = torch.randn(nb, bs, hk, d, dtype=torch.bfloat16, device="cuda")
    vc = torch.randn_like(kc)
    bt = torch.randperm(nb, device="cuda").to(torch.int32).view(batch, width)
    lens = torch.tensor([4096, 1, 1500, 0], dtype=torch.int32, device="cuda")
    q = torch.randn(batch, 1, h, d, dtype=torch.bfloat16, device="cuda")

    def step():
        return kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=bt,
                                              causal=True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for round_ in range(3):
        q.copy_(torch.randn_like(q))
        lens.copy_(torch.tensor([[4096, 1, 1500, 0], [7, 4000, 0, 33], [1, 2, 3, 4]][round_],
                                dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        for b in range(batch):
            n = int(lens[b])
            if n == 0:
                assert torch.all(out[b] == 0)
                continue
            kr = F(kc)[F(bt)[b].astype(int)].reshape(-1, hk, d)[:n]
            vr = F(vc)[F(bt)[b].astype(int)].reshape(-1, hk, d)[:n]
            ref, _ = attention_ref(F(q[b]), kr, vr, True)
            check(out[b], ref, torch.bfloat16, "round %d seq %d" % (round_, b))


@pytest.mark.parametrize("device", [CUDA, "cpu"])
def test_requires_grad_runs_forward_only(device):
    """Inputs that require grad run the forward (as flash-attn does); a backward raises."""
    dtype = torch.bfloat16
    q = torch.randn(4, 2, 64, dtype=dtype, device=device, requires_grad=True)
    c = torch.tensor([0, 4], dtype=torch.int32, device=device)
    res = kvattn.flash_attn_varlen_func(q, q, q, c, c, 4, 4)
    assert res.grad_fn is not None
    with pytest.raises(NotImplementedError, match="backward"):
        res.float().sum().backward()
    with torch.no_grad():
        out = kvattn.flash_attn_varlen_func(q, q, q, c, c, 4, 4)
    assert not out.requires_grad


@pytest.mark.parametrize("device", [CUDA, "cpu"])
def test_errors_carry_kvattn_messages(device):
    dtype = torch.bfloat16
    q = torch.randn(1, 1, 4, 64, dtype=dtype, device=device)
    kc = torch.randn(2, 16, 2, 64, dtype=dtype, device=device)
    bt = torch.tensor([[0, 1]], dtype=torch.int32, device=device)
    with pytest.raises(kvattn.Error, match="cache_seqlens dtype must be int32 but is int64"):
        kvattn.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=torch.tensor([3], device=device),
                                       block_table=bt)
    with pytest.raises(kvattn.Error, match="multiple of"):  # 4 heads, 3 kv heads
        kvattn.flash_attn_with_kvcache(q, kc[:, :, :1].expand(2, 16, 3, 64).contiguous(),
                                       kc[:, :, :1].expand(2, 16, 3, 64).contiguous(),
                                       cache_seqlens=torch.tensor([3], dtype=torch.int32, device=device),
                                       block_table=bt)
    with pytest.raises(RuntimeError, match="stride"):  # kvattn.Error is a RuntimeError too
        kvattn.store_kvcache(q[0], q[0], kc.transpose(1, 2), kc.transpose(1, 2),
                             torch.zeros(1, dtype=torch.int32, device=device))


@needs_cuda
def test_mixed_devices_are_refused():
    q = torch.randn(1, 1, 2, 64, dtype=torch.bfloat16, device="cuda")
    kc = torch.randn(2, 16, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(kvattn.Error, match="must be on cuda:0 but is on cpu"):
        kvattn.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=torch.tensor([3], dtype=torch.int32, device="cuda"),
                                       block_table=torch.tensor([[0]], dtype=torch.int32, device="cuda"))


def test_zero_copy_torch(rng):
    t = torch.randn(6, 3, 64)[::2]
    ptr, dtype, dev, shape, strides, _, _ = kvattn._C.inspect(t)
    assert ptr == t.data_ptr() and shape == (3, 3, 64) and strides == t.stride() and dev == "cpu"


@needs_cuda
def test_concurrent_streams_have_their_own_workspace(rng):
    """Split-KV decodes on two streams at once: each stream keeps its own workspace."""
    batch, hk, h, d, bs, width = 2, 2, 16, 128, 16, 512  # few long sequences: split-KV
    nb = 2 * batch * width
    kc = torch.randn(nb, bs, hk, d, dtype=torch.bfloat16, device="cuda")
    vc = torch.randn_like(kc)
    tables = torch.randperm(nb, device="cuda").to(torch.int32).view(2, batch, width)
    lens = [torch.tensor([8000, 5000], dtype=torch.int32, device="cuda"),
            torch.tensor([3000, 8192], dtype=torch.int32, device="cuda")]
    qs = [torch.randn(batch, 1, h, d, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    outs = [[], []]
    for _ in range(4):
        for i in range(2):
            with torch.cuda.stream(streams[i]):
                outs[i].append(kvattn.flash_attn_with_kvcache(
                    qs[i], kc, vc, cache_seqlens=lens[i], block_table=tables[i], causal=True))
    torch.cuda.synchronize()
    for i in range(2):
        for b in range(batch):
            n = int(lens[i][b])
            kr = F(kc)[F(tables[i][b]).astype(int)].reshape(-1, hk, d)[:n]
            vr = F(vc)[F(tables[i][b]).astype(int)].reshape(-1, hk, d)[:n]
            ref, _ = attention_ref(F(qs[i][b]), kr, vr, True)
            for o in outs[i]:
                check(o[b], ref, torch.bfloat16, "stream %d seq %d" % (i, b))
    assert kvattn.release_workspaces() >= 0
