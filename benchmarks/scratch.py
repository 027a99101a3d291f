"""Per-launch variable scratch: every way a Numba user gets it, side by side.

    python benchmarks/scratch.py                         # GPU: 2**18 threads, 8-512 floats each
    python benchmarks/scratch.py --threads 65536 --max-length 1024 --launches 500
    python benchmarks/scratch.py --modes devalloc-warp_slab malloc static-worst

The kernel. Thread i of a launch needs a scratch array of L_i float32, a
length known only on the device (numba/numba#6549: Numba has no run-time-sized
local arrays). It computes the weighted median position of an adaptive window
of a counts signal: it writes the running sum of ``signal[i : i + L_i]`` into
its scratch, binary-searches it for half the window's total, and writes
``k + run[k] / total`` (k: the first position whose running sum reaches half
the total). The lengths are drawn anew for every launch (``--sets`` draws,
taken in turn, made before the timing as if an earlier kernel had made them)
from a skewed distribution: ``L = floor(min * (max / min) ** (u * u))``, u
uniform, and one thread of each draw at ``--max-length``. For 8-512 the
median is about 22, the mean about 73: the worst case is 7 times the mean.

The modes, each the whole per-launch cost of getting the scratch:

devalloc-warp_slab  ``arena.alloc(L_i, float32)`` in the kernel; each launch one
devalloc-bump       frame of an arena that sizes itself (``arena.run``). The
                    arena is made once, outside the timing, at 1 MiB; its first
                    ``Sizing.measure`` (3) frames, also untimed, grow it and
                    settle it at 1.5 times their peak (held: that capacity)
malloc              the lengths to the host, their prefix sum (the offsets) back
                    to the device, ``cuda.device_array(sum L)`` (Numba's default
                    manager: ``cudaMalloc``, and ``cudaFree`` in its batches),
                    the kernel reading each thread's offset; held: sum L
malloc-async        the same with the buffer from cuda.core's
                    ``Device.allocate(n, stream)`` / ``Buffer.close(stream)``
                    (``cudaMallocAsync`` / ``cudaFreeAsync`` on the device's
                    default pool), handed to Numba through the CUDA Array
                    Interface (``cuda.as_cuda_array``); needs a GPU
static-worst        one buffer of threads x max-length, made once outside the
                    timing, thread i at ``i * max-length``; held: that buffer
nrt                 ``np.empty(L_i, np.float32)`` in the kernel with numba-cuda's
                    NRT (CUDA's device malloc heap), in a process of its own
                    (NRT is chosen before Numba is imported); held: the heap it
                    reserves (``--nrt-heap-mib``; by default 4 x (sum of 4 L +
                    128 B per thread), at least 64 MiB: device malloc's overhead
                    per allocation is not documented)

The baselines get everything made once that can be: the offsets' host and
device arrays, the lengths' host array. What is timed per launch is the host's
``perf_counter`` around all of that launch's work, the launch and the wait for
it (the malloc modes also give the three parts: offsets, allocation, kernel),
after ``--warmup`` untimed launches; on a GPU also the device time between
CUDA events recorded before the launch's work and after its kernel (their two
``record`` calls are inside the host time, alike for every mode). The
output is poisoned (NaN) before every launch, outside the timing, and the last
launch's output of every mode is checked against NumPy's.

Writes JSON (environment, parameters, one row per mode, skipped modes with the
reason) to ``--out`` (default ``benchmarks/results/scratch-DATE.json``) and,
with matplotlib, a bar chart beside it (``.png``). Exits 1 if a mode's output
is wrong or a mode failed. Without a GPU it runs on Numba's CUDA simulator,
tiny (then the times mean nothing; the checks do).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels import world  # noqa: E402
from kernels.world import simulate_without_gpu  # noqa: E402

simulate_without_gpu()
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc.backend import SIMULATOR  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
FIELDS = {  # what the results rows hold (written into the JSON)
    "host_us": "wall time per launch, perf_counter: the launch's host work, launch and wait",
    "device_us": "GPU: time between CUDA events recorded before the launch's work and after "
    "its kernel (copies, idle waits for the host and the kernel)",
    "parts_us": "malloc modes: offsets (L to host, prefix sum to device), allocate, kernel",
    "held_bytes": "scratch memory reserved while a launch runs: the arena's capacity, the "
    "buffer allocated (largest launch), the worst-case buffer, NRT's malloc heap",
    "peak_used_bytes": "devalloc: the most of the arena a launch used (stats().peak_bytes)",
    "check": "'ok' if the last timed launch's output equals NumPy's, else what differs",
}
BLOCK = 256
MAX_LENGTH = 1 << 20  # window sums of counts below 16 stay exact in float32 (< 2**24)
COUNTS = (1, 16)  # the signal: integer counts in [1, 16), so every sum is exact
MODES = {
    "devalloc-warp_slab": "arena.alloc(L, float32) in the kernel, warp_slab; arena.run per launch",
    "devalloc-bump": "arena.alloc(L, float32) in the kernel, bump; arena.run per launch",
    "malloc": "L to host, prefix sum to device, cuda.device_array(sum L) (cudaMalloc)",
    "malloc-async": "as malloc, cuda.core Device.allocate/Buffer.close (cudaMallocAsync)",
    "static-worst": "one threads x max-length buffer made once; thread i at i * max-length",
    "nrt": "np.empty(L, float32) in the kernel: numba-cuda NRT, CUDA's device malloc heap",
}


class Skip(Exception):
    """This mode cannot run here; the message says why."""


class CheckError(AssertionError):
    """A mode's output differs from NumPy's."""


# -- the kernels ------------------------------------------------------------------------


@cuda.jit(device=True)
def weighted_median(signal, i, n, scratch):
    """The weighted median position of the window ``signal[i : i + n]`` (n >= 1,
    weights > 0), with `scratch` (n float32 at least) for the window's running
    sum: the first k whose running sum reaches half the total, plus the
    fraction of the total the running sum holds there, in (0, 1]."""
    total = np.float32(0)
    for k in range(n):
        total += signal[i + k]
        scratch[k] = total
    half = total * np.float32(0.5)
    lo = 0
    hi = n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if scratch[mid] < half:
            lo = mid + 1
        else:
            hi = mid
    return np.float32(lo) + scratch[lo] / total


@devalloc.kernel
def median_arena(arena, signal, lengths, out):
    """devalloc: each thread's scratch from the arena, as long as it needs."""
    i = cuda.grid(1)
    n = 0
    if i < out.size:
        n = lengths[i]
    scratch = arena.alloc(n, np.float32)
    # A short array: the arena was full. The frame's end reports it and
    # arena.run grows the arena and runs the launch again.
    if n > 0 and scratch.size == n:
        out[i] = weighted_median(signal, i, n, scratch)


@cuda.jit
def median_at(signal, lengths, offsets, stride, scratch, out):
    """The baselines: each thread's scratch at ``scratch[offsets[i]:]`` (malloc,
    malloc-async: packed, offsets from the host) or, with ``stride`` > 0, at
    ``scratch[i * stride:]`` (static-worst)."""
    i = cuda.grid(1)
    if i < out.size:
        n = lengths[i]
        at = offsets[i] if stride == 0 else i * stride
        out[i] = weighted_median(signal, i, n, scratch[at : at + n])


@cuda.jit
def median_nrt(signal, lengths, out):
    """NRT: ``np.empty`` in the kernel (compiles only with NUMBA_CUDA_ENABLE_NRT=1)."""
    i = cuda.grid(1)
    if i < out.size:
        n = lengths[i]
        out[i] = weighted_median(signal, i, n, np.empty(n, np.float32))


@cuda.jit
def poison(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = np.nan


if not SIMULATOR:  # what the PTX checks compile each kernel for (tests/test_scratch.py)
    from numba import types

    _f1, _i1 = types.float32[::1], types.int32[::1]
    PTX_SIGNATURES = {
        "median_arena": (_f1, _i1, _f1),
        "median_at": (_f1, _i1, types.int64[::1], types.int64, _f1, _f1),
        "poison": (_f1,),
    }
    # median_nrt needs NRT switched on before Numba is imported: its own process.
    NRT_SIGNATURE = (_f1, _i1, _f1)


# -- the problem and its answer ---------------------------------------------------------


def draw_lengths(rng, threads, shortest, longest):
    """`threads` lengths in [shortest, longest], skewed to the short end, one at `longest`."""
    u = rng.random(threads)
    lengths = np.floor(shortest * (longest / shortest) ** (u * u))
    lengths = np.clip(lengths, shortest, longest).astype(np.int32)
    lengths[rng.integers(threads)] = longest
    return lengths


def make_problem(threads, shortest, longest, sets, seed=7):
    """(signal, [lengths per draw]): the counts signal and `sets` draws of lengths."""
    rng = np.random.default_rng(seed)
    signal = rng.integers(*COUNTS, threads + longest).astype(np.float32)
    return signal, [draw_lengths(rng, threads, shortest, longest) for _ in range(sets)]


def reference(signal, lengths):
    """What every mode must write, from NumPy (exact: every sum is an integer below 2**24)."""
    prefix = np.concatenate([[0], np.cumsum(signal.astype(np.int64))])
    i = np.arange(len(lengths))
    base = prefix[i]
    total = prefix[i + lengths.astype(np.int64)] - base
    # The first j with prefix[j] - base >= total / 2 (prefix strictly rises: counts >= 1).
    j = np.searchsorted(prefix, base + total / 2, side="left")
    running = prefix[j] - base
    return (j - i - 1).astype(np.float32) + running.astype(np.float32) / total.astype(np.float32)


def check(out, expected, mode):
    """Raise CheckError if `out` is not NumPy's `expected` (NaN, the poison, never is)."""
    out = np.asarray(out)
    if out.shape != expected.shape:
        raise CheckError(f"{mode}: output of shape {out.shape}, expected {expected.shape}")
    wrong = ~np.isclose(out, expected, rtol=1e-6, atol=1e-6)
    if wrong.any():
        first = int(np.flatnonzero(wrong)[0])
        raise CheckError(
            f"{mode}: {int(wrong.sum())} of {out.size} threads differ from NumPy's answer "
            f"(thread {first}: {out[first]!r}, expected {expected[first]!r})"
        )


def needed_bytes(lengths_sets):
    """The scratch the largest draw asks for, exactly: 4 bytes times the sum of L."""
    return max(int(lengths.sum(dtype=np.int64)) * 4 for lengths in lengths_sets)


def nrt_heap_bytes(lengths_sets, mib=None):
    if mib is not None:
        return mib << 20
    per_thread = max(
        int(((4 * lengths.astype(np.int64) + 15) // 16 * 16 + 128).sum())
        for lengths in lengths_sets
    )
    return max(64 << 20, -(-4 * per_thread // (1 << 20)) << 20)


# -- timing ----------------------------------------------------------------------------


def grid(threads):
    return -(-threads // BLOCK), min(threads, BLOCK)


def progress(count, desc):
    try:
        from tqdm import tqdm
    except ImportError:
        return range(count)
    return tqdm(range(count), desc=desc, leave=False, disable=None)  # None: off when not a tty


def percentiles(values):
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    return {"median": float(median), "p10": float(p10), "p90": float(p90)}


def time_launches(launch, out, first, count, desc, parts=None):
    """Host microseconds (and, on a GPU, device microseconds between CUDA events)
    of launches ``first .. first + count - 1``. ``launch(j, stop)`` does launch
    j's work, records `stop` after its kernel and returns once the GPU is done.
    `out` is poisoned before each, untimed."""
    blocks, block = grid(out.size)
    host, device = [], []
    for j in progress(count, desc):
        poison[blocks, block](out)
        cuda.synchronize()
        start = stop = None
        if not SIMULATOR:
            start, stop = cuda.event(), cuda.event()
        began = time.perf_counter()
        if start is not None:
            start.record()
        launch(first + j, stop)
        host.append((time.perf_counter() - began) * 1e6)
        if stop is not None:
            device.append(cuda.event_elapsed_time(start, stop) * 1e3)
    row = {"host_us": percentiles(host), "host_us_mean": float(np.mean(host))}
    if device:
        row["device_us"] = percentiles(device)
    if parts:
        row["parts_us"] = {name: percentiles(times) for name, times in parts.items()}
    return row


# -- the modes: each returns (row, output of its last launch, the draw that launch used) --


class Setup:
    """What every mode shares: the inputs on the device, the output, the sizes."""

    def __init__(self, args):
        self.args = args
        self.signal_host, self.lengths_host = make_problem(
            args.threads, args.min_length, args.max_length, args.sets, args.seed
        )
        self.signal = cuda.to_device(self.signal_host)
        self.lengths = [cuda.to_device(lengths) for lengths in self.lengths_host]
        self.out = cuda.device_array(args.threads, np.float32)
        self.grid = grid(args.threads)

    def lengths_of(self, j):
        return self.lengths[j % len(self.lengths)]

    def run(self, mode, launch, untimed=0, parts=None):
        """Warm-up launches, then the timed ones; the output of the last."""
        warmup, launches = self.args.warmup, self.args.launches
        for j in range(untimed, untimed + warmup):
            launch(j, None)
        if parts:
            for times in parts.values():
                times.clear()
        first = untimed + warmup
        row = time_launches(launch, self.out, first, launches, mode, parts)
        last = first + launches - 1
        return row, self.out.copy_to_host(), last % len(self.lengths)


def run_devalloc(setup, strategy):
    arena = devalloc.Arena(1 << 20, strategy=strategy)
    try:

        def launch(j, stop):
            def frame():
                median_arena[setup.grid](arena, setup.signal, setup.lengths_of(j), setup.out)
                if stop is not None:
                    stop.record()

            arena.run(frame)  # waits for the launch; an overflow grows the arena, runs again

        sizing = arena.sizing.measure
        for j in range(sizing):  # untimed: the arena finds its size
            launch(j, None)
        before = arena.stats()
        row, out, used = setup.run(f"devalloc-{strategy}", launch, untimed=sizing)
        stats = arena.stats()
        row.update(
            held_bytes=arena.capacity,
            peak_used_bytes=stats.peak_bytes,
            align=arena.align,
            resizes_while_timed=stats.device_mallocs - before.device_mallocs,
            device_mallocs=stats.device_mallocs,
        )
        return row, out, used
    finally:
        arena.close()


def host_offsets(setup):
    """The baselines' per-launch host work: L to the host, the exclusive prefix sum
    of L back to the device (into arrays made once). Returns the sum of L."""
    threads = setup.args.threads
    lengths = np.empty(threads, np.int32)
    offsets = np.zeros(threads, np.int64)
    d_offsets = cuda.to_device(offsets)

    def prepare(d_lengths):
        d_lengths.copy_to_host(lengths)
        np.cumsum(lengths[:-1], dtype=np.int64, out=offsets[1:])
        d_offsets.copy_to_device(offsets)
        return int(offsets[-1]) + int(lengths[-1])

    return prepare, d_offsets


class CaiBuffer:
    """A cuda.core Buffer of `n` float32 seen by Numba (CUDA Array Interface, no stream:
    the allocation is ordered on the legacy default stream, where Numba launches)."""

    def __init__(self, buffer, n):
        self.buffer = buffer
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "strides": None,
            "typestr": "<f4",
            "data": (int(buffer.handle), False),
            "version": 3,
        }


def cuda_core_allocator():
    """(allocate(n) -> (buffer, Numba array of n float32), free(buffer), details): cuda.core."""
    if SIMULATOR:
        raise Skip("Numba's CUDA simulator has no cudaMallocAsync (cuda.core needs a GPU)")
    try:
        import cuda.core as core
    except ImportError as error:
        raise Skip(f"cuda.core is not installed ({error})") from None
    if not hasattr(core, "Device"):
        raise Skip(f"cuda.core {getattr(core, '__version__', '?')} has no Device at the top")
    device = core.Device()
    device.set_current()
    stream = device.default_stream  # the legacy default stream: Numba's stream 0
    details = {"cuda_core": getattr(core, "__version__", None)}
    try:
        details["pool_release_threshold"] = int(device.memory_resource.attributes.release_threshold)
    except Exception as error:  # context for the figures, not a result
        details["pool_release_threshold"] = f"unknown ({type(error).__name__})"

    def allocate(n):
        buffer = device.allocate(4 * n, stream=stream)
        return buffer, cuda.as_cuda_array(CaiBuffer(buffer, n))

    def free(buffer):
        buffer.close(stream)  # stream-ordered: after the kernel

    return allocate, free, details


def run_malloc(setup, mode):
    details = {}
    if mode == "malloc-async":
        allocate, free, details = cuda_core_allocator()
    else:

        def allocate(n):
            return None, cuda.device_array(n, np.float32)

        def free(buffer):
            pass  # Numba frees the array when it is dropped (in batches)

    prepare, d_offsets = host_offsets(setup)
    parts = {"offsets": [], "allocate": [], "kernel": []}
    held = [0]

    def launch(j, stop):
        began = time.perf_counter()
        d_lengths = setup.lengths_of(j)
        total = prepare(d_lengths)
        offsets_done = time.perf_counter()
        buffer, scratch = allocate(total)
        allocated = time.perf_counter()
        median_at[setup.grid](setup.signal, d_lengths, d_offsets, 0, scratch, setup.out)
        free(buffer)
        if stop is not None:
            stop.record()
        cuda.synchronize()
        parts["offsets"].append((offsets_done - began) * 1e6)
        parts["allocate"].append((allocated - offsets_done) * 1e6)
        parts["kernel"].append((time.perf_counter() - allocated) * 1e6)
        held[0] = max(held[0], 4 * total)

    row, out, used = setup.run(mode, launch, parts=parts)
    row.update(held_bytes=held[0], **details)
    return row, out, used


def run_static(setup):
    stride = setup.args.max_length
    scratch = cuda.device_array(setup.args.threads * stride, np.float32)  # once: the worst case
    no_offsets = cuda.device_array(1, np.int64)

    def launch(j, stop):
        median_at[setup.grid](
            setup.signal, setup.lengths_of(j), no_offsets, stride, scratch, setup.out
        )
        if stop is not None:
            stop.record()
        cuda.synchronize()

    row, out, used = setup.run("static-worst", launch)
    row.update(held_bytes=scratch.nbytes)
    return row, out, used


def run_nrt_here(setup):
    """The nrt mode in this process (NUMBA_CUDA_ENABLE_NRT=1 set before Numba came)."""
    heap = nrt_heap_bytes(setup.lengths_host, setup.args.nrt_heap_mib)
    details = {}
    if SIMULATOR:
        details["note"] = "simulator: np.empty is NumPy's here, not the device malloc heap"
    else:
        from cuda.bindings import driver

        cuda.current_context()  # the primary context, current, before its limit is set
        (err,) = driver.cuCtxSetLimit(driver.CUlimit.CU_LIMIT_MALLOC_HEAP_SIZE, heap)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuCtxSetLimit(MALLOC_HEAP_SIZE, {heap}): {err}")

    def launch(j, stop):
        median_nrt[setup.grid](setup.signal, setup.lengths_of(j), setup.out)
        if stop is not None:
            stop.record()
        cuda.synchronize()

    row, out, used = setup.run("nrt", launch)
    row.update(held_bytes=heap, **details)
    return row, out, used


def run_nrt(setup):
    """The nrt mode in a child process: this script with --child, NRT switched on."""
    args = setup.args
    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "nrt-out.npy"
        command = [sys.executable, __file__, "--child", "nrt", "--child-out", str(saved)]
        command += parameter_args(args)
        env = dict(os.environ, NUMBA_CUDA_ENABLE_NRT="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=args.timeout
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the NRT process took more than {args.timeout} s") from None
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines or not saved.exists():
            tail = done.stderr.strip().splitlines()[-3:] or ["no output"]
            raise RuntimeError(f"the NRT process exited {done.returncode}: " + " | ".join(tail))
        row = json.loads(lines[-1])
        used = row.pop("draw")
        return row, np.load(saved), used


def run_mode(mode, setup):
    """(row, output of the last launch, index of the draw it used) for one mode."""
    if mode.startswith("devalloc-"):
        return run_devalloc(setup, mode[len("devalloc-") :])
    if mode in ("malloc", "malloc-async"):
        return run_malloc(setup, mode)
    if mode == "static-worst":
        return run_static(setup)
    if mode == "nrt":
        return run_nrt(setup)
    raise ValueError(f"mode must be one of {list(MODES)} (got {mode!r})")


def release_memory():
    """Free now what Numba queued for freeing (between modes: none sees another's)."""
    if not SIMULATOR:
        cuda.current_context().deallocations.clear()


def measure_mode(mode, setup):
    """One mode's results row, its output checked against NumPy's."""
    row = {"mode": mode, "what": MODES[mode]}
    try:
        result, out, used = run_mode(mode, setup)
    except Skip as why:
        return {**row, "skipped": str(why)}
    except Exception as error:  # a baseline failing is a result; the row says how
        return {**row, "error": f"{type(error).__name__}: {error}"}
    finally:
        release_memory()
    row.update(result)
    row["launches"] = setup.args.launches
    try:
        check(out, reference(setup.signal_host, setup.lengths_host[used]), mode)
        row["check"] = "ok"
    except CheckError as error:
        row["check"] = str(error)
    return row


# -- reporting --------------------------------------------------------------------------


def environment(argv):
    return world.environment(command=shlex.join(["python", "benchmarks/scratch.py", *argv]))


def length_summary(lengths_sets):
    every = np.concatenate(lengths_sets)
    return {
        "min": int(every.min()),
        "median": float(np.median(every)),
        "mean": float(every.mean()),
        "p99": float(np.percentile(every, 99)),
        "max": int(every.max()),
    }


def size(nbytes):
    """`nbytes` for people: B, KiB, MiB or GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"


def print_table(data):
    print(f"\n{'mode':19} {'median us':>10} {'p10':>9} {'p90':>9} {'GPU us':>9} "
          f"{'held':>10}  check")  # fmt: skip
    for r in data["results"]:
        if "host_us" not in r:
            print(f"{r['mode']:19} {'skipped' if 'skipped' in r else 'ERROR':>10}  "
                  f"{r.get('skipped') or r.get('error')}")  # fmt: skip
            continue
        t = r["host_us"]
        gpu = f"{r['device_us']['median']:9.1f}" if "device_us" in r else f"{'-':>9}"
        print(f"{r['mode']:19} {t['median']:10.1f} {t['p10']:9.1f} {t['p90']:9.1f} {gpu} "
              f"{size(r['held_bytes']):>10}  {r['check']}")  # fmt: skip
    print(f"(host us: wall time per launch; GPU us: between CUDA events around its work; "
          f"held: scratch reserved while it runs; the largest draw needs "
          f"{size(data['needed_bytes'])})")  # fmt: skip
    for r in data["results"]:
        if "parts_us" in r:
            parts = ", ".join(f"{name} {p['median']:.1f}" for name, p in r["parts_us"].items())
            print(f"{r['mode']}: median us of its parts: {parts}")


def plot(data, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    rows = [r for r in data["results"] if "host_us" in r]
    if not rows:
        return None
    from plot import spread_barh

    notes = []
    for r in rows:
        note = f"{r['host_us']['median']:.1f} us, holds {size(r['held_bytes'])}"
        notes.append(note if r["check"] == "ok" else note + " (WRONG OUTPUT)")
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.8))
    spread_barh(
        ax, [r["mode"] for r in rows], [r["host_us"]["p10"] for r in rows],
        [r["host_us"]["median"] for r in rows], [r["host_us"]["p90"] for r in rows],
        [r["mode"].startswith("devalloc") for r in rows], notes, room=8,
    )  # fmt: skip
    ax.set_xlabel("wall time per launch, us (median; bars: 10th-90th percentile)")
    env, p, lengths = data["environment"], data["parameters"], data["lengths"]
    ax.set_title(
        f"per-launch scratch: {p['threads']} threads, L_i float32 of {lengths['min']}-"
        f"{lengths['max']} (mean {lengths['mean']:.0f}); the largest draw needs "
        f"{size(data['needed_bytes'])}\n{env['gpu']}, {env['date']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# -- the command line -------------------------------------------------------------------

PARAMETERS = ("threads", "min_length", "max_length", "launches", "warmup", "sets", "seed")


def parameter_args(args):
    """`args`' parameters as command-line options (for the NRT process)."""
    options = []
    for name in PARAMETERS:
        options += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if args.nrt_heap_mib is not None:
        options += ["--nrt-heap-mib", str(args.nrt_heap_mib)]
    return options


def parse(argv):
    gpu = not SIMULATOR
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1 << 18 if gpu else 64,
                        help="threads per launch, one scratch array each")  # fmt: skip
    parser.add_argument("--min-length", type=int, default=8, help="shortest scratch, float32")
    parser.add_argument("--max-length", type=int, default=512 if gpu else 48,
                        help="longest scratch, float32 (static-worst's per thread)")  # fmt: skip
    parser.add_argument("--launches", type=int, default=200 if gpu else 3, help="timed, per mode")
    parser.add_argument("--warmup", type=int, default=20 if gpu else 1, help="untimed, per mode")
    parser.add_argument("--sets", type=int, default=4, help="draws of lengths, taken in turn")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--out", type=Path, help="results JSON (default: benchmarks/results/)")
    parser.add_argument("--nrt-heap-mib", type=int, help="NRT's device malloc heap (default: auto)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for the NRT process")
    parser.add_argument("--child", choices=["nrt"], help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1 (got {args.threads})")
    if args.min_length < 1:
        parser.error(f"--min-length must be at least 1 (got {args.min_length})")
    if not args.min_length <= args.max_length <= MAX_LENGTH:
        parser.error(f"--max-length must be from --min-length ({args.min_length}) to "
                     f"{MAX_LENGTH} (got {args.max_length})")  # fmt: skip
    if args.launches < 1 or args.warmup < 0 or args.sets < 1:
        parser.error(f"--launches and --sets must be at least 1 and --warmup at least 0 (got "
                     f"{args.launches}, {args.sets}, {args.warmup})")  # fmt: skip
    if args.nrt_heap_mib is not None and args.nrt_heap_mib < 1:
        parser.error(f"--nrt-heap-mib must be at least 1 (got {args.nrt_heap_mib})")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    setup = Setup(args)
    if args.child:  # the NRT process: one row and the last output, for the parent
        row, out, used = run_nrt_here(setup)
        np.save(args.child_out, out)
        print(json.dumps({**row, "draw": used}))
        return 0

    where = "the GPU" if not SIMULATOR else "Numba's CUDA simulator (no GPU): tiny sizes"
    lengths = length_summary(setup.lengths_host)
    print(f"per-launch scratch on {where}: {args.threads} threads, L of {lengths['min']}-"
          f"{lengths['max']} float32 (median {lengths['median']:.0f}, mean "
          f"{lengths['mean']:.1f}); {args.launches} launches after {args.warmup}")  # fmt: skip
    results = []
    for mode in args.modes:
        print(f"{mode} ...", flush=True)
        results.append(measure_mode(mode, setup))
    data = {
        "environment": environment(argv),
        "parameters": {name: getattr(args, name) for name in PARAMETERS},
        "lengths": lengths,
        "needed_bytes": needed_bytes(setup.lengths_host),
        "fields": FIELDS,
        "results": results,
    }
    data["parameters"]["nrt_heap_bytes"] = nrt_heap_bytes(setup.lengths_host, args.nrt_heap_mib)
    out = args.out or RESULTS / f"scratch-{data['environment']['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    print_table(data)
    print(f"\nresults: {out}")
    picture = plot(data, out.with_suffix(".png"))
    if picture:
        print(f"plot: {picture}")
    failed = [r["mode"] for r in results if "error" in r or r.get("check", "ok") != "ok"]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("every mode that ran matches NumPy's answer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
