"""Run devalloc's benchmarks on the GPU, write the results file and the plots.

    python benchmarks/run.py                      # everything, ~3 minutes on an H200
    python benchmarks/run.py --suites launch oom  # some of it
    python benchmarks/run.py --quick              # fewer repetitions and sizes

Writes ``benchmarks/results/<gpu>-<date>.json`` (or ``--out``) and, with
matplotlib, PNG plots beside it. Each target is judged against baselines
measured in the same run; the table printed last says which were met.
"""

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure as M

RESULTS = Path(__file__).resolve().parent / "results"
ALLOCATORS = ["warp_slab", "bump", "naive_bump", "device_malloc"]
SIZES = {"16B": 16, "mixed": M.MIXED}
# (threads, allocations per thread) for the sustained runs: with mixed sizes a
# million threads can make only a few each before the arena outgrows the GPU.
SUSTAINED = {
    "16B": [(10_000, 256), (100_000, 64), (1 << 20, 64)],
    "mixed": [(10_000, 256), (100_000, 64), (1 << 20, 4)],
}
SCALING_ITERS = 64


def suite_launch(quick):
    dev, plain, scalar = M.launch_overhead_us()
    return [
        {"devalloc_us": dev, "plain_us": plain, "plain_with_scalar_us": scalar,
         "overhead_us": dev - plain}
    ]  # fmt: skip


def suite_bump_vs_atomic(quick):
    rows = []
    for allocator in ("bump", "naive_bump", "warp_slab"):
        rate = M.allocation_rate(allocator, 1 << 20, 1, 16)
        rows.append({"allocator": allocator, "threads": 1 << 20, "iters": 1, "size": "16B", **rate})
    return rows


def suite_sustained(quick):
    rows = []
    cases = [
        (allocator, size, threads, iters)
        for size in SIZES
        for threads, iters in SUSTAINED[size][-1 if quick else 0 :]
        for allocator in ALLOCATORS
    ]
    for allocator, size, threads, iters in tqdm(cases, desc="sustained", leave=False):
        if allocator == "device_malloc":  # about 4 M/s: one malloc + free per thread
            iters = 1
        reps = 3 if allocator == "device_malloc" else 7
        rate = M.allocation_rate(allocator, threads, iters, SIZES[size], reps=reps)
        rows.append(
            {"allocator": allocator, "size": size, "threads": threads, "iters": iters, **rate}
        )
    return rows


def suite_scaling(quick):
    rows = []
    exponents = range(0, 21, 4 if quick else 1)
    cases = [(a, 1 << e) for e in exponents for a in ("warp_slab", "bump", "naive_bump")]
    for allocator, threads in tqdm(cases, desc="scaling", leave=False):
        rate = M.allocation_rate(allocator, threads, SCALING_ITERS, 16, reps=5)
        rows.append({"allocator": allocator, "threads": threads, "size": "16B", **rate})
    return rows


def suite_single_shot(quick):
    rows = []
    for threads in [1 << 20] if quick else [10_000, 100_000, 1 << 20]:
        devalloc_ms, pre_ms = M.single_shot_ms(threads)
        rows.append(
            {"threads": threads, "devalloc_ms": devalloc_ms, "preallocated_ms": pre_ms,
             "ratio": devalloc_ms / pre_ms}
        )  # fmt: skip
    return rows


def suite_frame_memory(quick):
    return [M.frame_memory(strategy) for strategy in ("warp_slab", "bump")]


def suite_nrt(quick):
    """Numba's NRT (np.empty in a kernel) beside CUDA's device malloc and devalloc."""
    rows = []
    for size in SIZES:
        threads, iters = SUSTAINED[size][1]
        for allocator in ("nrt", "device_malloc", "warp_slab"):
            n = 1 if allocator != "warp_slab" else iters
            rate = M.allocation_rate(allocator, threads, n, SIZES[size], reps=3)
            rows.append({"allocator": allocator, "size": size, "threads": threads,
                         "iters": n, **rate})  # fmt: skip
    return rows


def suite_oom(quick):
    sizes = [16 << k for k in range(0, 10, 3 if quick else 1)]
    return [{"size": s, "usable_fraction": M.usable_fraction(s)} for s in tqdm(sizes, desc="oom")]


SUITES = {
    "launch": suite_launch,
    "bump_vs_atomic": suite_bump_vs_atomic,
    "sustained": suite_sustained,
    "scaling": suite_scaling,
    "single_shot": suite_single_shot,
    "oom": suite_oom,
    "frame_memory": suite_frame_memory,
    "nrt": suite_nrt,
}


def find(rows, **match):
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def judge(results):
    """Each target of the issues, judged on this run's numbers."""
    targets = []

    def target(name, value, goal, ok):
        targets.append({"target": name, "measured": value, "goal": goal, "met": bool(ok)})

    if "launch" in results:
        over = results["launch"][0]["overhead_us"]
        target("launch overhead over plain cuda.jit", f"{over:.2f} us", "<= 3 us", over <= 3)
    if "bump_vs_atomic" in results:
        rows = results["bump_vs_atomic"]
        bump = find(rows, allocator="bump")[0]["allocs_per_s"]
        naive = find(rows, allocator="naive_bump")[0]["allocs_per_s"]
        target(
            "bump vs one atomic per thread", f"{bump / naive:.3f}x", ">= 0.9x", bump >= 0.9 * naive
        )
    if "sustained" in results:
        rows = results["sustained"]
        for size, goal in (("16B", 150e9), ("mixed", 50e9)):
            best = max(r["allocs_per_s"] for r in find(rows, allocator="warp_slab", size=size))
            target(f"sustained {size} warp_slab", f"{best / 1e9:.1f} G/s",
                   f">= {goal / 1e9:.0f} G/s", best >= goal)  # fmt: skip
            malloc = find(rows, allocator="device_malloc", size=size)
            if malloc:
                ratio = best / max(r["allocs_per_s"] for r in malloc)
                target(f"{size} vs device malloc", f"{ratio:,.0f}x", ">= 10,000x", ratio >= 1e4)
    if "single_shot" in results:
        worst = max(r["ratio"] for r in results["single_shot"])
        target("single-shot vs preallocated", f"{worst:.3f}x", "<= 1.2x", worst <= 1.2)
    if "frame_memory" in results:
        for row in results["frame_memory"]:
            ratio = row["held_over_asked"]
            target(f"frame of 1000 launches, {row['strategy']}", f"{ratio:.2f}x asked",
                   "<= 2x", ratio <= 2)  # fmt: skip
    if "nrt" in results:
        for size in SIZES:
            rows = find(results["nrt"], size=size)
            slab = find(rows, allocator="warp_slab")[0]["allocs_per_s"]
            nrt = find(rows, allocator="nrt")[0]["allocs_per_s"]
            if nrt == nrt:  # not NaN: NRT ran
                target(f"{size} warp_slab vs NRT np.empty", f"{slab / nrt:,.0f}x", "> 1x",
                       slab > nrt)  # fmt: skip
    if "oom" in results:
        worst = min(r["usable_fraction"] for r in results["oom"])
        target("usable fraction, 16 B - 8 KiB", f"{worst:.4f}", ">= 0.98", worst >= 0.98)
    return targets


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suites", nargs="+", choices=list(SUITES), default=list(SUITES))
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument(
        "--out", type=Path, help="results file (default: results/<gpu>-<date>.json)"
    )
    args = parser.parse_args()

    env = M.environment()
    print(f"{env['gpu']} (cc {env['compute_capability']}), numba-cuda {env['numba_cuda']}")
    results = {}
    for name in tqdm(args.suites, desc="suites"):
        results[name] = SUITES[name](args.quick)
    targets = judge(results)

    gpu = env["gpu"].replace("NVIDIA ", "").lower().replace(" ", "-")
    out = args.out or RESULTS / f"{gpu}-{env['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"environment": env, "results": results, "targets": targets}, indent=1)
    )
    print(f"\nwrote {out}")
    try:
        from plot import plot_allocators

        for png in plot_allocators(out):
            print(f"wrote {png}")
    except ImportError as error:  # matplotlib missing: the numbers are what matters
        print(f"no plots: {error}")

    width = max(len(t["target"]) for t in targets) if targets else 10
    print(f"\n{'target':{width}}  {'measured':>14}  {'goal':>12}  met")
    for t in targets:
        met = "yes" if t["met"] else "NO"
        print(f"{t['target']:{width}}  {t['measured']:>14}  {t['goal']:>12}  {met}")


if __name__ == "__main__":
    main()
