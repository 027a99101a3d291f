"""The one switch between the GPU and Numba's CUDA simulator.

``NUMBA_ENABLE_CUDASIM=1`` (read by `numba_compat` as `SIMULATOR`) picks the
simulator. What differs between the two worlds is picked here, once, and the
rest of the package imports it from here. The simulator's side lives in the
`devalloc.simulator` sub-package, module for module beside the GPU's:

=================  ==========================  ======================================
name               GPU                         simulator
=================  ==========================  ======================================
device functions   device_memory               simulator.device_memory
warp primitives    warp                        simulator.warp
arena_maker        numba_arena (a Numba type)  simulator.numba_arena (a Python object)
jit_kernel         ``cuda.jit``                simulator.launch (lanes, one kernel
                                               at a time)
Memory             host_memory.GpuMemory       simulator.host_memory.SimMemory
Recording          cuda_graphs.Recording       simulator.cuda_graphs.Recording
=================  ==========================  ======================================

The device functions are ``device_function``, ``array_at``, ``bit_length``, ``int32_words``,
``leave_add``, ``load_volatile``, ``load_volatile_shared``, ``reduce_add``,
``store_volatile_at`` and ``store_volatile_shared``; the warp primitives ``activemask``,
``ballot_sync``, ``lanemask_lt``, ``nap``, ``pause``, ``shfl_sync``, ``shfl_up_sync`` and
``syncwarp``.

Two host-side differences are tested where they happen, on `SIMULATOR`: a
simulated launch has run (up to an exception, if it raised) when it returns
(`arena`), and it is given no dtype argument (`launch`: the GPU refuses one
while typing the launch). What differs in Numba itself (its internals; the
simulator compiles no PTX) stays in `numba_compat`.
"""

from .numba_compat import SIMULATOR

# The device side first: the kernel arenas imported below build on the allocator,
# which takes its device functions and warp primitives from this module while it
# is still being imported.
if SIMULATOR:
    from .simulator import device_memory as _device_memory
    from .simulator import warp as _warp
else:
    from . import device_memory as _device_memory
    from . import warp as _warp

array_at = _device_memory.array_at
bit_length = _device_memory.bit_length
device_function = _device_memory.device_function
int32_words = _device_memory.int32_words
leave_add = _device_memory.leave_add
load_volatile = _device_memory.load_volatile
load_volatile_shared = _device_memory.load_volatile_shared
reduce_add = _device_memory.reduce_add
store_volatile_at = _device_memory.store_volatile_at
store_volatile_shared = _device_memory.store_volatile_shared

activemask = _warp.activemask
ballot_sync = _warp.ballot_sync
lanemask_lt = _warp.lanemask_lt
nap = _warp.nap
pause = _warp.pause
shfl_sync = _warp.shfl_sync
shfl_up_sync = _warp.shfl_up_sync
syncwarp = _warp.syncwarp

if SIMULATOR:
    from .simulator.cuda_graphs import Recording
    from .simulator.host_memory import SimMemory as Memory
    from .simulator.launch import jit_kernel
    from .simulator.numba_arena import arena_maker
else:
    from numba.cuda import jit as jit_kernel

    from .cuda_graphs import Recording
    from .host_memory import GpuMemory as Memory
    from .numba_arena import arena_maker

__all__ = [
    "SIMULATOR",
    "Memory",
    "Recording",
    "activemask",
    "arena_maker",
    "array_at",
    "ballot_sync",
    "bit_length",
    "device_function",
    "int32_words",
    "jit_kernel",
    "lanemask_lt",
    "leave_add",
    "load_volatile",
    "load_volatile_shared",
    "nap",
    "pause",
    "reduce_add",
    "shfl_sync",
    "shfl_up_sync",
    "store_volatile_at",
    "store_volatile_shared",
    "syncwarp",
]
