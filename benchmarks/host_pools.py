"""Host time to allocate and drop one 1080p frame's temporaries, library by library.

    python benchmarks/host_pools.py --frames 1000 --out benchmarks/results/h200-host-pools.json
    python benchmarks/host_pools.py --rows numba-default devalloc-pool --frames 200

One frame: the 13 temporaries of a 1080p image pipeline (`FRAME`, 58.2 MB) are
allocated, then all dropped. What is measured is the host's time for that
(``perf_counter_ns`` around each frame) and nothing else: no kernel runs, and
the device is synchronized between frames, outside the timing, so no row
builds up a queue. After ``--warmup`` untimed frames, ``--frames`` frames are
timed; the table gives the median and the 10th and 90th percentiles per frame.

Each row runs in a process of its own: Numba's memory manager is chosen once
per process, and no library's pool should see another's. A row whose library
or API is missing here is skipped with the reason. Writes the results (with
the GPU, the versions and the date) as JSON to ``--out`` and, with
matplotlib, a bar chart beside it (same name, ``.png``).
"""

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
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


class Skip(Exception):
    """This row cannot run here; the message says why."""


def need(module):
    """Import `module`, or skip the row naming it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise Skip(f"{module} is not installed ({error})") from None


# -- the rows: each returns (frame, synchronize, details) -----------------------------


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

    device_array = cuda.device_array

    def frame():
        arrays = [device_array(shape, dtype) for _, shape, dtype in FRAME]
        del arrays

    return frame, cuda.synchronize, details


def row_numba_default():
    return numba_arrays(expect_pool=False)


def row_devalloc_pool():
    return numba_arrays(expect_pool=True)


def cupy_arrays(allocator):
    cupy = need("cupy")
    if not cupy.cuda.is_available():
        raise Skip("CuPy finds no GPU")
    cupy.cuda.set_allocator(allocator(cupy))
    empty = cupy.empty

    def frame():
        arrays = [empty(shape, dtype) for _, shape, dtype in FRAME]
        del arrays

    return frame, cupy.cuda.Device().synchronize, dict


def row_cupy_no_pool():
    return cupy_arrays(lambda cupy: None)


def row_cupy_pool():
    return cupy_arrays(lambda cupy: cupy.cuda.MemoryPool().malloc)


def row_cupy_async_pool():
    return cupy_arrays(lambda cupy: cupy.cuda.MemoryAsyncPool().malloc)


def row_torch():
    torch = need("torch")
    if not torch.cuda.is_available():
        raise Skip("PyTorch finds no GPU")
    specs = [(shape, getattr(torch, np.dtype(dtype).name)) for _, shape, dtype in FRAME]
    empty = torch.empty

    def frame():
        arrays = [empty(shape, dtype=dtype, device="cuda") for shape, dtype in specs]
        del arrays

    return frame, torch.cuda.synchronize, dict


def row_cuda_core():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise Skip("no GPU (the simulator was chosen)")
    core = need("cuda.core")
    if not hasattr(core, "Device"):
        raise Skip(f"cuda.core {getattr(core, '__version__', '?')} has no Device at the top")
    device = core.Device()
    device.set_current()
    stream = device.default_stream
    sizes = [int(np.prod(shape)) * np.dtype(dtype).itemsize for _, shape, dtype in FRAME]
    allocate = device.allocate

    def frame():
        buffers = [allocate(size, stream=stream) for size in sizes]
        for buffer in buffers:
            buffer.close(stream)

    return frame, device.sync, dict


def row_devalloc_frame():
    devalloc = need("devalloc")
    cuda = need("numba.cuda")
    if not hasattr(devalloc.Arena, "empty"):
        raise Skip("this devalloc has no Arena.empty")
    arena = devalloc.Arena(256 << 20)

    def frame():  # (check=False: its exit need not wait for the GPU, there being no kernel)
        with arena.frame(check=False):
            arrays = [arena.empty(shape, dtype) for _, shape, dtype in FRAME]
            del arrays

    return frame, cuda.synchronize, lambda: {"arena": dataclasses.asdict(arena.stats())}


ROWS = {
    "numba-default": ("Numba's default manager: cudaMalloc, batched cudaFree", row_numba_default),
    "devalloc-pool": ("Numba with devalloc.allocators.numba (cudaMallocAsync)", row_devalloc_pool),
    "cupy-no-pool": ("CuPy without a pool: cudaMalloc/cudaFree", row_cupy_no_pool),
    "cupy-pool": ("CuPy MemoryPool", row_cupy_pool),
    "cupy-async-pool": ("CuPy MemoryAsyncPool (cudaMallocAsync)", row_cupy_async_pool),
    "torch": ("PyTorch caching allocator", row_torch),
    "cuda-core": ("cuda.core Device.allocate / Buffer.close (cudaMallocAsync)", row_cuda_core),
    "devalloc-frame": ("devalloc frame arrays: Arena.empty in arena.frame()", row_devalloc_frame),
}
ENV = {"devalloc-pool": {"NUMBA_CUDA_MEMORY_MANAGER": "devalloc.allocators.numba"}}


# -- one row, in this process -----------------------------------------------------------


def measure(frame, synchronize, frames, warmup):
    """Host nanoseconds of each of `frames` frames, after `warmup` untimed ones."""
    for _ in range(warmup):
        frame()
        synchronize()
    times = []
    for _ in range(frames):
        start = time.perf_counter_ns()
        frame()
        times.append(time.perf_counter_ns() - start)
        synchronize()
    return times


def run_row(name, frames, warmup):
    try:
        frame, synchronize, details = ROWS[name][1]()
        times_us = np.array(measure(frame, synchronize, frames, warmup)) / 1e3
    except Skip as why:
        return {"row": name, "skipped": str(why)}
    p10, median, p90 = np.percentile(times_us, [10, 50, 90])
    return {
        "row": name,
        "median_us": float(median),
        "p10_us": float(p10),
        "p90_us": float(p90),
        "mean_us": float(times_us.mean()),
        "frames": frames,
        **details(),
    }


# -- the parent: every row in a child process ------------------------------------------


def run_child(name, args):
    env = dict(os.environ)
    env.pop("NUMBA_CUDA_MEMORY_MANAGER", None)  # each row chooses its own
    env.update(ENV.get(name, {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    command = [sys.executable, __file__, "--row", name]
    command += ["--frames", str(args.frames), "--warmup", str(args.warmup)]
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


def package_version(name):
    for distribution in (name, *{"cupy": ["cupy-cuda13x", "cupy-cuda12x"]}.get(name, [])):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def environment():
    gpu = driver = None
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
        done = subprocess.run(query, capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip():
            gpu, driver = (part.strip() for part in done.stdout.splitlines()[0].split(","))
    cpu = platform.processor()
    if Path("/proc/cpuinfo").exists():
        names = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((n.split(":", 1)[1].strip() for n in names if n.startswith("model name")), cpu)
    packages = ["numba-cuda", "cuda-bindings", "cuda-core", "cupy", "torch", "numpy"]
    return {
        "gpu": gpu or "none (CUDA simulator)",
        "driver": driver,
        "cpu": cpu,
        "simulator": os.environ.get("NUMBA_ENABLE_CUDASIM") == "1",
        "python": platform.python_version(),
        **{name: package_version(name) for name in packages},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }


def print_table(results):
    measured = {r["row"]: r["median_us"] for r in results if "median_us" in r}
    base = measured.get(BASELINE)
    print(f"\n{'row':16} {'median us':>10} {'p10':>9} {'p90':>9} {'vs ' + BASELINE:>18}  what")
    for r in results:
        what = ROWS[r["row"]][0]
        if "median_us" not in r:
            print(f"{r['row']:16} {'skipped' if 'skipped' in r else 'ERROR':>10}  "
                  f"{r.get('skipped') or r.get('error')}")  # fmt: skip
            continue
        ratio = f"{base / r['median_us']:.1f}x less" if base else ""
        print(f"{r['row']:16} {r['median_us']:10.1f} {r['p10_us']:9.1f} {r['p90_us']:9.1f} "
              f"{ratio:>18}  {what}")  # fmt: skip


def plot(data, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    rows = [r for r in data["results"] if "median_us" in r]
    if not rows:
        return
    medians = [r["median_us"] for r in rows]
    spread = [
        [r["median_us"] - r["p10_us"] for r in rows],
        [r["p90_us"] - r["median_us"] for r in rows],
    ]
    colors = ["#1b7837" if r["row"].startswith("devalloc") else "#4393c3" for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    ax.barh([r["row"] for r in rows], medians, xerr=spread, color=colors, capsize=3)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("host time per frame, us (median; bars: 10th-90th percentile)")
    env = data["environment"]
    ax.set_title(
        f"13 temporaries of a 1080p frame ({FRAME_BYTES / 1e6:.1f} MB), allocated and "
        f"dropped\n{env['gpu']}, {env['cpu']}, {env['date'][:10]}",
        fontsize=9,
    )
    ax.set_xlim(min(r["p10_us"] for r in rows) / 2, max(r["p90_us"] for r in rows) * 3)
    for y, r in enumerate(rows):
        ax.text(r["p90_us"] * 1.1, y, f"{r['median_us']:.1f} us", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1000, help="timed frames per row")
    parser.add_argument("--warmup", type=int, default=50, help="untimed frames first")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--out", type=Path, help="results file (default: benchmarks/results/)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per row")
    parser.add_argument("--row", choices=list(ROWS), help=argparse.SUPPRESS)  # the child's
    args = parser.parse_args()
    if args.frames < 1 or args.warmup < 0:
        parser.error(f"--frames must be >= 1 and --warmup >= 0 (got {args.frames}, {args.warmup})")
    if args.row:
        print(json.dumps(run_row(args.row, args.frames, args.warmup)))
        return 0

    sys.path.insert(0, str(ROOT))
    from kernels.world import simulate_without_gpu

    simulate_without_gpu()  # the children inherit the choice
    results = []
    for name in args.rows:
        print(f"{name} ...", flush=True)
        results.append(run_child(name, args))
    data = {
        "environment": environment(),
        "frame": [[name, list(shape), np.dtype(dtype).name] for name, shape, dtype in FRAME],
        "frame_bytes": FRAME_BYTES,
        "frames": args.frames,
        "warmup": args.warmup,
        "results": results,
    }
    out = args.out or RESULTS / f"host-pools-{data['environment']['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    print_table(results)
    print(f"\nresults: {out}")
    plot(data, out.with_suffix(".png"))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
