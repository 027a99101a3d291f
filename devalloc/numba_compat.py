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
  memory, raw host/device copies, the deferred-deallocation queue. Checked: 0.30.4.
- The simulator's device array, for views of simulated arena memory
  (`simulator.host_memory`). Checked: 0.30.4.
"""

from contextlib import contextmanager

from numba import config

SIMULATOR = bool(config.ENABLE_CUDASIM)

__all__ = ["SIMULATOR", "compiling_for"]

if SIMULATOR:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    __all__ += ["FakeCUDAArray"]
else:
    from llvmlite import ir
    from numba.core.errors import TypingError
    from numba.cuda import cgutils
    from numba.cuda.cudadrv import driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
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
        "StructModel",
        "TypingError",
        "as_dtype",
        "carray",
        "cgutils",
        "driver",
        "flush_deallocations",
        "intrinsic",
        "ir",
        "keep_stores_into_arrays",
        "make_attribute_wrapper",
        "overload_method",
        "register_model",
    ]


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
