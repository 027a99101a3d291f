"""Host side: where an arena's bytes live on a GPU.

`Arena` talks to a `GpuMemory` (or, on the simulator, to its twin
`simulator.host_memory.SimMemory`; `backend` picks one) and never to the
driver directly: one device allocation (through Numba's memory manager, so an
external memory manager such as RMM's is honoured) and a small host-mapped
failure record that kernels write and the host polls without synchronizing.
"""

from contextlib import nullcontext

import numpy as np
from numba import cuda

from . import layout as L
from .cuda_graphs import CUDA_SUCCESS, cu, driver_call, stream_handle
from .errors import DeviceMemoryError, NoGpuError
from .numba_compat import CudaSupportError, DeviceNDArray, driver, flush_deallocations, rebind

__all__ = ["GpuMemory"]

_LEGACY_STREAM = stream_handle(None)


def _is_out_of_memory(error):
    return "OUT_OF_MEMORY" in str(getattr(error, "code", ""))


class GpuMemory:
    def __init__(self, capacity, align, device):
        self.device = device
        size = L.allocation_bytes(capacity, align)
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
            context = cuda.current_context()
            self.gpu = context.device.id
            self.context_handle = int(context.handle)
            # Launches check that they run in the arena's context where another can be current.
            self.check_context = len(cuda.gpus) > 1
            base = self._mem.device_ctypes_pointer.value
            self._header_offset = L.header_offset(base, align)
            end = self._header_offset + L.HEADER_BYTES + capacity
            assert end <= size, (base, size, end)  # (layout.allocation_bytes)
            self.header_address = base + self._header_offset
            self.record = cuda.mapped_array(L.RECORD_WORDS, np.int64)
            self.record[:] = 0
            self.record_address = self.record.device_ctypes_pointer.value
        self.event = None
        self._frame_arrays = {}  # (offset, shape, dtype) -> a device array over it

    def _context(self):
        return cuda.gpus[self.device] if self.device is not None else nullcontext()

    def wrong_context(self):
        """None if launches run in the arena's context now, else what is wrong."""
        current = int(driver_call(cu.cuCtxGetCurrent(), "cuCtxGetCurrent"))
        if current == self.context_handle:
            return None
        if current == 0:  # a thread's first launch: Numba makes its context current there
            current = int(cuda.current_context().handle)
            if current == self.context_handle:
                return None
        device = int(driver_call(cu.cuCtxGetDevice(), "cuCtxGetDevice"))
        return (
            f"the arena is on GPU {self.gpu}, but GPU {device} is current (or another context "
            f"of it): launch inside `with cuda.gpus[{self.gpu}]:`, or use an arena made on "
            "the current GPU"
        )

    def write_header(self, words, first=0):
        """Write `words` (int64) into the header from word `first` on."""
        start = self._header_offset + 8 * first
        with self._context():
            driver.host_to_device(self._mem.view(start), words, words.nbytes)

    def set_limit(self, value, stream):
        """Set the header's LIMIT word to `value` in `stream`'s order (the value is
        taken now): one stream memory operation, no copy, no host wait."""
        with self._context():
            driver_call(
                cu.cuStreamWriteValue64(
                    stream_handle(stream), self.header_address + 8 * L.LIMIT, value, 0
                ),
                "cuStreamWriteValue64",
            )

    def read_header(self, words):
        with self._context():
            driver.device_to_host(words, self._mem.view(self._header_offset), words.nbytes)

    def device_array(self, offset, shape, strides, dtype):
        start = self._header_offset + L.HEADER_BYTES + offset
        nbytes = int(np.prod(shape)) * dtype.itemsize
        return DeviceNDArray(shape, strides, dtype, gpu_data=self._mem.view(start, start + nbytes))

    def frame_array(self, offset, shape, strides, dtype, stream):
        """`device_array` for `Arena.empty`, which asks for the same few arrays
        frame after frame: each is built once and copied after that."""
        key = (offset, shape, dtype)
        array = self._frame_arrays.get(key)
        if array is None:
            if len(self._frame_arrays) >= 4096:
                self._frame_arrays.clear()
            array = self._frame_arrays[key] = self.device_array(offset, shape, strides, dtype)
        return rebind(array, stream)

    def fill_zeros(self, array, stream):
        if array.size:
            driver.device_memset(array, 0, array.alloc_size, stream=stream or cuda.default_stream())

    def synchronize(self, stream):
        """Wait for the work queued on `stream` (None or 0: the legacy default
        stream). On one GPU the default stream is waited for with one driver
        call: through Numba, which makes sure of a context and builds a stream
        object first, `arena.check()` with nothing left to wait for took 8.4-9.2
        us, 1.2 us this way (`cuda.synchronize()`: 4.6-5.1; H100, 2026-12-06,
        benchmarks/variants.py's ``wait_us``)."""
        if stream:
            stream.synchronize()
            return
        if not self.check_context:
            (status,) = cu.cuStreamSynchronize(_LEGACY_STREAM)
            if status == CUDA_SUCCESS:
                return  # (otherwise, say, no context is current in this thread yet)
        with self._context():
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
        self._frame_arrays = {}
        with self._context():
            flush_deallocations()
