"""Attention over a ragged batch, with per-head scratch sized by each sequence.

    python examples/attention_scratch.py                 # GPU: 16 sequences of 128-4096
                                                         # tokens, 16 heads of 64
    python examples/attention_scratch.py --sequences 64 --heads 32 --steps 50

One block per (sequence, head); each thread takes the block's queries in turn
and needs a row of scores as long as its sequence: scratch whose size only the
kernel knows per block, the run-time-sized local array Numba has no way to
declare (numba/numba#6549). Three ways to get it, each a mode:

devalloc    ``arena.alloc(length, float32)`` in the kernel, each step one frame
            of an arena that sizes itself (``arena.run``)
malloc      the host adds up what every block needs, ``cuda.device_array`` of
            that each step, and passes each block its offset
prealloc    one buffer made once, a row of the longest possible sequence for
            every thread of every block

Every mode's output is checked against NumPy. Reports time per step and the
scratch memory each holds. Without a GPU it runs on the simulator, tiny.
"""

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.world import simulate_without_gpu  # noqa: E402

simulate_without_gpu()
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc.backend import SIMULATOR  # noqa: E402

MODES = ("devalloc", "malloc", "prealloc")


@cuda.jit(device=True)
def attend(q, k, v, out, start, n, head, query, scores, scale):
    """out[start + query, head] = softmax(q . k^T * scale) . v over the n keys of
    the sequence, with `scores` (at least n floats) as the row's scratch."""
    top = -math.inf
    for j in range(n):
        s = 0.0
        for d in range(q.shape[2]):
            s += q[start + query, head, d] * k[start + j, head, d]
        s *= scale
        scores[j] = s
        top = max(top, s)
    total = 0.0
    for j in range(n):
        e = math.exp(scores[j] - top)
        scores[j] = e
        total += e
    for d in range(q.shape[2]):
        acc = 0.0
        for j in range(n):
            acc += scores[j] * v[start + j, head, d]
        out[start + query, head, d] = acc / total


@devalloc.kernel
def attention_arena(arena, q, k, v, starts, lengths, out, scale):
    b, head, t = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
    n = lengths[b]
    need = 0
    if t < n:
        need = n
    scores = arena.alloc(need, np.float32)  # this thread's row, as long as its sequence
    if scores.size < need:  # the arena is full: reported at the step's end (and regrown)
        return
    for query in range(t, n, cuda.blockDim.x):
        attend(q, k, v, out, starts[b], n, head, query, scores, scale)


@cuda.jit
def attention_at(q, k, v, starts, lengths, out, scale, scratch, rows):
    """The same, each thread's row at scratch[rows[b, head] + t * lengths[b]:] (malloc),
    or at a fixed stride of the longest sequence (prealloc: rows[b, head] < 0)."""
    b, head, t = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
    n = lengths[b]
    if t >= n:
        return
    at = rows[b, head] + t * n
    if rows[b, head] < 0:  # prealloc: rows of the longest sequence, block after block
        stride = scratch.size // (cuda.gridDim.x * cuda.gridDim.y * cuda.blockDim.x)
        at = ((b * cuda.gridDim.y + head) * cuda.blockDim.x + t) * stride
    scores = scratch[at : at + n]
    for query in range(t, n, cuda.blockDim.x):
        attend(q, k, v, out, starts[b], n, head, query, scores, scale)


if not SIMULATOR:  # what the PTX checks compile each kernel for (tests/test_ptx.py)
    from numba import types

    _f3, _i1 = types.float32[:, :, ::1], types.int64[::1]
    PTX_SIGNATURES = {
        "attention_arena": (_f3, _f3, _f3, _i1, _i1, _f3, types.float32),
        "attention_at": (_f3, _f3, _f3, _i1, _i1, _f3, types.float32, types.float32[::1],
                         types.int64[:, ::1]),
    }  # fmt: skip


def reference(q, k, v, starts, lengths, scale):
    out = np.empty_like(q)
    for start, n in zip(starts, lengths):
        for head in range(q.shape[1]):
            qs, ks, vs = (a[start : start + n, head].astype(np.float64) for a in (q, k, v))
            scores = qs @ ks.T * scale
            weights = np.exp(scores - scores.max(axis=1, keepdims=True))
            weights /= weights.sum(axis=1, keepdims=True)
            out[start : start + n, head] = weights @ vs
    return out


def run_mode(mode, batch, threads, steps):
    """Run `steps` steps of one mode; returns (output, ms per step, scratch bytes held)."""
    q, k, v, starts, lengths, scale = batch
    sequences, heads = len(lengths), q.shape[1]
    grid = (sequences, heads)
    d_q, d_k, d_v = (cuda.to_device(a) for a in (q, k, v))
    d_starts, d_lengths = cuda.to_device(starts), cuda.to_device(lengths)
    out = cuda.to_device(np.full(q.shape, np.nan, np.float32))
    times, held = [], 0
    if mode == "devalloc":
        arena = devalloc.Arena(1 << 20)

        def step():
            attention_arena[grid, threads](arena, d_q, d_k, d_v, d_starts, d_lengths, out, scale)

        for _ in range(steps):
            began = time.perf_counter()
            arena.run(step)  # a frame: waits for the step, grows the arena if it overflowed
            times.append(time.perf_counter() - began)
        held = arena.capacity
        arena.close()
    else:
        per_block = np.minimum(lengths, threads) * lengths  # rows x row length, per head
        if mode == "prealloc":
            longest = int(lengths.max())
            scratch = cuda.device_array(sequences * heads * threads * longest, np.float32)
            rows = cuda.to_device(np.full((sequences, heads), -1, np.int64))
            held = scratch.nbytes
        for _ in range(steps):
            began = time.perf_counter()
            if mode == "malloc":  # what this step needs, exactly: one allocation
                sizes = np.repeat(per_block, heads).reshape(sequences, heads)
                offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).reshape(sizes.shape)
                scratch = cuda.device_array(max(int(sizes.sum()), 1), np.float32)
                rows = cuda.to_device(offsets.astype(np.int64))
                held = max(held, scratch.nbytes)
            attention_at[grid, threads](d_q, d_k, d_v, d_starts, d_lengths, out, scale,
                                        scratch, rows)  # fmt: skip
            cuda.synchronize()
            times.append(time.perf_counter() - began)
    return out.copy_to_host(), statistics.median(times) * 1e3, held


def make_batch(sequences, shortest, longest, heads, dim, seed=7):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(shortest, longest + 1, sequences).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    q, k, v = (rng.standard_normal((int(lengths.sum()), heads, dim), np.float32) for _ in "qkv")
    return q, k, v, starts, lengths, np.float32(1 / math.sqrt(dim))


def main(argv=None):
    gpu = not SIMULATOR and cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=16 if gpu else 3)
    parser.add_argument("--shortest", type=int, default=128 if gpu else 3)
    parser.add_argument("--longest", type=int, default=4096 if gpu else 12)
    parser.add_argument("--heads", type=int, default=16 if gpu else 2)
    parser.add_argument("--dim", type=int, default=64 if gpu else 4)
    parser.add_argument("--threads", type=int, default=128 if gpu else 8)
    parser.add_argument("--steps", type=int, default=20 if gpu else 1)
    args = parser.parse_args(argv)
    if min(args.sequences, args.shortest, args.heads, args.dim, args.steps) < 1:
        parser.error("sizes and --steps must be at least 1")
    if args.longest < args.shortest or not 1 <= args.threads <= 1024:
        parser.error("--longest must be at least --shortest, --threads from 1 to 1024")
    batch = make_batch(args.sequences, args.shortest, args.longest, args.heads, args.dim)
    lengths = batch[4]
    where = "the GPU" if gpu else "Numba's CUDA simulator (no GPU found): tiny shapes"
    print(f"attention on {where}: {args.sequences} sequences of {lengths.min()}-"
          f"{lengths.max()} tokens, {args.heads} heads of {args.dim}")  # fmt: skip
    expected = reference(*batch)
    print(f"\n{'mode':>9} {'ms/step':>9} {'scratch MiB held':>17}")
    for mode in MODES:
        out, ms, held = run_mode(mode, batch, args.threads, args.steps)
        if not np.allclose(out, expected, rtol=1e-4, atol=1e-5):
            worst = np.nanmax(np.abs(out - expected))
            raise SystemExit(f"{mode}: the output differs from NumPy's (by up to {worst})")
        print(f"{mode:>9} {ms:9.3f} {held / 2**20:17.3f}")
    print("every mode's output matches NumPy's")


if __name__ == "__main__":
    main()
