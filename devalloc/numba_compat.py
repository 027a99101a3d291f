"""The one seam to numba-cuda: every use of it beyond its documented user API
(``cuda.jit``, launches, device arrays, streams, events, atomics and warp
intrinsics), each with the numba-cuda version it was checked against.

numba-cuda is in maintenance mode (NVIDIA/numba-cuda#902; its new work goes to
numba-cuda-mlir, which generates MLIR rather than LLVM IR). Moving devalloc to
another back end starts here: the rest of the package imports these names from
this module, never from numba's internals.

- Typing and lowering of the kernel-side Arena and of devalloc's intrinsics
  (`numba_arena`, `device_memory`): ``numba.cuda.extending``, the data model,
  ``cgutils``, ``carray`` and LLVM IR through llvmlite. Checked: numba-cuda 0.30.4.
- A dead-code rule patched (`keep_stores_into_arrays`). Checked: 0.30.4.
- Compiling without a GPU (`compiling_for`): the device lookup of numba-cuda's
  device-function dispatcher, under its compiler lock. Checked: 0.30.4.
- Driver objects of the host side (`host_memory`): ``DeviceNDArray`` over arena
  memory (and copies of one made without its constructor, `rebind`), raw
  host/device copies and memsets, the deferred-deallocation queue. Checked: 0.30.4.
- The simulator's device array, for views of simulated arena memory
  (`simulator.host_memory`). Checked: 0.30.4.
- Numba's External Memory Management interface, version 1 (`allocators.numba`):
  ``HostOnlyCUDAMemoryManager`` (Numba's own pinned and mapped host memory),
  ``MemoryPointer`` (its ``__init__`` with no finalizer, its ``free``, ``view``
  and ``device_pointer``), ``MemoryInfo``, and a context's ``memory_manager``
  (`current_memory_manager`). Checked: 0.30.4.
- A launch made without the per-call parts of Numba's own (`direct_launch`):
  the dispatcher's typing entry point, the kernel's argument preparation and
  cuda.core's launch. Checked: 0.30.4 (cuda-core 1.2).
"""

from contextlib import contextmanager

import numpy as np
from numba import config

SIMULATOR = bool(config.ENABLE_CUDASIM)

__all__ = ["SIMULATOR", "compiling_for", "direct_launch", "numpy_dtype_of"]

if SIMULATOR:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    __all__ += ["FakeCUDAArray", "refuse_device_allocations"]
else:
    from llvmlite import ir
    from numba.core.errors import TypingError
    from numba.cuda import cgutils
    from numba.cuda.cudadrv import driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    from numba.cuda.cudadrv.driver import HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer
    from numba.cuda.cudadrv.error import CudaSupportError
    from numba.cuda.datamodel.models import StructModel
    from numba.cuda.extending import (
        intrinsic,
        make_attribute_wrapper,
        overload_method,
        register_model,
    )
    from numba.cuda.np.numpy_support import as_dtype, carray

    __all__ += [
        "CudaSupportError",
        "DeviceNDArray",
        "HostOnlyCUDAMemoryManager",
        "MemoryInfo",
        "MemoryPointer",
        "StructModel",
        "TypingError",
        "as_dtype",
        "carray",
        "cgutils",
        "current_memory_manager",
        "driver",
        "flush_deallocations",
        "intrinsic",
        "ir",
        "keep_stores_into_arrays",
        "make_attribute_wrapper",
        "overload_method",
        "rebind",
        "register_model",
    ]


def numpy_dtype_of(dtype):
    """A Numba scalar type (``numba.float32``) as its NumPy dtype, since kernels
    take either; anything else as given. (Its name is NumPy's: ``str`` of one.)"""
    if isinstance(dtype, type) or not type(dtype).__module__.startswith("numba"):
        return dtype
    try:
        return np.dtype(str(dtype))
    except TypeError:
        return dtype


def rebind(array, stream):
    """A new device array object over `array`'s memory, shape and dtype, bound to
    `stream`: a copy of its attributes. (DeviceNDArray's constructor checks the
    shape and builds an index model each time: about 10 us on the H200's host,
    most of what a frame array would cost. Its attributes are plain values:
    ndim, shape, strides, dtype, size, alloc_size, gpu_data, stream, _dummy.)"""
    copy = object.__new__(type(array))
    copy.__dict__.update(array.__dict__)
    copy.stream = stream
    return copy


def current_memory_manager():
    """The memory manager Numba made for the current context (making the
    context if there is none)."""
    from numba import cuda

    return cuda.current_context().memory_manager


def refuse_device_allocations(refuse):
    """On the simulator: Numba's ``cuda.to_device``, ``cuda.device_array`` and
    ``cuda.device_array_like`` raise while ``refuse()`` is true, as CUDA's
    cuMemAlloc does in a thread that captures a graph (numba-cuda raises
    CudaAPIError CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED there: seen on the H200
    and an H100, 2026-12-06). Wraps the simulator's functions in ``numba.cuda``'s
    namespace (a name imported from it earlier keeps the unwrapped one).
    Checked: 0.30.4."""
    import functools

    import numba.cuda

    for name in ("to_device", "device_array", "device_array_like"):
        allocate = getattr(numba.cuda, name)

        @functools.wraps(allocate)
        def refusing(*args, _allocate=allocate, _name=name, **kwargs):
            if refuse():
                raise RuntimeError(
                    f"cuda.{_name} while this thread captures a graph: CUDA refuses "
                    "cuMemAlloc then (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, as the GPU "
                    "says it); make device arrays before arena.capture(), or use "
                    "arena.empty"
                )
            return _allocate(*args, **kwargs)

        setattr(numba.cuda, name, refusing)


def flush_deallocations():
    """Free now what Numba queued for freeing in the current context (Numba frees
    dropped device memory in batches)."""
    from numba import cuda

    cuda.current_context().deallocations.clear()


def _keep(stmt, lives, lives_n_aliases, arg_aliases, alias_map, func_ir, typemap):
    lives_n_aliases.add(stmt.target.name)  # as if the array were read afterwards
    return stmt


def keep_stores_into_arrays():
    """Stop numba-cuda's dead-code elimination from dropping stores into arrays.

    Checked against numba-cuda 0.30.4: after inlining overloads it removes a
    store ``a[i] = x`` (a dynamic index) when ``a`` is not read afterwards and
    its alias analysis does not tie ``a`` to an argument. It cannot tie an
    array made by ``carray`` over an address to anything, so an
    ``arena.alloc`` array lost its last stores on the GPU: ``buf[0] = m;
    buf[buf.size - 1] = m`` compiled to the first store only, and the data a
    kernel left for the next kernel of a frame could vanish. In a kernel,
    every array is memory someone may read later.
    """
    from numba.cuda.core import ir as numba_ir
    from numba.cuda.core import ir_utils

    for setitem in numba_ir.setitem_types:
        ir_utils.remove_dead_extensions.setdefault(setitem, _keep)


class _StandInDevice:
    """What numba-cuda's device-function compiler asks the current device for."""

    def __init__(self, cc):
        self.compute_capability = cc


@contextmanager
def compiling_for(cc):
    """Compile device functions for compute capability `cc`, with or without a GPU.

    numba-cuda compiles device functions (and the bodies of @overload) through a
    dispatcher that asks ``get_current_device()`` for the compute capability,
    which fails on a machine without a GPU. Under this context that one lookup
    answers `cc`. The simulator compiles nothing: there it raises RuntimeError.
    """
    if SIMULATOR:
        raise RuntimeError("PTX cannot be generated under the CUDA simulator")
    from numba.cuda import dispatcher as numba_dispatcher
    from numba.cuda.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        original = numba_dispatcher.get_current_device
        numba_dispatcher.get_current_device = lambda: _StandInDevice(cc)
        try:
            yield
        finally:
            numba_dispatcher.get_current_device = original


class _DirectLaunch:
    """`configured` (``dispatcher[grid, block, stream, shared]``) called as
    ``launch(handle, *args)``, `handle` an int64 first argument: the same launch
    as ``configured(handle, *args)``, with the per-call work of Numba's launch
    path that cannot change between calls done once. Numba builds a cuda.core
    ``LaunchConfig`` (about 0.6 us) and a ctypes scalar for each integer (0.2
    us) on every launch; here the config is built once and the handle passed as
    the Python int cuda.core takes for a 64-bit argument. The argument types are
    still dispatched on each call (Numba's C fast path), and the other arguments
    prepared by Numba. Anything off the common path (a debug or cooperative
    kernel, argument extensions, launch-config-sensitive kernels, pre-launch
    callbacks) takes Numba's own launch.

    Checked against numba-cuda 0.30.4 (``Dispatcher.call``, ``_Kernel.launch``).
    """

    __slots__ = ("_config", "_configured", "_dispatcher", "_stream")

    def __init__(self, configured):
        self._configured = configured
        self._dispatcher = configured.dispatcher
        self._stream = configured.stream
        self._config = _launch_config(configured.griddim, configured.blockdim, configured.sharedmem)

    def __call__(self, handle, *args):
        configured = self._configured
        dispatcher = self._dispatcher
        if dispatcher._launch_config_sensitive or dispatcher.specialized:
            return configured(handle, *args)
        every = (handle, *args)
        previous = _numba_dispatcher._dispatcher.swap_current_launch_args(every)
        try:
            kernel = _numba_dispatcher._dispatcher.Dispatcher._cuda_call(
                dispatcher, *every, **{_numba_dispatcher._LAUNCH_CONFIG_KW: configured}
            )
            if (
                kernel.debug
                or kernel.cooperative
                or kernel.extensions
                or getattr(kernel, "launch_config_sensitive", False)
                or configured.pre_launch_callbacks
            ):
                dispatcher._update_launch_config_sensitivity(kernel, configured)
                for callback in configured.pre_launch_callbacks:
                    callback(kernel, configured)
                return kernel.launch(
                    every,
                    configured.griddim,
                    configured.blockdim,
                    self._stream,
                    configured.sharedmem,
                )
            stream = self._stream
            retr = []
            kernelargs = [handle]
            prepare = kernel._prepare_args
            for argtype, value in zip(kernel.argument_types[1:], args):
                prepare(argtype, value, stream, retr, kernelargs)
            _core_launch(stream, self._config, kernel._codelibrary.get_cufunc().kernel, *kernelargs)
            for write_back in retr:
                write_back()
        finally:
            _numba_dispatcher._dispatcher.swap_current_launch_args(previous)


def _launch_config(griddim, blockdim, sharedmem):
    from numba.cuda._compat import CUDA_CORE_GE_1_0

    cooperative = "is_cooperative" if CUDA_CORE_GE_1_0 else "cooperative_launch"
    return _LaunchConfig(grid=griddim, block=blockdim, shmem_size=sharedmem, **{cooperative: False})


def direct_launch(configured):
    """`_DirectLaunch` of `configured`, or `configured` itself on the simulator and
    where the numba-cuda installed lacks the internals `_DirectLaunch` uses."""
    if not _DIRECT_LAUNCH:
        return configured
    return _DirectLaunch(configured)


_DIRECT_LAUNCH = False  # the simulator launches through Numba's own path
if not SIMULATOR:
    try:
        from cuda.core import LaunchConfig as _LaunchConfig
        from cuda.core import launch as _core_launch
        from numba.cuda import dispatcher as _numba_dispatcher

        _DIRECT_LAUNCH = all(
            hasattr(_numba_dispatcher, name) for name in ("_dispatcher", "_LAUNCH_CONFIG_KW")
        ) and hasattr(_numba_dispatcher._dispatcher, "swap_current_launch_args")
    except ImportError:  # another numba-cuda or cuda.core: Numba's own launch path
        _DIRECT_LAUNCH = False
