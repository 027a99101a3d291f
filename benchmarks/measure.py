"""What the benchmarks measure, shared by the runner (`run.py`) and the
pytest-benchmark suite. Device times come from CUDA events around the launch,
after warm-up; every figure is the median of several repetitions, and each
comparison is made against baselines measured in the same process."""

import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numba import cuda

import devalloc
from devalloc import layout

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels import bench as K
from kernels import world

BLOCK = 256
MIXED = 0  # `size` argument meaning "hashed sizes of 4 B - 8 KiB"


def environment():
    """`kernels.world.environment` and the GPU's compute capability."""
    capability = getattr(cuda.get_current_device(), "compute_capability", None)  # CUDA starts
    return {**world.environment(), "compute_capability": list(capability or []) or None}


def device_ms(launch, reps=7, warmup=2, queued=False):
    """Median device time of `launch()` in milliseconds (CUDA events). With
    `queued`, the launches are queued behind a `spin` kernel lasting longer
    than the host takes to queue them, so that short kernels are timed at the
    GPU's pace, not at the pace of the host launching them."""
    host_us = 0
    for _ in range(warmup):
        begin = time.perf_counter()
        launch()
        host_us = (time.perf_counter() - begin) * 1e6
    cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = cuda.event(), cuda.event()
        if queued:
            K.spin[1, 1](int(2 * host_us) + 200)
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop))
    return statistics.median(times)


def batch_us(launch, launches):
    """Host time of one call of `launch` in microseconds, over a batch of
    `launches` calls (then waits for the GPU, so batches start alike)."""
    begin = time.perf_counter()
    for _ in range(launches):
        launch()
    elapsed = (time.perf_counter() - begin) / launches * 1e6
    cuda.synchronize()
    return elapsed


def host_us_per_launch(launch, launches=2000, reps=7, warmup=50):
    """Median host time of one launch, in microseconds, over batches of `launches`."""
    batch_us(launch, warmup)
    return statistics.median(batch_us(launch, launches) for _ in range(reps))


def grid(threads):
    return -(-threads // BLOCK), min(threads, BLOCK)


# -- the allocators, each as "launch one kernel in which `threads` threads make
#    `iters` allocations of `size` bytes" ---------------------------------------------


def arena_bytes_for(strategy, threads, iters, size):
    """Room for every allocation of a launch, with headroom for slab tails."""
    mean = (K.MIXED_MIN + K.MIXED_MAX) // 2 if size == MIXED else size
    unit = 256 if strategy == "bump" else 16  # bump rounds every request up to `align`
    need = threads * iters * -(-mean // unit) * unit
    # Headroom: slabs are sized from capacity / warps, and larger slabs mean
    # fewer refills (global atomics). At most 3/4 of the memory free now: 96 GiB
    # fits the H200 (141 GB), not an H100 (80 GB).
    free, _total = cuda.current_context().get_memory_info()
    return min(need * 3 + (256 << 20), 96 << 30, free * 3 // 4)


class ArenaLauncher:
    def __init__(self, strategy, threads, iters, size):
        self.arena = devalloc.Arena(
            arena_bytes_for(strategy, threads, iters, size), strategy=strategy
        )
        self.sink = cuda.device_array(threads, np.int64)
        self.args = (size, iters, self.sink)
        self.config = grid(threads)

    def __call__(self):
        K.sustained[self.config](self.arena, *self.args)

    def close(self):
        self.arena.check()
        self.arena.close()


class CursorLauncher:
    """A baseline written by hand on one global cursor: `naive_bump` (one atomic
    per lane), `warp_aggregated` (one per warp) or `hand_slab` (one per slab of
    the size devalloc's `warp_slab` picks for the same launch)."""

    def __init__(self, kernel, threads, iters, size):
        self.cursor = cuda.to_device(np.zeros(1, np.int64))
        self.sink = cuda.device_array(threads, np.int64)
        self.args = (self.cursor, 1 << 62, size, iters, self.sink)
        if kernel == "hand_slab":
            capacity = arena_bytes_for("warp_slab", threads, iters, size)
            log2 = layout.log2_slab_for(capacity, -(-threads // 32), 256)
            self.args = (self.cursor, 1 << 62, 1 << log2, size, iters, self.sink)
        self.kernel = getattr(K, kernel)
        self.config = grid(threads)

    def __call__(self):
        self.kernel[self.config](*self.args)

    def close(self):
        pass


class DeviceMallocLauncher:
    """CUDA's device malloc (and free), from a CUDA C kernel compiled by CuPy."""

    heap_set = False

    def __init__(self, threads, iters, size):
        import cupy

        if not DeviceMallocLauncher.heap_set:
            cupy.cuda.runtime.deviceSetLimit(cupy.cuda.runtime.cudaLimitMallocHeapSize, 16 << 30)
            DeviceMallocLauncher.heap_set = True
        self.kernel = cupy.RawKernel(K.DEVICE_MALLOC_SOURCE, "device_malloc")
        self.sink = cupy.empty(threads, cupy.int64)
        self.threads, self.iters, self.size = threads, iters, size

    def __call__(self):
        blocks, block = grid(self.threads)
        self.kernel(
            (blocks,), (block,),
            (np.int32(self.size), np.int32(self.iters), self.sink, np.int32(self.threads)),
        )  # fmt: skip

    def close(self):
        pass


def launcher(allocator, threads, iters, size):
    if allocator in devalloc.STRATEGIES:
        return ArenaLauncher(allocator, threads, iters, size)
    if allocator in ("naive_bump", "warp_aggregated", "hand_slab"):
        return CursorLauncher(allocator, threads, iters, size)
    if allocator == "device_malloc":
        return DeviceMallocLauncher(threads, iters, size)
    raise ValueError(allocator)


def nrt_rate(threads, iters, size):
    """`np.empty` in a kernel with numba-cuda's NRT, measured in a process of its
    own (`nrt.py`: NRT is chosen before Numba is imported). A failure there is
    reported in the row, not raised: NRT is a baseline, not what is tested."""
    script = Path(__file__).resolve().parent / "nrt.py"
    args = [sys.executable, str(script), str(threads), str(iters), str(size)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        error = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return {"median_ms": float("nan"), "allocs_per_s": float("nan"), "error": error}
    return json.loads(result.stdout.strip().splitlines()[-1])


def allocation_rate(allocator, threads, iters, size, reps=7, queued=True):
    """Allocations per second and median milliseconds for one configuration,
    each launch queued behind a spin kernel (`device_ms`), so that its events
    time the GPU alone. Timed as it comes instead (`queued=False`), they also
    time the host launching it, about 20-30 us of Python beside a 100-500 us
    kernel, and the figure moves between calls: on the H200 (2026-12-04,
    `probe_mixed.py --queued`, two calls of three turns each) mixed sizes gave
    43.0-49.5 G/s as they came and 64.2-64.4 queued, 16 B 145.5-155.1 and
    166.5-166.7. (Figures before that day's fourteenth run were timed as they
    came.)"""
    if allocator == "nrt":
        return nrt_rate(threads, iters, size)
    run = launcher(allocator, threads, iters, size)
    try:
        ms = device_ms(run, reps=reps, queued=queued)
    finally:
        run.close()
    return {"median_ms": ms, "allocs_per_s": threads * iters / (ms / 1e3)}


def batched(launch, count):
    def run():
        for _ in range(count):
            launch()

    return run


def interleaved_ms(launches, reps=15, batch=20):
    """Median device time of one launch of each of `launches`, each timed over
    batches of `batch` back-to-back launches, the kernels taking turns so that
    clocks and caches treat them alike."""
    runs = [batched(launch, batch) for launch in launches]
    for run in runs:
        device_ms(run, reps=1)
    times = [[] for _ in runs]
    for _ in range(reps):
        for run, seen in zip(runs, times):
            seen.append(device_ms(run, reps=1, warmup=1, queued=True) / batch)
    return [statistics.median(seen) for seen in times]


def single_shot_ms(threads, reps=15, strategy="warp_slab"):
    """The survey's single-shot test: each thread allocates 16 B once and fills
    it; against the same kernel writing into memory allocated beforehand, and
    against the allocator written by hand (one warp-aggregated atomic on one
    counter: `K.single_shot_by_hand`). Returns (devalloc, preallocated, by
    hand) ms."""
    with single_shot_launches(threads, strategy) as launches:
        return interleaved_ms(launches, reps=reps)


@contextlib.contextmanager
def single_shot_launches(threads, strategy):
    """The three launches `single_shot_ms` compares (devalloc, preallocated, by
    hand), each a function of no arguments, with their arena open."""
    blocks, block = grid(threads)
    out = cuda.device_array(threads, np.int64)
    buffer = cuda.device_array(4 * threads, np.uint32)
    wrap = 1 << (16 * blocks * block - 1).bit_length()  # the launch's bytes, to a power of two
    by_hand = cuda.device_array(wrap // 4, np.uint32)
    cursor = cuda.to_device(np.zeros(1, np.int64))
    # Room for the slabs of a million threads to hold whole warps' chunks.
    with devalloc.Arena(threads * 512 + (64 << 20), strategy=strategy) as arena:
        yield [
            lambda: K.single_shot[blocks, block](arena, out),
            lambda: K.preallocated[blocks, block](buffer, out),
            lambda: K.single_shot_by_hand[blocks, block](cursor, wrap, by_hand, out),
        ]


def with_store_ms(strategy, threads, iters, size, reps=9):
    """One store into each allocation (`sustained_store`) against its twin that
    stores at packed addresses computed without an allocator (`packed_store`)."""
    largest = K.MIXED_MAX if size == MIXED else size
    warp_bytes = iters * 32 * (-(-largest // 16) * 16)
    blocks, block = grid(threads)
    sink = cuda.device_array(threads, np.int64)
    buffer = cuda.device_array(blocks * (block // 32) * warp_bytes, np.uint8)
    capacity = arena_bytes_for(strategy, threads, iters, size)
    with devalloc.Arena(capacity, strategy=strategy) as arena:
        devalloc_ms, packed_ms = interleaved_ms(
            [
                lambda: K.sustained_store[blocks, block](arena, size, iters, sink),
                lambda: K.packed_store[blocks, block](buffer, warp_bytes, size, iters, sink),
            ],
            reps=reps,
            batch=3,
        )
        arena.check()
    return devalloc_ms, packed_ms


def launch_overhead_us(launches=1000, pairs=15):
    """Host time per launch of a devalloc kernel against the same plain cuda.jit
    kernel and that kernel with one more int64 argument (what the arena costs
    Numba to marshal), on the default stream and on a stream of its own. The
    three take turns, a batch each, so machine noise cancels; the overheads
    are medians of the differences within each turn."""
    out = cuda.to_device(np.zeros(1, np.int64))
    rows = []
    with devalloc.Arena(1 << 20) as arena:
        for where, stream in (("default stream", 0), ("own stream", cuda.stream())):
            kinds = {
                "devalloc": lambda s=stream: K.launch_only[1, 32, s](arena, out),
                "plain": lambda s=stream: K.plain_launch[1, 32, s](out),
                "plain_with_scalar": lambda s=stream: K.plain_launch_with_scalar[1, 32, s](1, out),
            }
            times = {kind: [] for kind in kinds}
            for launch in kinds.values():
                batch_us(launch, 50)  # warm-up
            for _ in range(pairs):
                for kind, launch in kinds.items():
                    times[kind].append(batch_us(launch, launches))
            over = {
                f"over_{base}_us": statistics.median(
                    d - b for d, b in zip(times["devalloc"], times[base])
                )
                for base in ("plain", "plain_with_scalar")
            }
            medians = {f"{kind}_us": statistics.median(t) for kind, t in times.items()}
            rows.append({"stream": where, **medians, **over})
        arena.check()
    return rows


def frame_host_us(kernels=10, reps=200):
    """Host time of a frame of `kernels` small devalloc launches: launched one by
    one in `arena.frame()`, against one replay of the same frame captured with
    `arena.capture()`."""
    out = cuda.to_device(np.zeros(1, np.int64))
    with devalloc.Arena(1 << 20) as arena:

        def eager():
            with arena.frame(check=False):
                for _ in range(kernels):
                    K.launch_only[1, 32](arena, out)

        eager()
        with arena.capture() as graph:
            for _ in range(kernels):
                K.launch_only[1, 32](arena, out)
        result = {
            name: host_us_per_launch(run, launches=reps, reps=5, warmup=1)
            for name, run in (("eager_us", eager), ("replay_us", graph.replay))
        }
        arena.check()
    return {"kernels": kernels, **result}


def frame_memory(strategy, launches=1000, threads=256):
    """A frame of `launches` launches of one block, 16 B a thread (issue 8's row):
    what the arena holds at the end against what the frame asked."""
    out = cuda.device_array(threads, np.int64)
    with devalloc.Arena(8 << 30, strategy=strategy) as arena:
        with arena.frame():
            for _ in range(launches):
                K.single_shot[1, threads](arena, out)
            stats = arena.stats()
    asked = launches * threads * 16
    return {"strategy": strategy, "launches": launches, "asked_bytes": asked,
            "requested_bytes": stats.requested_bytes, "held_bytes": stats.current_bytes,
            "held_over_asked": stats.current_bytes / asked}  # fmt: skip


def usable_fraction(size, strategy="warp_slab", threads=1 << 20, capacity=1 << 30):
    """Allocate `size` bytes per thread until failure; the fraction of the arena used."""
    blocks, block = grid(threads)
    counts = cuda.device_array(threads, np.int64)
    with devalloc.Arena(capacity, strategy=strategy) as arena:
        K.alloc_until_full[blocks, block](arena, size, 1 << 30, counts)
        try:
            arena.check()
        except devalloc.ArenaOverflowError:
            pass  # expected: the arena was filled
    return int(counts.copy_to_host().sum()) * size / capacity
