"""Numba's device arrays from a stream-ordered memory pool (``cudaMallocAsync``).

Choose it before the process first uses CUDA::

    NUMBA_CUDA_MEMORY_MANAGER=devalloc.allocators.numba python app.py

    from numba import cuda                      # or, in the program
    from devalloc.allocators.numba import DevallocMemoryManager
    cuda.set_memory_manager(DevallocMemoryManager)

Every ``cuda.device_array`` (``to_device``, ``device_array_like``, ...) then
takes its memory from a pool of the context's device, and gives it back when
the array is dropped: a few microseconds on the host, where ``cudaMalloc`` and
Numba's batched ``cudaFree`` (which synchronizes) cost about 120 us per array.
`stats()` says what the pool holds; `reset_peak()` restarts its peaks.

The pool. Each Numba context gets a pool of its own (``cuMemPoolCreate``),
not the device's default pool, which CuPy, PyTorch or cuda.core may share: its
statistics are this plugin's alone, and it can be destroyed at exit. Its
release threshold is the maximum, so freed memory stays in the pool across
synchronizations (with the default, 0, the pool gives it back to the device at
each one and the next frame pays ``cudaMalloc``'s price again). The context's
reset (``cuda.close()``) and the interpreter's exit give the pool's memory
back.

The stream. The interface gives ``memalloc`` no stream, and an array may be
used on any stream afterwards, so memory is taken and given back on the
*legacy default stream*, as RMM's plugin does. That stream waits for the work
queued before on every blocking stream, and that work waits for it; so an
allocation is ready for, and a free comes after, the work of ``cuda.stream()``
streams and of the default stream (the per-thread one too). A *non-blocking*
stream (``CU_STREAM_NON_BLOCKING``, e.g. an external stream from CuPy or
PyTorch made so) is not ordered with it: before using a new array there, or
dropping one used there, synchronize that stream with the default one.
Capturing a CUDA graph on a blocking stream while an array is made or
dropped fails, as any use of the legacy stream does then.

Not supported: legacy IPC handles (``cuIpcGetMemHandle`` refuses pool memory)
and peer access from other devices (``cuCtxEnablePeerAccess`` does not reach
pool memory). On Numba's CUDA simulator there are no memory managers at all.

Checked against numba-cuda 0.30.4 (interface version 1) and cuda-bindings
13.3 and 13.5.
"""

import atexit
import contextlib
import threading
from dataclasses import dataclass

from ..errors import CudaError, MemoryManagerError, NoGpuError, PoolMemoryError
from ..numba_compat import SIMULATOR

__all__ = ["DevallocMemoryManager", "PoolStats", "reset_peak", "stats"]

_ON_THE_SIMULATOR = (
    "Numba's CUDA simulator has no memory managers (it ignores "
    "NUMBA_CUDA_MEMORY_MANAGER and has no cuda.set_memory_manager; its device arrays "
    "are NumPy arrays): devalloc.allocators.numba needs a GPU, with "
    "NUMBA_ENABLE_CUDASIM unset or 0"
)

if SIMULATOR:
    _MemoryManagerBase = _PointerBase = object
else:
    from cuda.bindings import driver as cu

    from ..cuda_graphs import driver_call as _check
    from ..numba_compat import CudaSupportError, MemoryInfo, current_memory_manager
    from ..numba_compat import HostOnlyCUDAMemoryManager as _MemoryManagerBase
    from ..numba_compat import MemoryPointer as _PointerBase

    _SUCCESS = cu.CUresult.CUDA_SUCCESS
    _LEGACY = cu.CUstream(cu.CU_STREAM_LEGACY)
    _alloc_async = cu.cuMemAllocFromPoolAsync
    _free_async = cu.cuMemFreeAsync
    _ATTR = cu.CUmemPool_attribute


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of the current context's pool (RMM's and PyTorch's names).

    Attributes
    ----------
    current_bytes : int
        Bytes of the arrays alive now (as asked for, before the pool rounds).
    peak_bytes : int
        Largest ``current_bytes`` since the pool was made or the peak reset.
    total_bytes : int
        Bytes of every allocation made.
    current_allocs : int
        Allocations alive now.
    peak_allocs : int
        Largest ``current_allocs`` since the pool was made or the peak reset.
    total_allocs : int
        Allocations made.
    failed_allocs : int
        Allocations refused (out of memory or another CUDA error).
    reserved_bytes : int
        Device memory the pool holds, in use or kept for reuse
        (``CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT``).
    peak_reserved_bytes : int
        Largest ``reserved_bytes`` since the pool was made or the peak reset.
    """

    current_bytes: int
    peak_bytes: int
    total_bytes: int
    current_allocs: int
    peak_allocs: int
    total_allocs: int
    failed_allocs: int
    reserved_bytes: int
    peak_reserved_bytes: int


def stats():
    """`PoolStats` of the current context's pool.

    Raises `MemoryManagerError` when `DevallocMemoryManager` is not Numba's
    memory manager in this process (and always on the simulator), `NoGpuError`
    without a GPU.
    """
    return _manager_in_use().pool_stats()


def reset_peak():
    """Restart the current context's pool's peaks from what it holds now."""
    _manager_in_use().reset_peak()


def _manager_in_use():
    if SIMULATOR:
        raise MemoryManagerError(_ON_THE_SIMULATOR)
    try:
        manager = current_memory_manager()
    except CudaSupportError as error:  # as Arena() says it
        raise NoGpuError(error) from None
    if not isinstance(manager, DevallocMemoryManager):
        raise MemoryManagerError(
            f"devalloc's memory manager is not in use: Numba allocates with "
            f"{type(manager).__name__}. Set NUMBA_CUDA_MEMORY_MANAGER="
            "devalloc.allocators.numba, or call numba.cuda.set_memory_manager("
            "DevallocMemoryManager), before the process first uses CUDA."
        )
    return manager


_open_pools = []  # every _Pool not closed yet, for the exit


@atexit.register
def _close_pools():
    # Arrays may outlive this: closed pools ignore their frees. Nothing is left
    # to report an error to, and the process's exit frees the device memory.
    for pool in list(_open_pools):
        with contextlib.suppress(Exception):
            pool.close()


class _Pool:
    """One ``cudaMallocAsync`` pool for one Numba context, and its counters.

    Every allocation and free is made on the context's legacy default stream
    (see the module's docstring). The counters are plain ints.
    """

    def __init__(self, context):
        self.context_handle = context.handle
        self.device_id = context.device.id
        self.handle = _create_pool(self.device_id)
        self.closed = False
        self.crowded = False  # other pools are open: see release()
        self.deferring = 0  # depth of defer_cleanup() blocks
        self.pending = []  # (pointer, size) dropped while deferring
        self.current_bytes = self.peak_bytes = self.total_bytes = 0
        self.current_allocs = self.peak_allocs = self.total_allocs = self.failed_allocs = 0
        _open_pools.append(self)
        _update_crowding()

    def release(self, pointer, size):
        """Give `size` bytes at `pointer` back, in stream order. Never raises:
        it runs when an array is dropped, on any thread."""
        if self.closed:
            return
        if self.deferring:
            self.pending.append((pointer, size))
            return
        self.current_bytes -= size
        self.current_allocs -= 1
        # The legacy stream is the current context's: with several pools, the
        # current one may be another device's; in a new thread there is none.
        if self.crowded or _free_async(pointer, _LEGACY)[0] != _SUCCESS:
            self._release_in_own_context(pointer)

    def _release_in_own_context(self, pointer):
        if cu.cuCtxPushCurrent(self.context_handle)[0] != _SUCCESS:
            return  # the context is gone, and this memory with it
        _free_async(pointer, _LEGACY)
        cu.cuCtxPopCurrent()

    def flush(self):
        """Free what was dropped while frees were deferred."""
        pending, self.pending = self.pending, []
        for pointer, size in pending:
            self.release(pointer, size)

    def attribute(self, attribute):
        value = cu.cuMemPoolGetAttribute(self.handle, attribute)
        return int(_check(value, "cuMemPoolGetAttribute"))

    def reset_peak(self):
        self.peak_bytes = self.current_bytes
        self.peak_allocs = self.current_allocs
        high = _ATTR.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH  # CUDA resets it to 0 only
        zero = cu.cuuint64_t(0)
        _check(cu.cuMemPoolSetAttribute(self.handle, high, zero), "cuMemPoolSetAttribute")

    def close(self):
        """Stop freeing into the pool, give back what it keeps unused and destroy
        it, whatever CUDA answers. CUDA releases the memory of arrays still
        alive when their context is destroyed."""
        if self.closed:
            return
        self.closed = True
        _open_pools.remove(self)
        _update_crowding()
        cu.cuMemPoolTrimTo(self.handle, 0)
        cu.cuMemPoolDestroy(self.handle)


def _update_crowding():
    for pool in _open_pools:
        pool.crowded = len(_open_pools) > 1


def _create_pool(device_id):
    props = cu.CUmemPoolProps()
    props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.handleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
    props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = device_id
    pool = _check(cu.cuMemPoolCreate(props), f"cuMemPoolCreate for GPU {device_id}")
    keep_all = cu.cuuint64_t(2**64 - 1)
    threshold = _ATTR.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    try:
        _check(cu.cuMemPoolSetAttribute(pool, threshold, keep_all), "cuMemPoolSetAttribute")
    except CudaError:
        cu.cuMemPoolDestroy(pool)
        raise
    return pool


def _allocation_error(status, size, device_id):
    memory = cu.cuMemGetInfo()
    free, total = memory[1:] if memory[0] == _SUCCESS else (None, None)
    # A request larger than the whole device may come back as an invalid value.
    too_big = total is not None and size > total
    if status == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY or (
        status == cu.CUresult.CUDA_ERROR_INVALID_VALUE and too_big
    ):
        return PoolMemoryError(size, free, f"GPU {device_id}")
    return CudaError(status.name, f"cuMemAllocFromPoolAsync of {size} bytes on GPU {device_id}")


class _PoolPointer(_PointerBase):
    """A Numba ``MemoryPointer`` to pool memory, given back when it is dropped.

    A ``__del__``, not MemoryPointer's finalizer: that is a ``weakref.finalize``,
    1.1 us of the 1.5 us a MemoryPointer costs to make (measured on this
    project's CI host), 15 us in a 13-array frame. Views of the memory
    (slices) hold this pointer as their owner, so it lives as long as they do.
    """

    def __init__(self, context, pointer, size, pool):
        self._pool = pool
        _PointerBase.__init__(self, context, pointer, size)

    def __del__(self):
        pool = self._pool
        if pool is not None:
            pool.release(self.device_pointer, self.size)

    def free(self):
        """Give the memory back now (``MemoryPointer.free``)."""
        pool, self._pool = self._pool, None
        if pool is None:
            raise RuntimeError("Freeing dead memory")  # Numba's words, for the same misuse
        pool.release(self.device_pointer, self.size)


class DevallocMemoryManager(_MemoryManagerBase):
    """Numba's External Memory Management plugin (interface version 1): device
    memory from a ``cudaMallocAsync`` pool, host memory as Numba makes it.

    Numba makes one per context, and calls `initialize` each time it makes the
    context current. See the module's docstring for streams and limits.
    """

    def __init__(self, *args, **kwargs):
        if SIMULATOR:
            raise MemoryManagerError(_ON_THE_SIMULATOR)
        super().__init__(*args, **kwargs)
        self._pool = None
        self._lock = threading.Lock()

    @property
    def interface_version(self):
        return 1

    def initialize(self):
        """Make this context's pool, once."""
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = _Pool(self.context)

    def memalloc(self, size):
        """`size` bytes from the pool, on the legacy default stream.

        Raises `PoolMemoryError` (a `MemoryError`) when the device cannot hold
        them, `CudaError` naming the CUDA status for any other failure.
        """
        pool = self._pool
        if pool is None:
            self.initialize()
            pool = self._pool
        if not size:
            return _PointerBase(self.context, cu.CUdeviceptr(0), 0)
        status, pointer = _alloc_async(size, pool.handle, _LEGACY)
        if status != _SUCCESS:
            pool.failed_allocs += 1
            raise _allocation_error(status, size, pool.device_id)
        pool.total_allocs += 1
        pool.total_bytes += size
        pool.current_allocs += 1
        pool.current_bytes += size
        if pool.current_bytes > pool.peak_bytes:
            pool.peak_bytes = pool.current_bytes
        if pool.current_allocs > pool.peak_allocs:
            pool.peak_allocs = pool.current_allocs
        return _PoolPointer(self.context, pointer, size, pool)

    def get_memory_info(self):
        """``MemoryInfo(free, total)`` of the device (``cuMemGetInfo``): memory
        the pool keeps for reuse counts as used there, see `PoolStats`."""
        free, total = _check(cu.cuMemGetInfo(), "cuMemGetInfo")
        return MemoryInfo(free=free, total=total)

    def get_ipc_handle(self, memory):
        """Refused: pool memory has no legacy IPC handle."""
        raise MemoryManagerError(
            "an array from devalloc's memory pool cannot be shared with another "
            "process: cuIpcGetMemHandle refuses cudaMallocAsync memory. Export from "
            "arrays made with Numba's default memory manager instead."
        )

    def reset(self):
        """Numba's context reset (``cuda.close()``): wait for the device, give
        back what the pool keeps unused and retire the pool, so that arrays still
        alive never free into a context that is being destroyed. The next
        allocation makes a new pool."""
        super().reset()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            _check(cu.cuCtxPushCurrent(pool.context_handle), "cuCtxPushCurrent")
            try:
                _check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
            finally:
                cu.cuCtxPopCurrent()
        finally:
            pool.close()

    @contextlib.contextmanager
    def defer_cleanup(self):
        """Hold frees back until the outermost block exits (``cuda.defer_cleanup()``;
        devalloc's graph capture uses it so that no free joins a capture)."""
        self.initialize()
        pool = self._pool
        with super().defer_cleanup():
            pool.deferring += 1
            try:
                yield
            finally:
                pool.deferring -= 1
                if not pool.deferring:
                    pool.flush()

    def pool_stats(self):
        """`PoolStats` of this context's pool."""
        self.initialize()
        pool = self._pool
        return PoolStats(
            current_bytes=pool.current_bytes,
            peak_bytes=pool.peak_bytes,
            total_bytes=pool.total_bytes,
            current_allocs=pool.current_allocs,
            peak_allocs=pool.peak_allocs,
            total_allocs=pool.total_allocs,
            failed_allocs=pool.failed_allocs,
            reserved_bytes=pool.attribute(_ATTR.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            peak_reserved_bytes=pool.attribute(_ATTR.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH),
        )

    def reset_peak(self):
        """Restart this pool's peaks from what it holds now."""
        self.initialize()
        self._pool.reset_peak()


# What NUMBA_CUDA_MEMORY_MANAGER=devalloc.allocators.numba makes Numba use.
_numba_memory_manager = DevallocMemoryManager
