"""kvattn: paged KV-cache attention for LLM inference, with flash-attn's Python API.

    from kvattn import flash_attn_varlen_func, flash_attn_with_kvcache, store_kvcache

Tensors (torch.Tensor on CUDA or CPU; NumPy arrays on the CPU) cross into kvattn's C++
library through DLPack without copies, and kernels run on the caller's current CUDA stream.
Argument errors raise ``kvattn.Error`` (a RuntimeError and a ValueError) with kvattn's message;
flash-attn arguments kvattn does not implement raise ``NotImplementedError``.
"""

from . import _C
from ._C import Error
from .batched import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                      flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func)
from .interface import flash_attn_varlen_func, flash_attn_with_kvcache, store_kvcache

__version__ = "0.1.0"
__all__ = [
    "Error",
    "cuda_available",
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
    "read_device_faults",
    "release_workspaces",
    "store_kvcache",
]

#: True when this build of the extension has kvattn's CUDA backend.
with_cuda = _C.with_cuda

# Device fault bits (kvattn/kernels/device_faults.h).
FAULT_SLOT_OUT_OF_RANGE = 1 << 0
FAULT_BLOCK_OUT_OF_RANGE = 1 << 1
FAULT_SEQLEN_OUT_OF_RANGE = 1 << 2
FAULT_BAD_CU_SEQLENS = 1 << 3
FAULT_DECODE_MERGE_STALLED = 1 << 4


def cuda_available():
    """True when kvattn was built with CUDA and a device is visible."""
    return _C.cuda_available()


def release_workspaces():
    """Frees the split-KV decode workspaces kvattn keeps per CUDA stream (allocated with
    PyTorch's caching allocator), e.g. before torch.cuda.empty_cache(). Synchronize first if a
    decode may still be running. Returns how many were freed."""
    return _C.release_workspaces()


def read_device_faults(device=None, clear=True):
    """Reads (and by default clears) the device fault word of a CUDA device.

    GPU kernels never check index tensors on the host; they skip out-of-range slots, block ids
    and lengths and OR a FAULT_* bit into this word. Synchronizes the device. ``device`` is a
    torch.device, "cuda:N", an int, or None (the current torch device, else 0).
    """
    if device is None:
        index = 0
        try:
            import torch

            if torch.cuda.is_available():
                index = torch.cuda.current_device()
        except ImportError:
            pass
    elif isinstance(device, int):
        index = device
    else:
        dev = str(device)
        if dev == "cpu":
            return 0
        index = int(dev.split(":")[1]) if ":" in dev else 0
    return _C.device_faults(index, clear)


def _allocate(shape, dtype, like):
    """Outputs for array types without the DLPack C exchange API (NumPy, older PyTorch)."""
    if type(like).__module__.startswith("torch"):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is not None and type(like).__module__.split(".")[0] != "numpy":
        xp = namespace()
        return xp.empty(shape, dtype=getattr(xp, dtype), device=like.device)
    import numpy

    if dtype == "bfloat16":
        raise Error("kvattn: NumPy has no bfloat16; use torch tensors for bfloat16")
    return numpy.empty(shape, dtype=dtype)


_C._set_fallback_allocator(_allocate)
