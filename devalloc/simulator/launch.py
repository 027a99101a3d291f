"""Simulator side: a wrapper kernel compiled and launched (``cuda.jit``'s twin in
`launch`). Each simulated thread registers as a lane of its warp, so that the
warp stand-ins (`warp`) know it, and kernels run one at a time."""

import functools
import threading

from numba import cuda

from .device_memory import simulated_options
from .warp import enter_lane, exit_lane

__all__ = ["jit_kernel"]

# Numba's simulator runs one kernel at a time in a process (a second launch from
# another thread would run as a device-function call on that thread).
_one_kernel_at_a_time = threading.Lock()
_JOIN_SECONDS = 30


def jit_kernel(**options):
    """``cuda.jit(**options)`` for a wrapper kernel: ``jit_kernel(**options)(wrapper)[config]``
    is its launch, called as ``launch(handle, *args)``."""
    return lambda wrapper: _Kernel(wrapper, options)


class _Kernel:
    def __init__(self, wrapper, options):
        body = cuda.jit(device=True)(wrapper)

        @functools.wraps(wrapper)
        def with_lanes(launch, *args):
            handle, warps = launch
            enter_lane(warps)
            try:
                body(handle, *args)
            finally:
                exit_lane()

        self._dispatcher = cuda.jit(**simulated_options(options))(with_lanes)

    def __getitem__(self, config):
        """The launch with `config`: one kernel at a time; after an exception, it
        waits for the lanes still running to stop before returning, so that
        nothing of this launch runs into the next."""
        dispatcher = self._dispatcher

        def launch(handle, *args):
            warps = {}
            with _one_kernel_at_a_time:
                try:
                    dispatcher[config]((handle, warps), *args)
                finally:
                    for warp in list(warps.values()):
                        for thread in list(warp.threads.values()):
                            thread.join(_JOIN_SECONDS)

        return launch
