"""Host time to allocate and free device memory, library by library: a 1080p
frame's temporaries, or one buffer of each size from 4 KiB to 1 GiB.

    python benchmarks/host_pools.py --frames 1000 --out benchmarks/results/h200-host-pools.json
    python benchmarks/host_pools.py --rows numba-default devalloc-pool --frames 200
    python benchmarks/host_pools.py --workload sizes --sizes 4KiB 1MiB 16MiB 100MiB 1GiB

Two workloads (``--workload``), each timed one unit at a time:

* ``frame`` (the default): the 13 temporaries of a 1080p image pipeline
  (`FRAME`, 58.2 MB) are allocated, then all dropped.
* ``sizes``: one buffer of ``--sizes`` bytes is allocated and dropped, for
  each size in turn: allocate + free against size.

What is measured is the host's time for that (``perf_counter_ns`` around each
unit) and nothing else: no kernel runs (except in the ``devalloc-kernel`` row,
whose unit is one launch of a kernel that allocates on the GPU: its figure is
that launch's host time), and the device is synchronized between units,
outside the timing, so no row builds up a queue. After ``--warmup`` untimed
units, ``--frames`` units are timed (for each size); ``--budget`` stops a
size's timed units early once that many seconds have passed (never before
`MIN_REPS`; by default 5 s for sizes, no limit for the frame), and the JSON
gives how many were timed (``reps``). The table gives the median and the 10th
and 90th percentiles per unit.

Each row runs in a process of its own: Numba's memory manager is chosen once
per process, and no library's pool should see another's. A row whose library
or API is missing here is skipped with the reason. Writes the results (with
the GPU, the versions and the date) as JSON to ``--out`` (by default
``benchmarks/results/host-pools-DATE.json``, or ``host-sizes-DATE.json`` for
sizes) and, with matplotlib, a chart beside it (same name, ``.png``): bars for
the frame, one line per row against size for sizes.
"""

import argparse
import dataclasses
import importlib.metadata
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
H, W = 1080, 1920
TILES = (H // 16) * (W // 16)
# (name, shape, dtype): 4 float planes, 6 byte planes, 2 RGB images, a tile table.
FRAME = [
    *[(name, (H, W), np.float32) for name in ("gray", "blur_x", "blur", "magnitude")],
    *[
        (name, (H, W), np.uint8)
        for name in ("direction", "strength", "edges", "edges_next", "mask", "labels")
    ],
    ("rgb", (H, W, 3), np.uint8),
    ("overlay", (H, W, 3), np.uint8),
    ("tile_table", (TILES, 2), np.int64),
]
FRAME_BYTES = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for _, shape, dtype in FRAME)
BASELINE = "numba-default"
SIZES = ["4KiB", "1MiB", "16MiB", "100MiB", "1GiB"]  # the sizes workload's default
BUDGET_S = 5.0  # the sizes workload's default --budget, seconds of timed units per size
MIN_REPS = 20  # --budget never stops a size before this many timed units


def nbytes(shape, dtype):
    return int(np.prod(shape)) * np.dtype(dtype).itemsize


def workload_units(workload, sizes):
    """What a row times, in turn: units, each a list of (shape, dtype) that are
    allocated together and then dropped together."""
    if workload == "frame":
        return [[(shape, dtype) for _, shape, dtype in FRAME]]
    return [[((size,), np.uint8)] for size in sizes]


BYTE_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
BYTE_UNITS.update({"kb": 10**3, "mb": 10**6, "gb": 10**9})


def parse_size(text):
    """'4KiB' -> 4096: a positive whole number of bytes, with an optional unit."""
    match = re.fullmatch(r"(\d+)\s*([a-z]*)", text.strip(), re.IGNORECASE)
    unit = BYTE_UNITS.get(match[2].lower()) if match else None
    if unit is None or int(match[1]) == 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive size such as 4096, 4KiB, 16MiB or 1GiB (got {text!r})"
        )
    return int(match[1]) * unit


def size_label(size):
    """4096 -> '4KiB' (what parse_size reads back)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size}B"


class Skip(Exception):
    """This row cannot run here; the message says why."""


def need(module):
    """Import `module`, or skip the row naming it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise Skip(f"{module} is not installed ({error})") from None


def need_api(module, path):
    """`module`'s attribute at the dotted `path`, or skip the row naming what is missing."""
    found = module
    for name in path.split("."):
        found = getattr(found, name, None)
        if found is None:
            version = getattr(module, "__version__", "?")
            raise Skip(f"{module.__name__} {version} has no {path}")
    return found


def need_gpu():
    """Skip the rows that call CUDA directly (they have no simulator) on the simulator."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise Skip("no GPU (the simulator was chosen)")


def arena_bytes(units):
    """An arena for the workload's largest unit, with room for alignment and
    slabs (and never less than the 256 MiB the frame always had)."""
    largest = max(sum(nbytes(shape, dtype) for shape, dtype in unit) for unit in units)
    return max(256 << 20, largest + largest // 4 + (16 << 20))


# -- the rows --------------------------------------------------------------------------
# Each takes the workload's units and returns (prepare, synchronize, details):
# prepare(unit) gives the function that allocates one unit and drops it, the one
# that is timed; details() gives what the JSON keeps of the row's state at the end.


def dropped(allocate):
    """prepare() for arrays that free themselves when dropped: allocate(shape, dtype)."""

    def prepare(unit):
        def allocate_and_drop():
            arrays = [allocate(shape, dtype) for shape, dtype in unit]
            del arrays

        return allocate_and_drop

    return prepare


def numba_arrays(expect_pool):
    cuda = need("numba.cuda")
    details = dict
    if expect_pool:
        from devalloc.backend import SIMULATOR

        if SIMULATOR:
            raise Skip("Numba's CUDA simulator has no memory managers")
        pool_numba = need("devalloc.allocators.numba")
        pool_numba.stats()  # MemoryManagerError if NUMBA_CUDA_MEMORY_MANAGER did not take

        def details():
            return {"pool": dataclasses.asdict(pool_numba.stats())}

    return dropped(cuda.device_array), cuda.synchronize, details


def row_numba_default(units):
    return numba_arrays(expect_pool=False)


def row_devalloc_pool(units):
    return numba_arrays(expect_pool=True)


def cupy_arrays(allocator):
    cupy = need("cupy")
    if not cupy.cuda.is_available():
        raise Skip("CuPy finds no GPU")
    cupy.cuda.set_allocator(allocator(cupy))
    return dropped(cupy.empty), cupy.cuda.Device().synchronize, dict


def row_numba_floor(units):
    """Numba's device arrays with a memory manager that makes no CUDA call: each
    array is a view of one block allocated at the start. What is left is Numba's
    own cost of making and dropping a device array: the least any memory
    manager plugged into Numba can cost."""
    cuda = need("numba.cuda")
    need_gpu()
    from devalloc.numba_compat import HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer

    largest = max(sum(nbytes(shape, dtype) for shape, dtype in unit) for unit in units)

    class FloorManager(HostOnlyCUDAMemoryManager):
        block = None

        def initialize(self):
            if FloorManager.block is None:
                from devalloc.cuda_graphs import cu, driver_call

                FloorManager.block = driver_call(cu.cuMemAlloc(largest), "cuMemAlloc")

        def memalloc(self, size):
            return MemoryPointer(self.context, FloorManager.block, size)

        def get_memory_info(self):
            return MemoryInfo(free=0, total=0)

        def get_ipc_handle(self, memory):
            raise NotImplementedError

        @property
        def interface_version(self):
            return 1

    cuda.set_memory_manager(FloorManager)  # (this row's process has not used CUDA yet)
    return dropped(cuda.device_array), cuda.synchronize, dict


def row_cupy_no_pool(units):
    return cupy_arrays(lambda cupy: None)


def row_cupy_pool(units):
    return cupy_arrays(lambda cupy: cupy.cuda.MemoryPool().malloc)


def row_cupy_async_pool(units):
    return cupy_arrays(lambda cupy: cupy.cuda.MemoryAsyncPool().malloc)


def row_torch(units):
    torch = need("torch")
    if not torch.cuda.is_available():
        raise Skip("PyTorch finds no GPU")
    empty = torch.empty

    def prepare(unit):
        specs = [(shape, getattr(torch, np.dtype(dtype).name)) for shape, dtype in unit]

        def allocate_and_drop():
            arrays = [empty(shape, dtype=dtype, device="cuda") for shape, dtype in specs]
            del arrays

        return allocate_and_drop

    return prepare, torch.cuda.synchronize, dict


def current_device():
    """cuda.core's Device 0, made current (its primary context)."""
    core = need("cuda.core")
    device = need_api(core, "Device")()
    device.set_current()
    return device


def row_cuda_malloc(units):
    need_gpu()
    device = current_device()
    driver = need("cuda.bindings.driver")
    allocate, free = driver.cuMemAlloc, driver.cuMemFree

    def prepare(unit):
        sizes = [nbytes(shape, dtype) for shape, dtype in unit]

        def allocate_and_free():
            allocated = [allocate(size) for size in sizes]
            for error, pointer in allocated:
                if error:
                    raise RuntimeError(f"cuMemAlloc: {error!r}")
                (error,) = free(pointer)
                if error:
                    raise RuntimeError(f"cuMemFree: {error!r}")

        return allocate_and_free

    return prepare, device.sync, dict


def row_cuda_core(units):
    need_gpu()
    device = current_device()
    stream = device.default_stream
    allocate = device.allocate

    def prepare(unit):
        sizes = [nbytes(shape, dtype) for shape, dtype in unit]

        def allocate_and_close():
            buffers = [allocate(size, stream=stream) for size in sizes]
            for buffer in buffers:
                buffer.close(stream)

        return allocate_and_close

    return prepare, device.sync, dict


def row_rmm_pool(units):
    need_gpu()
    rmm = need("rmm")
    pool_type = need_api(rmm, "mr.PoolMemoryResource")
    upstream = need_api(rmm, "mr.CudaMemoryResource")
    set_current = need_api(rmm, "mr.set_current_device_resource")
    device_buffer = need_api(rmm, "DeviceBuffer")
    runtime = need("cuda.bindings.runtime")
    # Big enough that no unit grows it (2 GiB for the 1 GiB size); a multiple of 1 MiB.
    largest = max(sum(nbytes(shape, dtype) for shape, dtype in unit) for unit in units)
    pool_bytes = max(2 << 30, -(-2 * largest // (1 << 20)) << 20)
    pool = pool_type(upstream(), initial_pool_size=pool_bytes)
    set_current(pool)

    def prepare(unit):
        sizes = [nbytes(shape, dtype) for shape, dtype in unit]

        def allocate_and_drop():
            buffers = [device_buffer(size=size) for size in sizes]
            del buffers

        return allocate_and_drop

    def synchronize():
        (error,) = runtime.cudaDeviceSynchronize()
        if error:
            raise RuntimeError(f"cudaDeviceSynchronize: {error!r}")

    def details():  # (the pool's size at the end: more than pool_bytes if it grew)
        size = getattr(pool, "pool_size", None)
        return {"pool_bytes": pool_bytes, "pool_size_at_end": size() if size else None}

    return prepare, synchronize, details


def devalloc_arena(units):
    devalloc = need("devalloc")
    if not hasattr(devalloc.Arena, "empty"):
        raise Skip("this devalloc has no Arena.empty")
    arena = devalloc.Arena(arena_bytes(units))
    return devalloc, arena, lambda: {"arena": dataclasses.asdict(arena.stats())}


def row_devalloc_frame(units):
    cuda = need("numba.cuda")
    _, arena, details = devalloc_arena(units)

    def prepare(unit):
        def allocate_and_drop():  # (check=False: the exit need not wait for the GPU, no kernel)
            with arena.frame(check=False):
                arrays = [arena.empty(shape, dtype) for shape, dtype in unit]
                del arrays

        return allocate_and_drop

    return prepare, cuda.synchronize, details


def row_devalloc_kernel(units):
    cuda = need("numba.cuda")
    devalloc, arena, details = devalloc_arena(units)

    @devalloc.kernel
    def allocate_each(arena, sizes):  # launched with one thread
        for i in range(sizes.size):
            buffer = arena.alloc(sizes[i], np.uint8)
            if buffer.size > 0:  # (empty: out of space, which details() reports)
                buffer[0] = 1

    def prepare(unit):
        sizes = cuda.to_device(np.array([nbytes(*spec) for spec in unit], np.int64))

        def launch():  # the frame's exit frees what the kernel allocated
            with arena.frame(check=False):
                allocate_each[1, 1](arena, sizes)

        return launch

    return prepare, cuda.synchronize, details


ROWS = {
    "cuda-malloc": ("cuMemAlloc / cuMemFree through cuda.bindings (cudaMalloc)", row_cuda_malloc),
    "numba-default": ("Numba's default manager: cudaMalloc, batched cudaFree", row_numba_default),
    "devalloc-pool": ("Numba with devalloc.allocators.numba (cudaMallocAsync)", row_devalloc_pool),
    "numba-floor": (
        "Numba's device_array over memory allocated once (no CUDA call): the least "
        "a Numba memory manager can cost",
        row_numba_floor,
    ),
    "cupy-no-pool": ("CuPy without a pool: cudaMalloc/cudaFree", row_cupy_no_pool),
    "cupy-pool": ("CuPy MemoryPool", row_cupy_pool),
    "cupy-async-pool": ("CuPy MemoryAsyncPool (cudaMallocAsync)", row_cupy_async_pool),
    "torch": ("PyTorch caching allocator", row_torch),
    "rmm-pool": ("RMM PoolMemoryResource over cudaMalloc: rmm.DeviceBuffer", row_rmm_pool),
    "cuda-core": ("cuda.core Device.allocate / Buffer.close (cudaMallocAsync)", row_cuda_core),
    "devalloc-frame": ("devalloc frame arrays: Arena.empty in arena.frame()", row_devalloc_frame),
    "devalloc-kernel": (
        "devalloc in-kernel arena.alloc, one thread: the launch's host time "
        "(the allocation itself happens on the GPU)",
        row_devalloc_kernel,
    ),
}
ENV = {"devalloc-pool": {"NUMBA_CUDA_MEMORY_MANAGER": "devalloc.allocators.numba"}}


# -- one row, in this process -----------------------------------------------------------


def measure(unit, synchronize, frames, warmup, budget_s=None):
    """Host nanoseconds of each of `frames` units, after `warmup` untimed ones;
    fewer once `budget_s` seconds have passed (but never fewer than MIN_REPS)."""
    for _ in range(warmup):
        unit()
        synchronize()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    times = []
    for _ in range(frames):
        start = time.perf_counter_ns()
        unit()
        times.append(time.perf_counter_ns() - start)
        synchronize()
        if deadline is not None and len(times) >= MIN_REPS and time.monotonic() > deadline:
            break
    return times


def summary(times_ns):
    times_us = np.array(times_ns) / 1e3
    p10, median, p90 = np.percentile(times_us, [10, 50, 90])
    return {
        "median_us": float(median),
        "p10_us": float(p10),
        "p90_us": float(p90),
        "mean_us": float(times_us.mean()),
    }


def run_row(name, workload, sizes, frames, warmup, budget_s=None):
    units = workload_units(workload, sizes)
    try:
        prepare, synchronize, details = ROWS[name][1](units)
        times = [measure(prepare(unit), synchronize, frames, warmup, budget_s) for unit in units]
    except Skip as why:
        return {"row": name, "skipped": str(why)}
    if workload == "frame":
        return {"row": name, **summary(times[0]), "frames": len(times[0]), **details()}
    per_size = [
        {"bytes": size, **summary(timed), "reps": len(timed)} for size, timed in zip(sizes, times)
    ]
    return {"row": name, "sizes": per_size, **details()}


# -- the parent: every row in a child process ------------------------------------------


def run_child(name, args):
    env = dict(os.environ)
    env.pop("NUMBA_CUDA_MEMORY_MANAGER", None)  # each row chooses its own
    env.update(ENV.get(name, {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    command = [sys.executable, __file__, "--row", name]
    command += ["--frames", str(args.frames), "--warmup", str(args.warmup)]
    if args.workload == "sizes":
        command += ["--workload", "sizes", "--sizes", *map(str, args.sizes)]
    if args.budget is not None:
        command += ["--budget", str(args.budget)]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=args.timeout
        )
    except subprocess.TimeoutExpired:
        return {"row": name, "error": f"took more than {args.timeout} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = done.stderr.strip().splitlines()[-3:]
        return {"row": name, "error": f"exit {done.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])


def print_not_measured(r):
    print(f"{r['row']:16} {'skipped' if 'skipped' in r else 'ERROR':>10}  "
          f"{r.get('skipped') or r.get('error')}")  # fmt: skip


def print_table(results):
    measured = {r["row"]: r["median_us"] for r in results if "median_us" in r}
    base = measured.get(BASELINE)
    print(f"\n{'row':16} {'median us':>10} {'p10':>9} {'p90':>9} {'vs ' + BASELINE:>18}  what")
    for r in results:
        what = ROWS[r["row"]][0]
        if "median_us" not in r:
            print_not_measured(r)
            continue
        ratio = ""
        if base:
            less = base / r["median_us"]
            ratio = f"{less:.1f}x less" if less >= 1 else f"{1 / less:.1f}x more"
        print(f"{r['row']:16} {r['median_us']:10.1f} {r['p10_us']:9.1f} {r['p90_us']:9.1f} "
              f"{ratio:>18}  {what}")  # fmt: skip


def print_sizes_table(results, sizes, frames):
    print("\nhost us per allocate + free of one buffer (median; p10 and p90 in the JSON)")
    print(f"{'row':16}" + "".join(f"{size_label(size):>11}" for size in sizes))
    capped = False
    for r in results:
        if "sizes" not in r:
            print_not_measured(r)
            continue
        cells = []
        for cell in r["sizes"]:
            mark = "*" if cell["reps"] < frames else " "
            capped |= mark == "*"
            cells.append(f"{cell['median_us']:10.1f}{mark}")
        print(f"{r['row']:16}" + "".join(cells))
    if capped:
        print(f"* fewer than {frames} timed (--budget ran out): see 'reps' in the JSON")
    print("(devalloc-kernel: the host time of one launch; the allocation happens on the GPU)")


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    return plt


def plot(data, path):
    plt = pyplot()
    rows = [r for r in data["results"] if "median_us" in r]
    if plt is None or not rows:
        return
    from plot import spread_barh

    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    spread_barh(
        ax, [r["row"] for r in rows], [r["p10_us"] for r in rows],
        [r["median_us"] for r in rows], [r["p90_us"] for r in rows],
        [r["row"].startswith("devalloc") for r in rows],
        [f"{r['median_us']:.1f} us" for r in rows],
    )  # fmt: skip
    ax.set_xlabel("host time per frame, us (median; bars: 10th-90th percentile)")
    env = data["environment"]
    ax.set_title(
        f"13 temporaries of a 1080p frame ({FRAME_BYTES / 1e6:.1f} MB), allocated and "
        f"dropped\n{env['gpu']}, {env['cpu']}, {env['date'][:10]}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


def plot_sizes(data, path):
    plt = pyplot()
    rows = [r for r in data["results"] if "sizes" in r]
    if plt is None or not rows:
        return
    greens = itertools.cycle(["#1b7837", "#5aae61", "#00441b", "#a6dba0"])
    others = itertools.cycle(
        ["#4393c3", "#d6604d", "#762a83", "#e08214", "#878787", "#2166ac", "#b2182b", "#8c510a"]
    )
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for r in rows:
        cells = r["sizes"]
        medians = [c["median_us"] for c in cells]
        spread = [[c["median_us"] - c["p10_us"] for c in cells],
                  [c["p90_us"] - c["median_us"] for c in cells]]  # fmt: skip
        ours = r["row"].startswith("devalloc")
        label = r["row"] + (" (a launch)" if r["row"] == "devalloc-kernel" else "")
        ax.errorbar([c["bytes"] for c in cells], medians, yerr=spread, label=label,
                    color=next(greens if ours else others), marker="o" if ours else "s",
                    markersize=4, linewidth=2 if ours else 1.2, capsize=3)  # fmt: skip
    sizes = data["sizes"]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [size_label(size) for size in sizes])
    ax.minorticks_off()
    ax.grid(True, alpha=0.3)
    ax.set_xlabel("buffer size")
    ax.set_ylabel("host time per allocate + free, us\n(median; bars: 10th-90th percentile)")
    env = data["environment"]
    ax.set_title(
        f"One buffer allocated and freed, by size (devalloc-kernel: the host time of the "
        f"launch;\nthe allocation happens on the GPU). {env['gpu']}, {env['cpu']}, "
        f"{env['date'][:10]}",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workload", choices=["frame", "sizes"], default="frame",
        help="a 1080p frame's 13 arrays (the default), or one buffer of each --sizes size",
    )  # fmt: skip
    parser.add_argument(
        "--sizes", nargs="+", type=parse_size, metavar="SIZE",
        help=f"the sizes workload's buffers (default: {' '.join(SIZES)})",
    )  # fmt: skip
    parser.add_argument("--frames", type=int, default=1000, help="timed units per row and size")
    parser.add_argument("--warmup", type=int, default=50, help="untimed units first")
    parser.add_argument(
        "--budget", type=float,
        help=f"seconds of timed units per row and size, at most (never fewer than {MIN_REPS} "
        f"units; default: {BUDGET_S:g} for sizes, no limit for the frame)",
    )  # fmt: skip
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--out", type=Path, help="results file (default: benchmarks/results/)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per row")
    parser.add_argument("--row", choices=list(ROWS), help=argparse.SUPPRESS)  # the child's
    args = parser.parse_args()
    if args.frames < 1 or args.warmup < 0:
        parser.error(f"--frames must be >= 1 and --warmup >= 0 (got {args.frames}, {args.warmup})")
    if args.budget is not None and not args.budget > 0:
        parser.error(f"--budget must be a positive number of seconds (got {args.budget})")
    if args.workload == "frame" and args.sizes:
        parser.error("--sizes is for --workload sizes")
    if args.workload == "sizes":
        args.sizes = args.sizes or [parse_size(size) for size in SIZES]
        if args.budget is None:
            args.budget = BUDGET_S
    args.sizes = args.sizes or []
    if args.row:
        row = run_row(args.row, args.workload, args.sizes, args.frames, args.warmup, args.budget)
        print(json.dumps(row))
        return 0

    sys.path.insert(0, str(ROOT))
    from kernels.world import environment, simulate_without_gpu

    simulate_without_gpu()  # the children inherit the choice
    results = []
    for name in args.rows:
        print(f"{name} ...", flush=True)
        results.append(run_child(name, args))
    data = {"environment": environment(), "workload": args.workload}
    if args.workload == "frame":
        data["frame"] = [[name, list(shape), np.dtype(dtype).name] for name, shape, dtype in FRAME]
        data["frame_bytes"] = FRAME_BYTES
    else:
        data["sizes"] = args.sizes
        data["budget_s"] = args.budget
        data["min_reps"] = MIN_REPS
    data.update({"frames": args.frames, "warmup": args.warmup, "results": results})
    prefix = "host-pools" if args.workload == "frame" else "host-sizes"
    out = args.out or RESULTS / f"{prefix}-{data['environment']['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    if args.workload == "frame":
        print_table(results)
    else:
        print_sizes_table(results, args.sizes, args.frames)
    print(f"\nresults: {out}")
    (plot if args.workload == "frame" else plot_sizes)(data, out.with_suffix(".png"))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
