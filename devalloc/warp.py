"""Device side (GPU): the warp primitives the allocator uses, CUDA's own. The
simulator has exact stand-ins (`simulator.warp`); `backend` picks one or the
other, so one allocator source runs in both worlds."""

from numba import cuda

from .device_memory import device_function
from .layout import FULL_MASK

__all__ = [
    "activemask",
    "ballot_sync",
    "lanemask_lt",
    "nap",
    "pause",
    "shfl_sync",
    "shfl_up_sync",
    "syncwarp",
]

# Numba types these only as attributes of the cuda module; thin inlined
# device functions give the allocator names it can import.


@device_function
def activemask():
    return cuda.activemask()


@device_function
def ballot_sync(mask, predicate):
    # Numba types the ballot as int32: lane 31 would make it negative, and
    # sign-extended into 64-bit arithmetic it would count 32 lanes too many.
    # Non-negative here, as in the simulator.
    return cuda.ballot_sync(mask, predicate) & FULL_MASK


@device_function
def lanemask_lt():
    return cuda.lanemask_lt()


@device_function
def syncwarp(mask):
    cuda.syncwarp(mask)


@device_function
def shfl_sync(mask, value, src_lane):
    return cuda.shfl_sync(mask, value, src_lane)


@device_function
def shfl_up_sync(mask, value, delta):
    return cuda.shfl_up_sync(mask, value, delta)


@device_function
def pause():
    """Wait for another warp (a refill, the cursor put back) by polling again at
    once: on the H200, `nanosleep(32)` here cost 9% of the throughput of
    mixed sizes (100 K threads, 2026-12-01), whose refills others wait for."""


@device_function
def nap():
    """Wait for another warp to publish a shard's grant (two global round trips)
    without polling its word from every waiting warp at once: a short sleep."""
    cuda.nanosleep(100)
