"""Host side: where an arena's bytes live, on a GPU or in the simulator.

`Arena` talks to one of these two classes and never to the driver directly:

``GpuMemory``
    One device allocation (through Numba's memory manager, so an external
    memory manager such as RMM's is honoured) and a small host-mapped failure
    record that kernels write and the host polls without synchronizing.
``SimMemory``
    A numpy buffer registered as simulated device memory.
"""

import os
from contextlib import nullcontext

import numpy as np
from numba import cuda

from . import layout as L
from .device_memory import SIMULATOR
from .errors import DeviceMemoryError, NoGpuError

if SIMULATOR:
    from .device_memory import bytes_at, register_buffer, unregister_buffer
    from .numba_compat import FakeCUDAArray
else:
    from .numba_compat import CudaSupportError, DeviceNDArray, driver, flush_deallocations

__all__ = ["GpuMemory", "Memory", "SimMemory"]


def _boundary(align):
    # The data region starts on an `align` boundary, and never less than 256 bytes,
    # so that the header before it is 256-byte aligned (the launch handle needs it).
    return max(align, L.HEADER_BYTES)


def _padded_size(capacity, align):
    # cudaMalloc returns 256-byte aligned memory; larger boundaries need padding.
    return L.HEADER_BYTES + capacity + _boundary(align) - L.HEADER_BYTES


def _header_offset(base_address, align):
    boundary = _boundary(align)
    data = (base_address + L.HEADER_BYTES + boundary - 1) & -boundary
    return data - L.HEADER_BYTES - base_address


def _is_out_of_memory(error):
    return "OUT_OF_MEMORY" in str(getattr(error, "code", ""))


class GpuMemory:
    def __init__(self, capacity, align, device):
        self.device = device
        size = _padded_size(capacity, align)
        try:
            with self._context():
                context = cuda.current_context()
                try:
                    self._mem = context.memalloc(size)
                except driver.CudaAPIError as error:
                    if not _is_out_of_memory(error):
                        raise
                    free, _ = context.get_memory_info()
                    raise DeviceMemoryError(capacity, free, f"GPU {context.device.id}") from None
        except CudaSupportError as error:
            raise NoGpuError(error) from None
        with self._context():
            base = self._mem.device_ctypes_pointer.value
            self._header_offset = _header_offset(base, align)
            self.header_address = base + self._header_offset
            self.record = cuda.mapped_array(L.RECORD_WORDS, np.int64)
            self.record[:] = 0
            self.record_address = self.record.device_ctypes_pointer.value
        self.event = None

    def _context(self):
        return cuda.gpus[self.device] if self.device is not None else nullcontext()

    def write_header(self, words, first=0):
        """Write `words` (int64) into the header from word `first` on."""
        start = self._header_offset + 8 * first
        with self._context():
            driver.host_to_device(self._mem.view(start), words, words.nbytes)

    def read_header(self, words):
        with self._context():
            driver.device_to_host(words, self._mem.view(self._header_offset), words.nbytes)

    def device_array(self, offset, shape, strides, dtype):
        start = self._header_offset + L.HEADER_BYTES + offset
        nbytes = int(np.prod(shape)) * dtype.itemsize
        return DeviceNDArray(shape, strides, dtype, gpu_data=self._mem.view(start, start + nbytes))

    @staticmethod
    def synchronize(stream):
        if stream:
            stream.synchronize()
        else:
            cuda.default_stream().synchronize()

    def order_after(self, earlier, later):
        """Make stream `later` wait for the work queued so far on `earlier`."""
        with self._context():
            if self.event is None:
                self.event = cuda.event(timing=False)
            self.event.record(earlier or cuda.default_stream())
            self.event.wait(later or cuda.default_stream())

    def free(self):
        # Drop the references: Numba frees the memory once the last device_view
        # over it is gone too, so a view kept past close() never dangles. Then
        # flush Numba's deferred frees, so that closing gives the memory back now.
        if self._mem is None:
            return
        self._mem = None
        self.record = None
        with self._context():
            flush_deallocations()


class SimMemory:
    def __init__(self, capacity, align, device):
        if device not in (None, 0):
            raise ValueError(f"the CUDA simulator has one device, 0 (got device={device!r})")
        self.device = device
        # numpy gives no 256-byte alignment, unlike cudaMalloc: pad for the worst case.
        size = L.HEADER_BYTES + capacity + _boundary(align)
        try:
            self._buffer = np.zeros(size, np.uint8)
        except MemoryError:
            try:
                free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            except (ValueError, OSError, AttributeError):
                free = None
            raise DeviceMemoryError(capacity, free, "the simulator's host") from None
        base = register_buffer(self._buffer)
        self.header_address = base + _header_offset(base, align)
        self._record_buffer = np.zeros(L.RECORD_WORDS * 8, np.uint8)
        self.record_address = register_buffer(self._record_buffer)
        self.record = self._record_buffer.view(np.int64)

    def write_header(self, words, first=0):
        bytes_at(self.header_address + 8 * first, words.nbytes)[:] = words.view(np.uint8)

    def read_header(self, words):
        words.view(np.uint8)[:] = bytes_at(self.header_address, words.nbytes)

    def device_array(self, offset, shape, strides, dtype):
        nbytes = int(np.prod(shape)) * dtype.itemsize
        start = self.header_address + L.HEADER_BYTES + offset
        view = np.ndarray(shape, dtype, bytes_at(start, nbytes), strides=strides)
        return FakeCUDAArray(view)

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


Memory = SimMemory if SIMULATOR else GpuMemory
