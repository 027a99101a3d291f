"""devalloc: fast scratch memory for Numba CUDA kernels, allocated inside the kernel.

One device arena is reserved once; kernels decorated with `kernel` receive it as
their first argument and call ``arena.alloc(n, dtype)`` to get typed arrays from
a device-side allocator (an atomic bump pointer plus per-warp slabs). The host
resets the arena between launches or frames in stream order, without
synchronizing.

Where things are:

host side      arena.py (Arena: reserve, launch bookkeeping, reset, frame, frame
               arrays, stats, resize, close; devalloc.stats()), sizing.py
               (Arena.run: an arena that sizes itself), ring.py (ArenaRing: frames
               in flight on several streams), capture.py (capture
               and replay), host_memory.py (an arena's bytes on the GPU),
               cuda_graphs.py (the driver calls of CUDA graphs, a Graph's
               recording), statistics.py, errors.py
device side    allocator.py (bump and warp-slab allocation, block bookkeeping),
               warp.py (warp primitives), device_memory.py (addresses to arrays)
Numba glue     launch.py (@kernel, wrapper kernel, launches), numba_arena.py
               (the Arena type in GPU kernels), numba_compat.py (numba-cuda
               internals)
shared         layout.py (header words, handle bits, block state, strategies)
the switch     backend.py: the GPU's modules above or their simulator twins
integrations   dask.py: each Dask worker's arena (a worker plugin)
allocators/    numba.py: a Numba memory manager (every cuda.device_array from a
               cudaMallocAsync pool)
simulator/     the twins, module for module, for Numba's CUDA simulator:
               device_memory.py, warp.py, numba_arena.py, launch.py,
               host_memory.py, cuda_graphs.py
"""

from .arena import STRATEGIES, Arena, stats
from .capture import Graph
from .errors import (
    ArenaClosedError,
    ArenaOverflowError,
    ArenaOverflowWarning,
    CudaError,
    DevallocError,
    DevallocTypeError,
    DevallocValueError,
    DeviceMemoryError,
    MemoryManagerError,
    NoGpuError,
    PoolMemoryError,
)
from .launch import Kernel, kernel
from .ring import ArenaRing, RingSlot
from .sizing import Sizing
from .statistics import ArenaStats, ProcessStats

__version__ = "0.1.0"

__all__ = [
    "STRATEGIES",
    "Arena",
    "ArenaClosedError",
    "ArenaOverflowError",
    "ArenaOverflowWarning",
    "ArenaRing",
    "ArenaStats",
    "CudaError",
    "DevallocError",
    "DevallocTypeError",
    "DevallocValueError",
    "DeviceMemoryError",
    "Graph",
    "Kernel",
    "MemoryManagerError",
    "NoGpuError",
    "PoolMemoryError",
    "ProcessStats",
    "RingSlot",
    "Sizing",
    "kernel",
    "stats",
]
