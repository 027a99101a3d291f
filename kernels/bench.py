"""Benchmark kernels: the GPU-allocator survey's tests, written for devalloc and for
each baseline a user would otherwise reach for. Every variant asks for the same
sizes (`request_size`) and keeps each result live by summing its address, so
the kernels differ only in how they get memory."""

import numpy as np
from numba import cuda

import devalloc

MIXED_MIN, MIXED_MAX = 4, 8192  # "random mixed sizes 4 B - 8 KiB", uniform in bytes


@cuda.jit(device=True)
def request_size(size, thread, i):
    """`size` bytes, or, when `size` is 0, a hashed size in [MIXED_MIN, MIXED_MAX]."""
    if size != 0:
        return size
    x = (thread * 0x9E3779B1 + i * 0x85EBCA6B + 0x165667B1) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return MIXED_MIN + x % (MIXED_MAX - MIXED_MIN + 1)


# -- devalloc --------------------------------------------------------------------------


@devalloc.kernel
def sustained(arena, size, iters, sink):
    """Each thread allocates `iters` times in a loop (sustained throughput)."""
    t = cuda.grid(1)
    acc = 0
    for i in range(iters):
        buf = arena.alloc(request_size(size, t, i), np.uint8)
        acc += arena.offset(buf)
    if t < sink.size:
        sink[t] = acc


@devalloc.kernel
def sustained_store(arena, size, iters, sink):
    """`sustained` with one store into each allocation: what a user's kernel sees."""
    t = cuda.grid(1)
    acc = 0
    for i in range(iters):
        buf = arena.alloc(request_size(size, t, i), np.uint8)
        if buf.size > 0:
            buf[0] = t & 0xFF
        acc += arena.offset(buf)
    if t < sink.size:
        sink[t] = acc


@devalloc.kernel
def single_shot(arena, out):
    """Each thread allocates 16 bytes once and fills them (the survey's test)."""
    t = cuda.grid(1)
    buf = arena.alloc(4, np.uint32)
    for i in range(4):
        buf[i] = t + i
    if t < out.size:
        out[t] = arena.offset(buf)


@devalloc.kernel
def one_each(arena, words, n, write_id, offsets, misses):
    """The device allocators' own one-size test (Gallatin's `gallatin_test`,
    Ouroboros' `main`): each of `n` threads allocates `words` 8-byte words
    once and records where (`offsets`); with `write_id`, it also writes its id
    into the allocation and fences, as Gallatin's kernel does. Failures are
    counted in `misses[0]`."""
    t = cuda.grid(1)
    if t >= n:
        return
    buf = arena.alloc(words, np.uint64)
    if buf.size == 0:
        cuda.atomic.add(misses, 0, 1)
        offsets[t] = -1
        return
    offsets[t] = arena.offset(buf)
    if write_id:
        buf[0] = t
        cuda.threadfence()


@devalloc.kernel
def ids_intact(arena, n, offsets, bad):
    """After `one_each` with `write_id`, in the same frame: counts in `bad[0]`
    the threads whose allocation no longer holds their id (two threads given
    overlapping memory)."""
    t = cuda.grid(1)
    if t < n and offsets[t] >= 0:
        if arena.view(offsets[t], 1, np.uint64)[0] != t:
            cuda.atomic.add(bad, 0, 1)


@devalloc.kernel
def alloc_until_full(arena, size, max_iters, counts):
    """Each thread allocates `size` bytes until the arena refuses (out-of-memory test)."""
    t = cuda.grid(1)
    n = 0
    for _ in range(max_iters):
        buf = arena.alloc(size, np.uint8)
        if buf.size == 0:
            break
        buf[0] = 1
        n += 1
    if t < counts.size:
        counts[t] = n


@devalloc.kernel
def launch_only(arena, out):
    """No allocation: measures what a devalloc launch costs over a plain one (a
    kernel that never touches its arena gets the lean wrapper: `launch.may_allocate`)."""
    if cuda.grid(1) == 0:
        out[0] += 1


@devalloc.kernel
def launch_may_allocate(arena, out):
    """`launch_only` with an allocation it never makes: the full wrapper's cost,
    the block's state, barrier and exit, in a kernel that allocates nothing."""
    if cuda.grid(1) == 0:
        out[0] += 1
    if out.size == 0:
        arena.alloc(1, np.int8)


# -- baselines -------------------------------------------------------------------------


@cuda.jit
def naive_bump(cursor, capacity, size, iters, sink):
    """One atomic per allocation per thread on one global counter."""
    t = cuda.grid(1)
    acc = 0
    for i in range(iters):
        n = request_size(size, t, i)
        offset = cuda.atomic.add(cursor, 0, (n + 15) & -16)
        if offset + n <= capacity:
            acc += offset
    if t < sink.size:
        sink[t] = acc


@cuda.jit(device=True, inline="always")
def warp_prefix_sum(value):
    """(sum over the lanes below, sum over the warp) of `value`, for a full warp."""
    lane = cuda.laneid
    total = value
    for step in (1, 2, 4, 8, 16):
        below = cuda.shfl_up_sync(0xFFFFFFFF, total, step)
        if lane >= step:
            total += below
    return total - value, cuda.shfl_sync(0xFFFFFFFF, total, 31)


@cuda.jit
def warp_aggregated(cursor, capacity, size, iters, sink):
    """The warp-aggregated atomic written by hand: a warp's lanes add up their
    requests and its first lane takes them in one atomic (full warps only, as
    the benchmarks launch; a partial warp makes one atomic per lane)."""
    t = cuda.grid(1)
    lane = cuda.laneid
    full = cuda.activemask() == 0xFFFFFFFF
    acc = 0
    for i in range(iters):
        n = (request_size(size, t, i) + 15) & -16
        if full:
            below, total = warp_prefix_sum(n)
            start = 0
            if lane == 0:
                start = cuda.atomic.add(cursor, 0, total)
            offset = cuda.shfl_sync(0xFFFFFFFF, start, 0) + below
        else:
            offset = cuda.atomic.add(cursor, 0, n)
        if offset + n <= capacity:
            acc += offset
    if t < sink.size:
        sink[t] = acc


@cuda.jit
def hand_slab(cursor, capacity, slab_bytes, size, iters, sink):
    """The per-warp slab written by hand, the ceiling devalloc's `warp_slab`
    aims at: a slab per warp in shared memory, one global atomic per slab, no
    diverged groups, no counting, no failure handling (full warps only)."""
    slabs = cuda.shared.array((32, 2), np.int64)  # per warp: next free byte, end
    t = cuda.grid(1)
    lane = cuda.laneid
    warp = cuda.threadIdx.x // 32
    if lane == 0:
        slabs[warp, 0] = 0
        slabs[warp, 1] = 0
    cuda.syncwarp()
    acc = 0
    for i in range(iters):
        n = (request_size(size, t, i) + 15) & -16
        below, total = warp_prefix_sum(n)
        start = 0
        if lane == 0:
            start = slabs[warp, 0]
            if start + total > slabs[warp, 1]:
                start = cuda.atomic.add(cursor, 0, max(slab_bytes, total))
                slabs[warp, 1] = start + max(slab_bytes, total)
            slabs[warp, 0] = start + total
        offset = cuda.shfl_sync(0xFFFFFFFF, start, 0) + below
        if offset + n <= capacity:
            acc += offset
    if t < sink.size:
        sink[t] = acc


@cuda.jit
def packed_store(buffer, warp_bytes, size, iters, sink):
    """`sustained_store`'s twin without an allocator: each warp writes its lanes'
    requests packed one after the other in a region of its own of `warp_bytes`
    (the addresses a perfect per-warp allocator would give; full warps only)."""
    t = cuda.grid(1)
    base = (t // 32) * warp_bytes
    cursor = 0
    acc = 0
    for i in range(iters):
        n = (request_size(size, t, i) + 15) & -16
        below, total = warp_prefix_sum(n)
        offset = base + cursor + below
        if offset < buffer.size:
            buffer[offset] = t & 0xFF
        cursor += total
        acc += offset
    if t < sink.size:
        sink[t] = acc


@cuda.jit
def preallocated(buffer, out):
    """`single_shot`'s work with the memory allocated beforehand on the host."""
    t = cuda.grid(1)
    if 4 * t + 3 < buffer.size:
        for i in range(4):
            buffer[4 * t + i] = t + i
        out[t] = 16 * t


@cuda.jit
def single_shot_by_hand(cursor, wrap, buffer, out):
    """`single_shot` with the in-kernel allocator a CUDA engineer writes by hand:
    lane 0 of each warp takes the warp's 32 x 16 B from one global counter in
    one atomic and a shuffle hands out the start (full warps only, as the
    benchmarks launch). The counter is never reset: offsets wrap at `wrap`
    bytes (a power of two, a multiple of a warp's 512 B, at most the buffer's
    size), so a launch costs no memset. No statistics, no failure, no block
    exit: the floor of any in-kernel allocator that hands out memory from one
    pool, to set `single_shot` and `preallocated` against."""
    t = cuda.grid(1)
    start = 0
    if cuda.laneid == 0:
        start = cuda.atomic.add(cursor, 0, 32 * 16)
    offset = (cuda.shfl_sync(0xFFFFFFFF, start, 0) + 16 * cuda.laneid) & (wrap - 1)
    word = offset >> 2
    for i in range(4):
        buffer[word + i] = t + i
    if t < out.size:
        out[t] = offset


@cuda.jit
def plain_launch(out):
    if cuda.grid(1) == 0:
        out[0] += 1


@cuda.jit
def plain_launch_with_scalar(handle, out):
    """`plain_launch` with one more int64 argument, as devalloc's wrapper has."""
    if cuda.grid(1) == 0:
        out[0] += 1 + handle * 0


@cuda.jit
def spin(microseconds):
    """One thread sleeping about `microseconds`: holds the stream while the host
    queues the launches to be timed, so that the GPU meets them already queued
    (a kernel shorter than its host launch time is otherwise timed at the
    host's pace)."""
    for _ in range(microseconds):
        cuda.nanosleep(1000)


DEVICE_MALLOC_SOURCE = r"""
extern "C" __global__ void device_malloc(int size, int iters, long long* sink, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    long long acc = 0;
    for (int i = 0; i < iters; ++i) {
        unsigned int x = (unsigned)t * 0x9E3779B1u + (unsigned)i * 0x85EBCA6Bu + 0x165667B1u;
        x ^= x >> 15; x *= 0x2C1B3C6Du; x ^= x >> 12;
        int bytes = size != 0 ? size : 4 + (int)(x % 8189u);
        void* p = malloc(bytes);
        acc += (long long)p;
        free(p);
    }
    if (t < n) sink[t] = acc;
}
"""


# Argument types of every kernel above, for compiling them to PTX without a GPU
# (tests/test_ptx.py). Kernels built with devalloc.kernel list the parameters
# after the arena.
def _signatures():
    from numba import types

    i64 = types.int64
    ints = types.int64[::1]
    return {
        "sustained": (i64, i64, ints),
        "sustained_store": (i64, i64, ints),
        "packed_store": (types.uint8[::1], i64, i64, i64, ints),
        "single_shot": (ints,),
        "one_each": (i64, i64, i64, ints, ints),
        "ids_intact": (i64, ints, ints),
        "alloc_until_full": (i64, i64, ints),
        "launch_only": (ints,),
        "launch_may_allocate": (ints,),
        "naive_bump": (ints, i64, i64, i64, ints),
        "warp_aggregated": (ints, i64, i64, i64, ints),
        "hand_slab": (ints, i64, i64, i64, i64, ints),
        "preallocated": (types.uint32[::1], ints),
        "single_shot_by_hand": (ints, i64, types.uint32[::1], ints),
        "plain_launch": (ints,),
        "plain_launch_with_scalar": (i64, ints),
        "spin": (i64,),
    }


PTX_SIGNATURES = _signatures()
