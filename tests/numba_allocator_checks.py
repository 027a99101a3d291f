"""What tests/test_numba_allocator.py runs, each check in a fresh process: Numba's
memory manager is chosen once, before the process first uses CUDA.

``gpu_*`` checks need a GPU and the manager chosen by the environment
(NUMBA_CUDA_MEMORY_MANAGER=devalloc.allocators.numba). ``standin_*`` checks run
the plugin's bookkeeping against a stand-in for the CUDA driver, with no GPU
(NUMBA_ENABLE_CUDASIM=0). Each prints nothing and exits 0 when it passes.
"""

import gc
import types

import numpy as np
from numba import cuda

import devalloc.allocators.numba as pool_numba
from devalloc.errors import CudaError, DeviceMemoryError, MemoryManagerError, PoolMemoryError
from helpers import poisoned

# -- on a GPU ----------------------------------------------------------------------


def in_use():
    manager = cuda.current_context().memory_manager
    assert isinstance(manager, pool_numba.DevallocMemoryManager), type(manager)


@cuda.jit
def add_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1


def add_one_on(array, stream=0):
    add_one[-(-array.size // 128), 128, stream](array)


def gpu_round_trip():
    in_use()
    for dtype in (np.float32, np.int64, np.uint8):
        host = poisoned(1000, dtype)
        host[::3] = 7
        assert np.array_equal(cuda.to_device(host).copy_to_host(), host, equal_nan=True)
        device = cuda.device_array_like(host)
        device.copy_to_device(host)
        assert np.array_equal(device.copy_to_host(), host, equal_nan=True)
    big = np.arange(3 << 20, dtype=np.int32)  # 12 MiB, past any small-size path
    assert np.array_equal(cuda.to_device(big).copy_to_host(), big)
    try:
        device.get_ipc_handle()
    except MemoryManagerError as error:
        assert "cuIpcGetMemHandle" in str(error), error
    else:
        raise AssertionError("an IPC handle of pool memory")


def gpu_many_arrays():
    start = pool_numba.stats()
    sizes = [1 + 977 * i for i in range(200)]
    arrays = [cuda.device_array(n, np.uint8) for n in sizes]
    now = pool_numba.stats()
    assert now.current_bytes == start.current_bytes + sum(sizes), now
    assert now.current_allocs == start.current_allocs + len(sizes), now
    assert now.total_allocs == start.total_allocs + len(sizes), now
    assert now.total_bytes == start.total_bytes + sum(sizes), now
    assert now.peak_bytes >= now.current_bytes
    assert now.reserved_bytes >= now.current_bytes, now
    assert now.peak_reserved_bytes >= now.reserved_bytes, now
    del arrays[::2]
    half = pool_numba.stats()
    assert half.current_bytes == start.current_bytes + sum(sizes[1::2]), half
    for round_ in range(50):  # alloc/free churn keeps the counts exact
        churn = [cuda.device_array(4096 + round_, np.float32) for _ in range(10)]
        del churn
    del arrays
    gc.collect()
    cuda.synchronize()
    end = pool_numba.stats()
    assert end.current_bytes == start.current_bytes, end
    assert end.current_allocs == start.current_allocs, end
    assert end.total_allocs == start.total_allocs + len(sizes) + 500, end
    assert end.peak_bytes == now.peak_bytes, end
    pool_numba.reset_peak()
    assert pool_numba.stats().peak_bytes == end.current_bytes


def gpu_deferred_cleanup():
    start = pool_numba.stats()
    with cuda.defer_cleanup():
        a = cuda.device_array(1 << 20, np.float32)
        with cuda.defer_cleanup():
            b = cuda.device_array(100, np.uint8)
            del a, b
        held = pool_numba.stats()
        assert held.current_allocs == start.current_allocs + 2, held
    cuda.synchronize()
    end = pool_numba.stats()
    assert end.current_bytes == start.current_bytes, end
    assert end.current_allocs == start.current_allocs, end


def gpu_kernel_on_pool_arrays():
    host = np.arange(100_000, dtype=np.float32)
    device = cuda.to_device(host)
    add_one_on(device)
    assert np.array_equal(device.copy_to_host(), host + 1)
    # A slice keeps its memory alive after the parent array is dropped.
    view = cuda.to_device(host)[1000:2000]
    gc.collect()
    add_one_on(view)
    assert np.array_equal(view.copy_to_host(), host[1000:2000] + 1)
    assert pool_numba.stats().current_allocs == 2


def gpu_zero_bytes():
    start = pool_numba.stats()
    for shape in (0, (0, 5), (3, 0, 2)):
        empty = cuda.device_array(shape, np.float64)
        assert empty.copy_to_host().shape == np.empty(shape).shape
    assert cuda.to_device(np.empty(0, np.int32)).copy_to_host().size == 0
    assert cuda.current_context().memalloc(0).size == 0
    assert pool_numba.stats().total_allocs == start.total_allocs


def gpu_huge_request():
    keep = cuda.device_array(1000, np.uint8)
    try:
        cuda.device_array(1 << 50, np.uint8)
    except MemoryError as error:
        assert isinstance(error, PoolMemoryError), type(error)
        assert str(1 << 50) in str(error), error
        assert error.requested == 1 << 50 and 0 < error.free, error
    else:
        raise AssertionError("a 1 PiB array was made")
    assert pool_numba.stats().failed_allocs == 1
    assert pool_numba.stats().current_allocs == 1
    keep.copy_to_device(np.full(1000, 9, np.uint8))
    assert (keep.copy_to_host() == 9).all()  # the pool still works


def gpu_streams():
    host = np.arange(50_000, dtype=np.float64)
    streams = [cuda.stream() for _ in range(4)]
    results = []
    for k in range(20):
        stream = streams[k % len(streams)]
        device = cuda.to_device(host, stream=stream)
        scratch = cuda.device_array(10_000, np.float32, stream=stream)
        add_one_on(device, stream)
        add_one_on(scratch, stream)
        device.copy_to_device(host + k, stream=stream)
        add_one_on(device, stream)
        results.append((k, device.copy_to_host(stream=stream)))
        del device, scratch
    for stream in streams:
        stream.synchronize()
    for k, got in results:
        assert np.array_equal(got, host + k + 1), k
    del results
    cuda.synchronize()
    gc.collect()  # (under compute-sanitizer, a dropped array was once still alive here)
    stats = pool_numba.stats()
    assert stats.current_allocs == 0, stats


def gpu_memory_info():
    free, total = cuda.current_context().get_memory_info()
    assert 0 < free <= total, (free, total)
    array = cuda.device_array(256 << 20, np.uint8)
    free_after, total_after = cuda.current_context().get_memory_info()
    assert total_after == total and free_after <= free - (256 << 20), (free, free_after)
    del array


# Alive at exit, one in a reference cycle, one under a deferred cleanup: the
# process must exit 0 with nothing on stderr.
_live = []


def gpu_shutdown_with_live_arrays():
    _live.append(cuda.to_device(np.arange(1 << 20, dtype=np.float32)))
    cycle = {"array": cuda.device_array(1000)}
    cycle["self"] = cycle
    add_one_on(_live[0])  # still queued at exit
    deferred = cuda.defer_cleanup()
    deferred.__enter__()
    _live.append(cuda.device_array(500))
    _live.append(cuda.device_array(400))
    _live.pop()  # dropped while frees are deferred, never flushed


def gpu_close_with_live_arrays():
    # (Not checked: using CUDA again after cuda.close(). With numba-cuda 0.30.4 on
    # the H200 that failed with CUDA_ERROR_CONTEXT_IS_DESTROYED under Numba's own
    # manager too, in its context's initialize: seen 2026-12-01.)
    old = cuda.device_array(1000, np.int32)
    view = old[10:20]
    cuda.close()  # retires the pool: the arrays' frees must not reach it
    del old, view  # their context is gone: nothing to free, nothing raised
    gc.collect()


def gpu_set_in_program():
    """Chosen by the program rather than the environment."""
    cuda.set_memory_manager(pool_numba.DevallocMemoryManager)
    in_use()
    gpu_round_trip()
    assert pool_numba.stats().total_allocs > 0


def gpu_default_manager_has_no_stats():
    try:
        pool_numba.stats()
    except MemoryManagerError as error:
        assert "NUMBA_CUDA_MEMORY_MANAGER=devalloc.allocators.numba" in str(error), error
    else:
        raise AssertionError("stats() of Numba's own memory manager")


# -- with a stand-in for the driver, no GPU ----------------------------------------


class StandInDriver:
    """cuda.bindings' driver with the calls the pool makes played by Python:
    addresses from a counter, a context stack, every call recorded. Everything
    else (types, enums) is the real module's."""

    def __init__(self, real, total=1 << 30):
        self._real = real
        self.ok = real.CUresult.CUDA_SUCCESS
        self.total = total
        self.live = {}  # address: size
        self.freed = []  # (address, context it was freed in)
        self.contexts = [1]  # the calling thread's context stack (handles)
        self.calls = []
        self.next_address = 1 << 20
        self.alloc_status = self.ok

    def __getattr__(self, name):
        return getattr(self._real, name)

    def cuMemPoolCreate(self, props):
        self.calls.append("create")
        return self.ok, self._real.CUmemoryPool(0xB00)

    def cuMemPoolSetAttribute(self, pool, attribute, value):
        self.calls.append(("set", attribute.name, int(value)))
        return (self.ok,)

    def cuMemPoolGetAttribute(self, pool, attribute):
        return self.ok, self._real.cuuint64_t(sum(self.live.values()))

    def cuMemAllocFromPoolAsync(self, size, pool, stream):
        if self.alloc_status != self.ok:
            return self.alloc_status, None
        address, self.next_address = self.next_address, self.next_address + size
        self.live[address] = size
        return self.ok, self._real.CUdeviceptr(address)

    def cuMemFreeAsync(self, pointer, stream):
        if not self.contexts:
            return (self._real.CUresult.CUDA_ERROR_INVALID_CONTEXT,)
        del self.live[int(pointer)]
        self.freed.append((int(pointer), self.contexts[-1]))
        return (self.ok,)

    def cuMemGetInfo(self):
        return self.ok, self.total - sum(self.live.values()), self.total

    def cuCtxPushCurrent(self, context):
        self.contexts.append(int(context))
        return (self.ok,)

    def cuCtxPopCurrent(self):
        return self.ok, self._real.CUcontext(self.contexts.pop())

    def cuCtxSynchronize(self):
        self.calls.append("sync")
        return (self.ok,)

    def cuMemPoolTrimTo(self, pool, keep):
        self.calls.append(("trim", keep))
        return (self.ok,)

    def cuMemPoolDestroy(self, pool):
        self.calls.append("destroy")
        return (self.ok,)


def stand_in(context_handle=1):
    """(driver, manager): a DevallocMemoryManager for a stand-in context whose
    CUDA calls go to a `StandInDriver`."""
    driver = StandInDriver(pool_numba.cu)
    pool_numba.cu = driver
    pool_numba._alloc_async = driver.cuMemAllocFromPoolAsync
    pool_numba._free_async = driver.cuMemFreeAsync
    return driver, manager_for(context_handle)


def manager_for(context_handle):
    context = types.SimpleNamespace(
        handle=pool_numba.cu.CUcontext(context_handle), device=types.SimpleNamespace(id=0)
    )
    manager = pool_numba.DevallocMemoryManager(context=context)
    manager.initialize()
    return manager


def counts(manager):
    pool = manager._pool
    return pool.current_bytes, pool.current_allocs, pool.total_allocs


def standin_pool_setup():
    driver, manager = stand_in()
    manager.initialize()  # once only
    threshold = ("set", "CU_MEMPOOL_ATTR_RELEASE_THRESHOLD", 2**64 - 1)
    assert driver.calls == ["create", threshold], driver.calls
    assert manager.interface_version == 1


def standin_counts():
    driver, manager = stand_in()
    a, b = manager.memalloc(1000), manager.memalloc(24)
    assert counts(manager) == (1024, 2, 2)
    view = a.view(100, 200)  # a slice of an array holds its parent's memory
    del a
    assert counts(manager) == (1024, 2, 2) and not driver.freed
    del view
    assert counts(manager) == (24, 1, 2) and len(driver.freed) == 1
    b.free()
    assert counts(manager) == (0, 0, 2) and len(driver.freed) == 2
    try:
        b.free()
    except RuntimeError:
        pass
    else:
        raise AssertionError("freed twice")
    del b
    assert len(driver.freed) == 2 and not driver.live
    stats = manager.pool_stats()
    assert (stats.peak_bytes, stats.peak_allocs, stats.total_bytes) == (1024, 2, 1024), stats
    manager.reset_peak()
    assert manager.pool_stats().peak_bytes == 0
    assert manager.memalloc(0).size == 0 and counts(manager) == (0, 0, 2)
    try:
        manager.get_ipc_handle(manager.memalloc(8))
    except MemoryManagerError as error:
        assert "another process" in str(error), error
    else:
        raise AssertionError("an IPC handle of pool memory")


def standin_deferred():
    driver, manager = stand_in()
    with manager.defer_cleanup():
        with manager.defer_cleanup():
            a = manager.memalloc(10)
            del a
        assert counts(manager) == (10, 1, 1) and not driver.freed
    assert counts(manager) == (0, 0, 1) and len(driver.freed) == 1


def standin_frees_in_its_own_context():
    driver, manager = stand_in(context_handle=1)
    a = manager.memalloc(10)
    driver.contexts = []  # a thread with no context current
    del a
    assert driver.freed[-1][1] == 1 and driver.contexts == [], driver.freed
    other = manager_for(context_handle=2)  # a second device's pool
    driver.contexts = [2]
    b = manager.memalloc(10)
    del b  # freed in context 1, not in the current one
    assert driver.freed[-1][1] == 1 and driver.contexts == [2], driver.freed
    del other


def standin_allocation_errors():
    driver, manager = stand_in()
    result = driver._real.CUresult
    for size, status in ((1 << 20, result.CUDA_ERROR_OUT_OF_MEMORY),
                         (1 << 50, result.CUDA_ERROR_INVALID_VALUE)):  # fmt: skip
        driver.alloc_status = status
        try:
            manager.memalloc(size)
        except PoolMemoryError as error:
            assert isinstance(error, DeviceMemoryError) and isinstance(error, MemoryError)
            assert f"{size} bytes" in str(error) and str(1 << 30) in str(error), error
        else:
            raise AssertionError(f"{status.name} was not raised")
    driver.alloc_status = result.CUDA_ERROR_ILLEGAL_ADDRESS
    try:
        manager.memalloc(64)
    except CudaError as error:
        assert "CUDA_ERROR_ILLEGAL_ADDRESS" in str(error) and "64 bytes" in str(error), error
        assert error.status == "CUDA_ERROR_ILLEGAL_ADDRESS"
    else:
        raise AssertionError("CUDA_ERROR_ILLEGAL_ADDRESS was not raised")
    assert manager.pool_stats().failed_allocs == 3


def standin_reset_retires_the_pool():
    driver, manager = stand_in()
    alive = manager.memalloc(100)
    retired = manager._pool
    manager.reset()
    assert driver.calls[-3:] == ["sync", ("trim", 0), "destroy"], driver.calls
    assert retired.closed and retired not in pool_numba._open_pools
    del alive  # its pool is retired: no free reaches the driver
    assert not driver.freed
    manager.memalloc(8)  # a new pool
    assert manager._pool is not retired and driver.calls.count("create") == 2


def standin_exit_closes_every_pool():
    driver, manager = stand_in()
    _live.append(manager.memalloc(100))
    with manager.defer_cleanup():
        manager.memalloc(7)  # pending at exit
        pool_numba._close_pools()
    assert driver.calls[-2:] == [("trim", 0), "destroy"] and not pool_numba._open_pools
    _live.clear()
    assert not driver.freed


def standin_chosen_without_a_gpu():
    """Numba checks the plugin without touching CUDA: the environment variable's
    module attribute and set_memory_manager both work with no GPU."""
    from numba.cuda.cudadrv import driver  # checked: numba-cuda 0.30.4

    driver._ensure_memory_manager()  # reads NUMBA_CUDA_MEMORY_MANAGER
    assert driver._memory_manager is pool_numba.DevallocMemoryManager
    cuda.set_memory_manager(pool_numba.DevallocMemoryManager)


def simulator_refuses():
    for make in (lambda: pool_numba.DevallocMemoryManager(context=None), pool_numba.stats):
        try:
            make()
        except MemoryManagerError as error:
            assert "simulator" in str(error), error
        else:
            raise AssertionError("the simulator made a memory manager")
    assert not hasattr(cuda, "set_memory_manager")  # what the error says
    assert pool_numba._numba_memory_manager is pool_numba.DevallocMemoryManager
