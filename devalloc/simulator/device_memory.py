"""Simulator side: simulated device memory, and device code reaching it by address
(`device_memory`'s twin).

Under the simulator, "device memory" is host memory: every simulated arena
registers its numpy buffer here, and an address is the buffer's real host
address. The allocator's accesses are plain numpy reads and writes (the
simulator runs one Python thread per CUDA thread; atomics are the simulator's).
"""

import bisect
import threading

import numpy as np
from numba import cuda

__all__ = [
    "array_at",
    "bit_length",
    "buffer_at",
    "bytes_at",
    "device_function",
    "int32_words",
    "leave_add",
    "load_volatile",
    "load_volatile_shared",
    "reduce_add",
    "register_buffer",
    "store_volatile_at",
    "store_volatile_shared",
    "unregister_buffer",
]


# cuda.jit options that only shape the GPU's machine code: the simulator's jit
# refuses them, and a kernel written for the GPU must run here unchanged.
_MACHINE_CODE_ONLY = ("max_registers", "launch_bounds", "lineinfo")


def simulated_options(options):
    """cuda.jit `options` less those the simulator has no use for."""
    return {k: v for k, v in options.items() if k not in _MACHINE_CODE_ONLY}


def device_function(py_func, **options):
    """`py_func` as a device function (`device_memory.device_function`'s twin)."""
    return cuda.jit(device=True, **simulated_options(options))(py_func)


_buffers_lock = threading.Lock()
_bases = []  # sorted base addresses of the registered buffers
_buffers = {}  # base address -> uint8 numpy buffer


def register_buffer(buffer):
    base = buffer.ctypes.data
    with _buffers_lock:
        bisect.insort(_bases, base)
        _buffers[base] = buffer
    return base


def unregister_buffer(buffer):
    base = buffer.ctypes.data
    with _buffers_lock:
        if _buffers.pop(base, None) is not None:
            del _bases[bisect.bisect_left(_bases, base)]


def buffer_at(address, nbytes=0):
    """(buffer, index of `address` in it) for registered simulated device
    memory holding [address, address + nbytes)."""
    with _buffers_lock:
        i = bisect.bisect_right(_bases, address) - 1
        if i >= 0:
            buffer = _buffers[_bases[i]]
            index = address - _bases[i]
            if index + nbytes <= buffer.size:
                return buffer, index
    raise RuntimeError(
        f"simulated device address {address:#x} (+{nbytes} bytes) is not inside "
        "any live arena; was the arena closed while a kernel used it?"
    )


def bytes_at(address, nbytes):
    """The registered simulated device memory [address, address + nbytes)."""
    buffer, index = buffer_at(address, nbytes)
    return buffer[index : index + nbytes]


def array_at(address, n):
    return bytes_at(int(address), int(n) * 8).view(np.int64)


def load_volatile(array, i):
    return array[i]


def bit_length(value):
    return int(value).bit_length()


load_volatile_shared = load_volatile


def store_volatile_shared(array, i, value):
    array[i] = value


def int32_words(array):
    return array.view(np.int32)


@device_function
def reduce_add(array, i, value):
    cuda.atomic.add(array, i, value)


def store_volatile_at(address, value):
    array_at(address, 1)[0] = value


@device_function
def leave_add(array, i, value):
    return cuda.atomic.add(array, i, value)
