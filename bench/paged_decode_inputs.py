# The paged decode inputs the decode harnesses build for one shape (decode_peers_same_run.py,
# decode_ncu_peers.py): one place, so the profiled and the timed shapes are the same data
# layout.
from types import SimpleNamespace

import torch


def paged_decode_inputs(lens, Hq, Hkv, D, P, dev):
    """Random bf16 K/V pages (P keys each, NHD) for sequences of `lens` keys, the pages dealt
    in a random order; the block table (-1 past each sequence's pages); FlashInfer's page
    list (indptr, indices, the last page's length); the lengths; one query a sequence.
    Fields: kc, vc, bt, pages, indptr, indices, last, seqlens, q."""
    B = len(lens)
    pages = [(n + P - 1) // P for n in lens]
    kc = torch.randn(sum(pages), P, Hkv, D, dtype=torch.bfloat16, device=dev)
    vc = torch.randn_like(kc)
    perm = torch.randperm(sum(pages), device=dev).int()
    bt = torch.full((B, max(pages)), -1, dtype=torch.int32, device=dev)
    indptr = [0]
    for b, n in enumerate(pages):
        bt[b, :n] = perm[indptr[-1]:indptr[-1] + n]
        indptr.append(indptr[-1] + n)
    return SimpleNamespace(
        kc=kc, vc=vc, bt=bt, pages=pages,
        indptr=torch.tensor(indptr, dtype=torch.int32, device=dev),
        indices=torch.cat([bt[b, :n] for b, n in enumerate(pages)]),
        last=torch.tensor([n - (m - 1) * P for n, m in zip(lens, pages)], dtype=torch.int32,
                          device=dev),
        seqlens=torch.tensor(lens, dtype=torch.int32, device=dev),
        q=torch.randn(B, Hq, D, dtype=torch.bfloat16, device=dev))
