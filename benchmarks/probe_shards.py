"""Why cursor shards (run 12): one 16 B allocation a thread through one atomic a
warp, on one address or on S addresses (128 B apart, by block index), against
no atomic at all; plain Numba kernels, then devalloc's single-shot beside them.

    python benchmarks/probe_shards.py [OUT.json]     (on the GPU, from the repository root)
"""

import json
import sys
from pathlib import Path

import numpy as np
from numba import cuda, int64

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import interleaved_ms, single_shot_ms

ADDRESSES = (1, 4, 8, 16, 32, 64, 128, 256)


def one_atomic_a_warp(addresses, atomic=True):
    """Each warp's lane 0 takes 512 B with one atomic on word (block % addresses)
    * 16 (or, without `atomic`, computes a packed offset); each lane fills 16 B."""

    @cuda.jit
    def kernel(cursors, out, data):
        t = cuda.grid(1)
        start = int64(t) * 16
        if atomic:
            if cuda.laneid == 0:
                s = cuda.blockIdx.x % addresses
                start = cuda.atomic.add(cursors, s * 16, 512) + s * (1 << 30)
            start = cuda.shfl_sync(0xFFFFFFFF, start, 0) + cuda.laneid * 16
            start = start % (data.size * 4 - 16)
        word = start >> 2
        for i in range(4):
            data[word + i] = t + i
        if t < out.size:
            out[t] = start

    return kernel


def main():
    results = {}
    for threads in (10_000, 100_000, 1 << 20):
        blocks = -(-threads // 256)
        out = cuda.device_array(threads, np.int64)
        data = cuda.device_array(4 * threads + 64, np.uint32)
        cursors = cuda.to_device(np.zeros(16 * max(ADDRESSES), np.int64))
        kernels = {"no atomic": one_atomic_a_warp(1, atomic=False)}
        kernels.update({str(n): one_atomic_a_warp(n) for n in ADDRESSES})
        launches = [
            lambda k=k: k[blocks, 256](cursors, out, data)  # noqa: B023 (timed right here)
            for k in kernels.values()
        ]
        row = {name: ms * 1e3 for name, ms in zip(kernels, interleaved_ms(launches))}
        single_shot_us = [ms * 1e3 for ms in single_shot_ms(threads)]
        row["devalloc single-shot, preallocated, by hand"] = single_shot_us
        results[threads] = row
        print(threads, json.dumps(row), flush=True)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
