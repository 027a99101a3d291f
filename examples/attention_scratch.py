"""Attention over a ragged batch, with per-head scratch sized by each sequence.

    python examples/attention_scratch.py                 # GPU: 16 sequences of 128-4096
                                                         # tokens, 16 heads of 64
    python examples/attention_scratch.py --sequences 64 --heads 32 --steps 50

A block per (sequence, head, chunk of queries); each thread takes up to four
of the chunk's queries in turn and needs scores as long as its sequence, so
the block needs (length x threads) floats: scratch whose size only the
kernel knows per block, the run-time-sized local array Numba has no way to
declare (numba/numba#6549). Each thread's scores are a column of it, so a
warp's accesses coalesce. Three ways to get it, each a mode:

devalloc    ``arena.alloc((length, threads), float32)`` by the block's first
            thread, each step one frame of an arena that sizes itself
            (``arena.run``)
malloc      the host adds up what every block needs, ``cuda.device_array`` of
            that each step, and passes each block its offset
prealloc    one buffer made once, the longest sequence's worth for every
            block

Every mode's output is checked against NumPy. Reports time per step and the
scratch memory each holds. Without a GPU it runs on the simulator, tiny.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.world import environment, simulate_without_gpu  # noqa: E402

simulate_without_gpu()
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc.backend import SIMULATOR  # noqa: E402

MODES = ("devalloc", "malloc", "prealloc")
QUERIES_PER_THREAD = 4  # each thread's queries, one after another in its column
MAX_DIM = 256  # head dims up to this: each thread keeps its query and sums locally


@cuda.jit(device=True)
def attend(q, k, v, out, start, n, head, query, scores, scale):
    """out[start + query, head] = softmax(q . k^T * scale) . v over the n keys of
    the sequence, with `scores` (at least n floats) as the query's scratch."""
    dim = q.shape[2]
    mine = cuda.local.array(MAX_DIM, np.float32)
    acc = cuda.local.array(MAX_DIM, np.float32)
    for d in range(dim):
        mine[d] = q[start + query, head, d]
        acc[d] = 0.0
    top = -math.inf
    for j in range(n):
        s = np.float32(0.0)
        for d in range(dim):
            s += mine[d] * k[start + j, head, d]
        s *= scale
        scores[j] = s
        top = max(top, s)
    total = 0.0
    for j in range(n):
        e = math.exp(scores[j] - top)
        total += e
        for d in range(dim):
            acc[d] += e * v[start + j, head, d]
    for d in range(dim):
        out[start + query, head, d] = acc[d] / total


@cuda.jit(device=True)
def queries_of(n):
    """This thread's queries in block (sequence, head, chunk): the chunk's
    ``blockDim.x * QUERIES_PER_THREAD`` queries of the sequence, every
    blockDim.x-th from the thread's own (first, step, stop; none when
    first >= stop)."""
    per_block = cuda.blockDim.x * QUERIES_PER_THREAD
    first = cuda.blockIdx.z * per_block + cuda.threadIdx.x
    return first, cuda.blockDim.x, min(n, (cuda.blockIdx.z + 1) * per_block)


@devalloc.kernel
def attention_arena(arena, q, k, v, starts, lengths, out, scale):
    """The block's scratch, (sequence length x threads) floats, taken by its
    first thread with ``arena.alloc``; each thread's scores are one column
    (neighbouring threads, neighbouring floats: the warp's accesses coalesce)."""
    b, head = cuda.blockIdx.x, cuda.blockIdx.y
    n = lengths[b]
    first, step, stop = queries_of(n)
    if cuda.blockIdx.z * cuda.blockDim.x * QUERIES_PER_THREAD >= n:
        return  # (the whole block: a short sequence's chunks past its end)
    where = cuda.shared.array(1, np.int64)
    if cuda.threadIdx.x == 0:
        where[0] = arena.offset(arena.alloc((n, cuda.blockDim.x), np.float32))
    cuda.syncthreads()
    if where[0] < 0:  # the arena is full: reported at the step's end (and regrown)
        return
    block = arena.view(where[0], n * cuda.blockDim.x, np.float32)
    scores = block[cuda.threadIdx.x :: cuda.blockDim.x]  # the thread's column
    for query in range(first, stop, step):
        attend(q, k, v, out, starts[b], n, head, query, scores, scale)


@cuda.jit
def attention_at(q, k, v, starts, lengths, out, scale, scratch, rows):
    """The same, the block's (n x threads) floats at scratch[rows[b, head, chunk]:]
    (malloc), or at a fixed stride of the longest sequence (prealloc: rows < 0)."""
    b, head, chunk, t = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z, cuda.threadIdx.x
    n = lengths[b]
    first, step, stop = queries_of(n)
    if first >= stop:
        return
    at = rows[b, head, chunk]
    if at < 0:  # prealloc: the longest sequence's worth for every block
        per_block = scratch.size // (cuda.gridDim.x * cuda.gridDim.y * cuda.gridDim.z)
        at = ((b * cuda.gridDim.y + head) * cuda.gridDim.z + chunk) * per_block
    block = scratch[at : at + n * cuda.blockDim.x]
    scores = block[t :: cuda.blockDim.x]  # the thread's column
    for query in range(first, stop, step):
        attend(q, k, v, out, starts[b], n, head, query, scores, scale)


if not SIMULATOR:  # what the PTX checks compile each kernel for (tests/test_ptx.py)
    from numba import types

    _f3, _i1 = types.float32[:, :, ::1], types.int64[::1]
    PTX_SIGNATURES = {
        "attention_arena": (_f3, _f3, _f3, _i1, _i1, _f3, types.float32),
        "attention_at": (_f3, _f3, _f3, _i1, _i1, _f3, types.float32, types.float32[::1],
                         types.int64[:, :, ::1]),
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
    per_block = threads * QUERIES_PER_THREAD  # queries
    chunks = -(-int(lengths.max()) // per_block)
    grid = (sequences, heads, chunks)
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
        if mode == "prealloc":
            longest = int(lengths.max())
            scratch = cuda.device_array(sequences * heads * chunks * longest * threads, np.float32)
            rows = cuda.to_device(np.full((sequences, heads, chunks), -1, np.int64))
            held = scratch.nbytes
        for _ in range(steps):
            began = time.perf_counter()
            if mode == "malloc":  # what this step needs, exactly: one allocation
                # (n x threads) floats for each block with queries, none for the others.
                busy = np.arange(chunks)[None, :] * per_block < lengths[:, None]
                sizes = np.repeat((busy * lengths[:, None] * threads)[:, None, :], heads, axis=1)
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
    parser.add_argument("--out", type=Path, help="results file (JSON)")
    args = parser.parse_args(argv)
    if min(args.sequences, args.shortest, args.heads, args.dim, args.steps) < 1:
        parser.error("sizes and --steps must be at least 1")
    if args.longest < args.shortest or not 1 <= args.threads <= 1024:
        parser.error("--longest must be at least --shortest, --threads from 1 to 1024")
    if args.dim > MAX_DIM:
        parser.error(f"--dim must be at most {MAX_DIM}")
    if args.out is not None and args.out.is_dir():
        parser.error(f"--out {args.out} is a folder: name the results file")
    batch = make_batch(args.sequences, args.shortest, args.longest, args.heads, args.dim)
    lengths = batch[4]
    where = "the GPU" if gpu else "Numba's CUDA simulator (no GPU found): tiny shapes"
    print(f"attention on {where}: {args.sequences} sequences of {lengths.min()}-"
          f"{lengths.max()} tokens, {args.heads} heads of {args.dim}")  # fmt: skip
    expected = reference(*batch)
    print(f"\n{'mode':>9} {'ms/step':>9} {'scratch MiB held':>17}")
    rows = []
    for mode in MODES:
        out, ms, held = run_mode(mode, batch, args.threads, args.steps)
        if not np.allclose(out, expected, rtol=1e-4, atol=1e-5):
            worst = np.nanmax(np.abs(out - expected))
            raise SystemExit(f"{mode}: the output differs from NumPy's (by up to {worst})")
        print(f"{mode:>9} {ms:9.3f} {held / 2**20:17.3f}")
        rows.append({"mode": mode, "ms_per_step": ms, "scratch_bytes": held})
    print("every mode's output matches NumPy's")
    if args.out is not None:
        names = ("sequences", "shortest", "longest", "heads", "dim", "threads", "steps")
        shape = {name: getattr(args, name) for name in names}
        shape["lengths"] = [int(n) for n in lengths]
        record = {"environment": environment(), "shape": shape, "results": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
