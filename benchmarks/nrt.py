"""Numba's own answer to in-kernel allocation: ``np.empty`` inside a kernel, with
numba-cuda's NRT (``NUMBA_CUDA_ENABLE_NRT=1``), which allocates from CUDA's
device malloc heap and frees when the array dies. NRT must be switched on before
Numba is imported, so this runs as its own process; `measure.nrt_rate` calls it.

    python benchmarks/nrt.py THREADS ITERS SIZE      # SIZE 0: mixed 4 B - 8 KiB

Prints one JSON object: median device milliseconds and allocations per second.
"""

import os
import sys

os.environ["NUMBA_CUDA_ENABLE_NRT"] = "1"
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import json
from pathlib import Path

import numpy as np
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure as M
from measure import K

HEAP_BYTES = 16 << 30  # as for the device-malloc baseline


@cuda.jit
def nrt_sustained(size, iters, sink):
    """`iters` arrays of `request_size` bytes per thread, each written and freed."""
    t = cuda.grid(1)
    acc = 0
    for i in range(iters):
        buf = np.empty(K.request_size(size, t, i), np.uint8)
        buf[0] = 1
        acc += buf.size
    if t < sink.size:
        sink[t] = acc


def main():
    threads, iters, size = (int(a) for a in sys.argv[1:4])
    from cuda.bindings import driver

    cuda.current_context()  # the primary context, current, before its limit is set
    (err,) = driver.cuCtxSetLimit(driver.CUlimit.CU_LIMIT_MALLOC_HEAP_SIZE, HEAP_BYTES)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuCtxSetLimit: {err}")
    sink = cuda.device_array(threads, np.int64)
    blocks, block = M.grid(threads)
    ms = M.device_ms(lambda: nrt_sustained[blocks, block](size, iters, sink))
    print(json.dumps({"median_ms": ms, "allocs_per_s": threads * iters / (ms / 1e3)}))


if __name__ == "__main__":
    main()
