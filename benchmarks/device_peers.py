"""devalloc against the device-side allocators of the literature, on their own tests.

    python benchmarks/device_peers.py --out benchmarks/results/device-peers.json
    bash benchmarks/build_peers.sh GALLATIN_SRC OUROBOROS_SRC   # builds .peers/

Each peer runs its own one-size test, unchanged, as a binary built for sm_90
(`benchmarks/build_peers.sh`); devalloc runs the same test shape in the same
process run, for each strategy:

* **Gallatin** (McCoy & Pandey, PPoPP 2024), `gallatin_test 500 1 SIZE`: 500
  segments of 16 MiB; 90% of their worth of SIZE-byte blocks, one `malloc` per
  thread, which writes its id into the block and records the pointer; host
  clock around launch and synchronize. devalloc's twin (`kernels/bench.py::
  one_each` with `write_id`): an 8000 MiB arena (500 x 16 MiB), the same
  threads, the same writes, the same clock.
* **Ouroboros** (Winter et al., ICS 2020), `main_c N SIZE` (chunk-based) and
  `main_p N SIZE` (page-based): N threads, one `malloc` each, the pointer
  recorded; CUDA events, mean of 10 rounds (each followed by a free kernel).
  devalloc's twin: `one_each` without the write, CUDA events, median of 10.

What each offers differs, and the table says so: both peers free (and reuse)
single blocks, Gallatin across size classes up to one segment; devalloc frees
nothing on its own and reclaims whole frames. A row whose binary is missing is
skipped with the reason.
"""

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numba import cuda

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import devalloc  # noqa: E402
from devalloc.backend import SIMULATOR  # noqa: E402
from kernels import bench as K  # noqa: E402
from measure import environment  # noqa: E402

PEERS = ROOT / ".peers"
SEGMENT = 16 << 20
SEGMENTS = 500
OUROBOROS_BYTES = 8 << 30  # the memory its test gives it
OFFERS = {
    "gallatin": "malloc + free of single blocks, 16 B - 16 MiB (size classes), "
    "memory reused across kernels",
    "ouroboros-chunk": "malloc + free of single blocks up to 8 KiB (chunk queues)",
    "ouroboros-page": "malloc + free of single blocks up to 8 KiB (page queues)",
    "devalloc warp_slab": "malloc only, any size; a frame's blocks all freed at once "
    "(arena reset), no per-block free",
    "devalloc bump": "malloc only, any size, exact accounting; freed per frame",
}


def gallatin_threads(size):
    """Threads in `gallatin_test 500 1 size` that allocate: 90% of the blocks."""
    per_segment = min(SEGMENT // size, SEGMENT // 16)
    return int(0.9 * per_segment * SEGMENTS)


def run_binary(command, timeout):
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return None, f"{command[0]} is not built (benchmarks/build_peers.sh)"
    except subprocess.TimeoutExpired:
        return None, f"took more than {timeout} s"
    if done.returncode:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        return None, f"exit {done.returncode}: {tail}"
    return done.stdout, None


def gallatin(size, binary, timeout):
    out, error = run_binary([str(binary), str(SEGMENTS), "1", str(size)], timeout)
    if error:
        return {"skipped": error}
    found = re.search(r"Malloced (\d+) in ([\d.e-]+) seconds", out)
    missed = re.search(r"Missed: (\d+)", out)
    if not found:
        return {"skipped": "no 'Malloced' line in its output: " + out[-200:]}
    count, seconds = int(found.group(1)), float(found.group(2))
    return {
        "allocations": count,
        "ms": seconds * 1e3,
        "failed": int(missed.group(1)) if missed else None,
    }


def ouroboros(size, count, binary, timeout):
    out, error = run_binary([str(binary), str(count), str(size)], timeout)
    if error:
        return {"skipped": error}
    found = re.search(r"Timing Allocation: ([\d.e-]+)ms", out)
    if not found or "Testcase DONE" not in out:
        return {"skipped": "its test did not finish: " + out[-200:]}
    return {"allocations": count, "ms": float(found.group(1)), "failed": None}


_capped = {}


def one_each_capped(max_registers):
    """`one_each`, or the same kernel compiled with ``max_registers`` (a user's
    cuda.jit option: ptxas keeps the kernel to that many registers, spilling
    where it must): at one allocation a thread the kernel is latency-bound,
    and fewer registers keep more warps resident."""
    if not max_registers:
        return K.one_each
    if max_registers not in _capped:
        _capped[max_registers] = devalloc.kernel(max_registers=max_registers)(K.one_each.py_func)
    return _capped[max_registers]


def devalloc_twin(strategy, size, count, write_id, host_clock, reps, max_registers=0):
    """`one_each` over `count` threads in an arena of 500 x 16 MiB (or 1.25 times
    what they ask, if more); ms per launch
    (host clock around launch and synchronize, or CUDA events), the median of
    `reps`, and the failures of the last. With `write_id`, a last launch is
    checked: every thread's block still holds its id (`ids_intact`)."""
    one_each = one_each_capped(max_registers)
    blocks = -(-count // K_BLOCK)
    offsets = cuda.device_array(count, np.int64)
    counters = cuda.to_device(np.zeros(2, np.int64))  # failures, overwritten ids
    misses, bad = counters[:1], counters[1:]
    times = []
    capacity = max(SEGMENTS * SEGMENT, count * size * 5 // 4)  # (Gallatin's, or what it takes)
    with devalloc.Arena(capacity, strategy=strategy) as arena:
        for rep in range(reps + 2):  # (the first compiles and warms up; the last is checked)
            counters.copy_to_device(np.zeros(2, np.int64))
            cuda.synchronize()
            start, end = cuda.event(), cuda.event()
            began = time.perf_counter()
            start.record()
            with arena.frame():
                one_each[blocks, K_BLOCK](arena, size // 8, count, write_id, offsets, misses)
                if rep == reps + 1 and write_id:
                    K.ids_intact[blocks, K_BLOCK](arena, count, offsets, bad)
            end.record()
            end.synchronize()
            host_ms = (time.perf_counter() - began) * 1e3
            if 0 < rep <= reps:
                times.append(host_ms if host_clock else cuda.event_elapsed_time(start, end))
        failed, overwritten = (int(c) for c in counters.copy_to_host())
    if overwritten:
        raise SystemExit(f"devalloc {strategy} {size} B: {overwritten} blocks given twice")
    return {"allocations": count, "ms": float(np.median(times)), "failed": failed}


K_BLOCK = 256  # threads per block, as in both peers' tests


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 1024])
    parser.add_argument("--ouroboros-threads", type=int, default=10_000_000)
    parser.add_argument("--peers", type=Path, default=PEERS, help="folder of the built tests")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per peer run")
    parser.add_argument("--reps", type=int, default=5, help="devalloc launches per figure")
    parser.add_argument("--out", type=Path, help="results JSON (default: benchmarks/results/)")
    parser.add_argument(
        "--tests",
        nargs="+",
        choices=("gallatin", "ouroboros"),
        default=["gallatin", "ouroboros"],
        help="which peers' tests to run",
    )
    parser.add_argument(
        "--max-registers",
        type=int,
        nargs="+",
        default=[0],
        metavar="N",
        help="also run devalloc's twins capped at N registers (0: no cap)",
    )
    args = parser.parse_args()
    if any(size < 16 or size % 8 for size in args.sizes):
        parser.error(f"--sizes must be multiples of 8 from 16 bytes (got {args.sizes})")
    if args.ouroboros_threads < 1 or args.reps < 1:
        parser.error("--ouroboros-threads and --reps must be at least 1")
    if any(not 0 <= cap <= 255 for cap in args.max_registers):
        parser.error(f"--max-registers must be 0 (no cap) to 255 (got {args.max_registers})")
    if SIMULATOR or not cuda.is_available():
        raise SystemExit("device_peers.py needs a GPU: the peers are CUDA C++ binaries")

    data = {"environment": environment(), "segments": SEGMENTS, "results": []}
    out = (
        args.out
        or ROOT / "benchmarks" / "results" / f"device-peers-{data['environment']['date']}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)

    def add(test, allocator, size, result):
        row = {"test": test, "allocator": allocator, "size": size, "offers": OFFERS[allocator]}
        row.update(result)
        if "ms" in row:
            row["g_per_s"] = row["allocations"] / row["ms"] / 1e6
        data["results"].append(row)
        out.write_text(json.dumps(data, indent=1))  # (after each row: a crash loses none)
        rate = f"{row['g_per_s']:8.2f} G/s" if "ms" in row else f"skipped: {row['skipped']}"
        cap = f"  max_registers={row['max_registers']}" if "max_registers" in row else ""
        print(f"{test:10} {allocator:20} {size:6} B  {rate}{cap}", flush=True)

    def twin(test, strategy, size, count, write_id):
        for cap in args.max_registers:
            try:
                result = devalloc_twin(
                    strategy, size, count, write_id, host_clock=write_id, reps=args.reps,
                    max_registers=cap,
                )  # fmt: skip
            except devalloc.ArenaOverflowError as error:  # (a row of its own, not the run's end)
                result = {"skipped": f"{error.failed} of {count} allocations failed"}
            if cap:
                result["max_registers"] = cap
            add(test, f"devalloc {strategy}", size, result)

    for size in args.sizes if "gallatin" in args.tests else ():
        binary = args.peers / "gallatin_test"
        add("gallatin", "gallatin", size, gallatin(size, binary, args.timeout))
        for strategy in ("warp_slab", "bump"):
            twin("gallatin", strategy, size, gallatin_threads(size), 1)
    for size in args.sizes if "ouroboros" in args.tests else ():
        # As many threads as its 8 GiB instance holds twice over (its own test's
        # default size; 10 M threads of 1 KiB do not fit and it stops).
        count = min(args.ouroboros_threads, OUROBOROS_BYTES // 2 // size)
        for name, binary in (("ouroboros-chunk", "main_c"), ("ouroboros-page", "main_p")):
            add("ouroboros", name, size, ouroboros(size, count, args.peers / binary, args.timeout))
        for strategy in ("warp_slab", "bump"):
            twin("ouroboros", strategy, size, count, 0)
    print(f"results: {out}")
    plot(data, out.with_suffix(".png"))


def label(row):
    """A row's allocator, with the register cap its kernel was compiled with."""
    cap = row.get("max_registers")
    return row["allocator"] + (f", {cap} registers" if cap else "")


def plot(data, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if "g_per_s" in r]
    tests = [t for t in ("gallatin", "ouroboros") if any(r["test"] == t for r in rows)]
    if not tests:
        return
    fig, axes = plt.subplots(1, len(tests), figsize=(6 * len(tests), 4), squeeze=False)
    for ax, test in zip(axes[0], tests):
        mine = [r for r in rows if r["test"] == test]
        sizes = sorted({r["size"] for r in mine})
        allocators = list(dict.fromkeys(label(r) for r in mine))
        width = 0.8 / len(allocators)
        for k, name in enumerate(allocators):
            rate = {r["size"]: r["g_per_s"] for r in mine if label(r) == name}
            rates = [rate.get(s, 0) for s in sizes]
            ours = name.startswith("devalloc")
            color = ("#1b7837" if "warp_slab" in name else "#5aae61") if ours else None
            xs = [i + k * width for i in range(len(sizes))]
            bars = ax.bar(xs, rates, width, label=name, color=color)
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(sizes))], [f"{s} B" for s in sizes])
        ax.set_ylabel("G allocations / s")
        ax.set_title(f"{test}'s own one-size test")
        ax.legend(fontsize=8)
    env = data["environment"]
    fig.suptitle(f"{env['gpu']}, numba-cuda {env['numba_cuda']}, {env['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
