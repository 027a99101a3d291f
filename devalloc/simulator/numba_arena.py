"""Simulator glue: the Arena a kernel sees under ``NUMBA_ENABLE_CUDASIM=1``
(`numba_arena`'s twin).

The simulator cannot run custom Numba types, so a simulated kernel receives this
plain Python object instead. It has the methods and semantics of the GPU type
(`numba_arena`), accepts and refuses what the GPU's compiler does, and runs the
very same allocator functions over simulated device memory (`device_memory`),
with the warp stand-ins of `warp`.
"""

import math
import operator

import numpy as np

from .. import layout as L
from ..allocator import group_alloc, request_bytes
from ..errors import DTYPE_HINT, DevallocTypeError, numba_number
from ..numba_compat import numpy_dtype_of
from .device_memory import array_at, buffer_at

__all__ = ["SimKernelArena", "arena_maker"]


def _dtype(dtype, method):
    """What the GPU's typing accepts: a NumPy scalar type or a dtype object, not
    Python's `float`, a string or None."""
    dtype = numpy_dtype_of(dtype)
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        dtype = np.dtype(dtype)
    if not isinstance(dtype, np.dtype) or not numba_number(dtype):
        raise DevallocTypeError(f"arena.{method}: {DTYPE_HINT} (got {dtype!r})")
    return dtype


def _index(value):
    if isinstance(value, (bool, np.bool_)):
        raise TypeError
    return operator.index(value)


def _dims(shape, method):
    """The shape as a tuple of ints, and its element count: as the GPU counts, an
    int shape is the count itself, and a tuple with a negative dim counts -1."""
    try:
        dims = (_index(shape),)
        return dims, min(dims[0], 1 << 62)
    except TypeError:
        try:
            if not isinstance(shape, tuple) or not shape:
                raise TypeError
            dims = tuple(_index(dim) for dim in shape)
        except TypeError:
            raise DevallocTypeError(
                f"arena.{method}: shape must be an int or a non-empty tuple of ints (got {shape!r})"
            ) from None
    count = -1 if any(dim < 0 for dim in dims) else min(math.prod(dims), 1 << 62)
    return dims, count


class SimKernelArena:
    """An arena as a simulated kernel sees it."""

    __slots__ = (
        "_align", "_capacity", "_data", "_direct", "_header", "_log2_slab", "_slot",
        "_state", "_tally", "_warp",
    )  # fmt: skip

    def __init__(self, strategy, align, header, capacity, slot, log2_slab, warp, state, tally):
        self._direct = L.STRATEGIES[strategy].direct
        self._align = align
        self._header = header
        self._data = header + L.HEADER_BYTES
        self._capacity = int(capacity)
        self._slot = slot
        self._log2_slab = log2_slab
        self._warp = warp
        self._state = state
        self._tally = tally

    def _array(self, offset, dims, dtype, keep):
        if not keep:  # zero-size, at offset -1 as on the GPU
            offset, dims = -1, (0,) * len(dims)
        # Built on the whole buffer, so that a zero-size array keeps its address
        # too (numpy moves a zero-size slice to the start of its base).
        nbytes = math.prod(dims) * dtype.itemsize
        buffer, index = buffer_at(self._data + offset, nbytes)
        return np.ndarray(dims, dtype, buffer=buffer, offset=index)

    def alloc(self, shape, dtype):
        return self._alloc(shape, dtype, "alloc", True)

    def try_alloc(self, shape, dtype):
        return self._alloc(shape, dtype, "try_alloc", False)

    def _alloc(self, shape, dtype, method, report):
        dtype = _dtype(dtype, method)
        dims, count = _dims(shape, method)
        nbytes = request_bytes(count, dtype.itemsize)
        hdr = array_at(self._header, L.HEADER_WORDS)
        offset = int(
            group_alloc(
                hdr, self._state, self._tally, self._warp, self._slot, self._capacity, self._align,
                self._log2_slab, nbytes, self._direct, report,
            )
        )  # fmt: skip
        return self._array(offset, dims, dtype, offset >= 0 or nbytes == 0)

    def offset(self, array):
        if not isinstance(array, np.ndarray):  # a kernel's array argument comes wrapped
            if isinstance(array, np.generic) or not hasattr(array, "__array_interface__"):
                raise DevallocTypeError(
                    f"arena.offset(array): expected an array (got {type(array).__name__})"
                )
            array = np.asarray(array)
        return array.__array_interface__["data"][0] - self._data

    def view(self, offset, shape, dtype):
        dtype = _dtype(dtype, "view")
        dims, count = _dims(shape, "view")
        try:
            offset = _index(offset)
        except TypeError:
            raise DevallocTypeError(f"arena.view: offset must be an int (got {offset!r})") from None
        nbytes = request_bytes(count, dtype.itemsize)
        keep = (
            offset >= 0
            and nbytes >= 0
            and offset % dtype.itemsize == 0
            and offset <= self._capacity - nbytes
        )
        return self._array(offset, dims, dtype, keep)


def arena_maker(strategy, align):
    """``make_arena(header, capacity, slot, log2_slab, warp, block_state, tally)`` for
    simulated kernels (`numba_arena.arena_maker`'s twin)."""

    def make_arena(*fields):
        return SimKernelArena(strategy, align, *fields)

    return make_arena
