"""Simulator side: where an arena's bytes live (`host_memory`'s twin): a numpy
buffer registered as simulated device memory, and a failure record beside it."""

import os

import numpy as np

from .. import layout as L
from ..errors import DevallocValueError, DeviceMemoryError
from ..numba_compat import FakeCUDAArray
from .device_memory import bytes_at, register_buffer, unregister_buffer

__all__ = ["SimMemory"]


class SimMemory:
    def __init__(self, capacity, align, device):
        if device not in (None, 0):
            raise DevallocValueError(
                f"the CUDA simulator has one device, 0 (got device={device!r})"
            )
        self.device = device
        self.check_context = False  # (one simulated GPU, one context)
        # numpy gives no 256-byte alignment, unlike cudaMalloc: pad for the worst case.
        size = L.allocation_bytes(capacity, align)
        try:
            self._buffer = np.zeros(size, np.uint8)
        except MemoryError:
            try:
                free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            except (ValueError, OSError, AttributeError):
                free = None
            raise DeviceMemoryError(capacity, free, "the simulator's host") from None
        base = register_buffer(self._buffer)
        self.header_address = base + L.header_offset(base, align)
        self._record_buffer = np.zeros(L.RECORD_WORDS * 8, np.uint8)
        self.record_address = register_buffer(self._record_buffer)
        self.record = self._record_buffer.view(np.int64)

    def write_header(self, words, first=0):
        bytes_at(self.header_address + 8 * first, words.nbytes)[:] = words.view(np.uint8)

    def set_limit(self, value, stream):
        self.write_header(np.array([value], np.int64), first=L.LIMIT)

    def read_header(self, words):
        words.view(np.uint8)[:] = bytes_at(self.header_address, words.nbytes)

    def device_array(self, offset, shape, strides, dtype):
        nbytes = int(np.prod(shape)) * dtype.itemsize
        start = self.header_address + L.HEADER_BYTES + offset
        view = np.ndarray(shape, dtype, bytes_at(start, nbytes), strides=strides)
        return FakeCUDAArray(view)

    def frame_array(self, offset, shape, strides, dtype, stream):
        array = self.device_array(offset, shape, strides, dtype)
        array.stream = stream
        return array

    @staticmethod
    def fill_zeros(array, stream):
        array._ary[...] = 0

    @staticmethod
    def synchronize(stream):
        pass  # simulated kernels run to completion before their launch returns

    def order_after(self, earlier, later):
        pass

    def free(self):
        if self._buffer is None:
            return
        unregister_buffer(self._buffer)
        unregister_buffer(self._record_buffer)
        self._buffer = self._record_buffer = None
