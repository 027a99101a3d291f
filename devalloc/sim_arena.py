"""Simulator glue: the Arena a kernel sees under ``NUMBA_ENABLE_CUDASIM=1``.

The simulator cannot run custom Numba types, so a simulated kernel receives this
plain Python object instead. It has the methods and semantics of the GPU type
(`numba_arena`) and runs the very same allocator functions, over simulated
device memory (`device_memory`), with the warp stand-ins of `simwarp`.
"""

import math
import operator

import numpy as np

from . import layout as L
from .allocator import bump_alloc, request_bytes, slab_alloc
from .device_memory import array_at, bytes_at

__all__ = ["SimKernelArena", "arena_maker"]

_KINDS = "biufc"  # bool, int, uint, float, complex


def _dtype(dtype, method):
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in _KINDS:
        raise TypeError(
            f"arena.{method}: dtype must be a NumPy number or bool type such as "
            f"np.float32 (got {dtype!r})"
        )
    return dtype


def _dims(shape, method):
    """The shape as a tuple of ints, and its element count (-1 if a dim is negative)."""
    try:
        dims = (operator.index(shape),)
    except TypeError:
        if not isinstance(shape, tuple) or not shape:
            raise TypeError(
                f"arena.{method}: shape must be an int or a non-empty tuple of ints (got {shape!r})"
            ) from None
        dims = tuple(operator.index(dim) for dim in shape)
    count = -1 if any(dim < 0 for dim in dims) else min(math.prod(dims), 1 << 62)
    return dims, count


class SimKernelArena:
    """An arena as a simulated kernel sees it."""

    __slots__ = (
        "_align", "_capacity", "_data", "_header", "_log2_slab", "_seq", "_slot",
        "_state", "_strategy", "_warp",
    )  # fmt: skip

    def __init__(self, strategy, align, handle, capacity, warp, state):
        self._strategy = strategy
        self._align = align
        self._header = handle & L.ADDRESS_MASK
        self._data = self._header + L.HEADER_BYTES
        self._capacity = int(capacity)
        self._slot = handle & L.SLOT_MASK
        self._log2_slab = (handle >> L.SLAB_SHIFT) & L.SLAB_MASK
        self._seq = (handle >> L.SEQ_SHIFT) & L.SEQ_MASK
        self._warp = warp
        self._state = state

    def _array(self, offset, dims, dtype, keep):
        if not keep:  # zero-size, at offset -1 as on the GPU
            offset, dims = -1, (0,) * len(dims)
        nbytes = math.prod(dims) * dtype.itemsize
        return bytes_at(self._data + offset, nbytes).view(dtype).reshape(dims)

    def alloc(self, shape, dtype):
        dtype = _dtype(dtype, "alloc")
        dims, count = _dims(shape, "alloc")
        nbytes = request_bytes(count, dtype.itemsize)
        hdr = array_at(self._header, L.HEADER_WORDS)
        if self._strategy == "bump":
            offset = bump_alloc(
                hdr, self._state, self._slot, self._seq, self._capacity, self._align, nbytes
            )
        else:
            offset = slab_alloc(
                hdr, self._state, self._warp, self._slot, self._seq, self._capacity,
                self._align, self._log2_slab, nbytes,
            )  # fmt: skip
        offset = int(offset)
        return self._array(offset, dims, dtype, offset >= 0 or nbytes == 0)

    def offset(self, array):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"arena.offset(array): expected an array (got {type(array).__name__})")
        return array.__array_interface__["data"][0] - self._data

    def view(self, offset, shape, dtype):
        dtype = _dtype(dtype, "view")
        dims, count = _dims(shape, "view")
        offset = operator.index(offset)
        nbytes = request_bytes(count, dtype.itemsize)
        keep = (
            offset >= 0
            and nbytes >= 0
            and offset % dtype.itemsize == 0
            and offset <= self._capacity - nbytes
        )
        return self._array(offset, dims, dtype, keep)


def arena_maker(strategy, align):
    """``make_arena(handle, capacity, warp, block_state)`` for simulated kernels."""

    def make_arena(handle, capacity, warp, state):
        return SimKernelArena(strategy, align, handle, capacity, warp, state)

    return make_arena
