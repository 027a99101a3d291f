"""Run devalloc's benchmarks on the GPU, write the results file and the plots.

    python benchmarks/run.py                      # everything, ~3 minutes on an H200
    python benchmarks/run.py --suites launch oom  # some of it
    python benchmarks/run.py --quick              # fewer repetitions and sizes
    python benchmarks/run.py --compare all        # and every comparison with other tools
    python benchmarks/run.py --suites --compare scratch attention   # only those

Writes ``benchmarks/results/<gpu>-<date>.json`` (or ``--out``) and, with
matplotlib, PNG plots beside it. ``--compare`` adds the comparisons with the
tools a user would pick instead (`compare.py`: host pools, per-launch
scratch, attention, the frame pipeline, Gallatin and Ouroboros), each run in
a child process, under ``comparisons`` in the same file, their "devalloc
against X" rows under ``summary`` and as one picture (``.summary.png``).
Each target is judged against baselines measured in the same run; the table
printed last says which were met.
"""

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare as C
from numba import cuda

import devalloc
import measure as M
from devalloc.backend import SIMULATOR

RESULTS = Path(__file__).resolve().parent / "results"
ALLOCATORS = ["warp_slab", "bump", "naive_bump", "warp_aggregated", "hand_slab", "device_malloc"]
# Written by hand on one global cursor, as baselines: one atomic per lane, one per
# warp, and a per-warp slab with nothing devalloc guarantees (the ceiling).
HAND_WRITTEN = ["naive_bump", "warp_aggregated", "hand_slab"]
SIZES = {"16B": 16, "mixed": M.MIXED}
# (threads, allocations per thread) for the sustained runs: with mixed sizes a
# million threads can make only a few each before the arena outgrows the GPU.
SUSTAINED = {
    "16B": [(10_000, 256), (100_000, 64), (1 << 20, 64)],
    "mixed": [(10_000, 256), (100_000, 64), (1 << 20, 4)],
}
SCALING_ITERS = 64


def suite_launch(quick):
    return M.launch_overhead_us()


def suite_graph(quick):
    return [M.frame_host_us()]


def suite_bump_vs_atomic(quick):
    """`bump` against the atomics it replaces: 16 B, one allocation per thread, and
    mixed sizes in a loop."""
    rows = []
    for size, threads, iters in (("16B", 1 << 20, 1), ("mixed", 100_000, 64)):
        for allocator in ("bump", "warp_slab", *HAND_WRITTEN[:2]):
            rate = M.allocation_rate(allocator, threads, iters, SIZES[size])
            rows.append({"allocator": allocator, "threads": threads, "iters": iters,
                         "size": size, **rate})  # fmt: skip
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
    counts = [1 << e for e in range(0, 24, 4 if quick else 1)] + [10_000_000]
    cases = [(a, n) for n in counts for a in ("warp_slab", "bump", *HAND_WRITTEN)]
    for allocator, threads in tqdm(cases, desc="scaling", leave=False):
        rate = M.allocation_rate(allocator, threads, SCALING_ITERS, 16, reps=5)
        rows.append({"allocator": allocator, "threads": threads, "size": "16B", **rate})
    return rows


def suite_with_store(quick):
    """Allocation only (`sustained`) beside one store into each allocation against
    the same stores at addresses packed without an allocator."""
    rows = []
    for size, threads, iters in (("16B", 540_000, 64), ("mixed", 100_000, 16)):
        for strategy in devalloc.STRATEGIES:
            alone = M.allocation_rate(strategy, threads, iters, SIZES[size])
            stored_ms, packed_ms = M.with_store_ms(strategy, threads, iters, SIZES[size])
            rows.append({"strategy": strategy, "size": size, "threads": threads, "iters": iters,
                         "alloc_only_per_s": alone["allocs_per_s"], "with_store_ms": stored_ms,
                         "packed_store_ms": packed_ms, "ratio": stored_ms / packed_ms})  # fmt: skip
    return rows


def suite_single_shot(quick):
    rows = []
    for strategy in ("warp_slab", "bump"):
        for threads in [100_000, 1 << 20] if quick else [10_000, 100_000, 1 << 20]:
            devalloc_ms, pre_ms, hand_ms = M.single_shot_ms(threads, strategy=strategy)
            rows.append(
                {"strategy": strategy, "threads": threads, "devalloc_ms": devalloc_ms,
                 "preallocated_ms": pre_ms, "ratio": devalloc_ms / pre_ms,
                 "by_hand_ms": hand_ms, "by_hand_ratio": hand_ms / pre_ms}
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
    cases = [(strategy, size) for strategy in devalloc.STRATEGIES for size in sizes]
    return [
        {"strategy": strategy, "size": size, "usable_fraction": M.usable_fraction(size, strategy)}
        for strategy, size in tqdm(cases, desc="oom", leave=False)
    ]


SUITES = {
    "launch": suite_launch,
    "graph": suite_graph,
    "bump_vs_atomic": suite_bump_vs_atomic,
    "sustained": suite_sustained,
    "scaling": suite_scaling,
    "single_shot": suite_single_shot,
    "with_store": suite_with_store,
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
        for row in results["launch"]:
            for base, goal in (("plain", 3.0), ("plain_with_scalar", 1.0)):
                over = row[f"over_{base}_us"]
                target(f"launch overhead over {base}, {row['stream']}", f"{over:.2f} us",
                       f"<= {goal:g} us", over <= goal)  # fmt: skip
    if "graph" in results:
        row = results["graph"][0]
        ratio = row["replay_us"] / row["eager_us"]
        target(f"host time, a frame of {row['kernels']} kernels replayed vs eager",
               f"{ratio:.3f}x", "<= 0.1x", ratio <= 0.1)  # fmt: skip
    if "bump_vs_atomic" in results:
        rows = results["bump_vs_atomic"]
        for size, baseline, goal in (("16B", "warp_aggregated", 0.9), ("mixed", "naive_bump", 1.0)):
            bump = find(rows, allocator="bump", size=size)[0]["allocs_per_s"]
            base = find(rows, allocator=baseline, size=size)[0]["allocs_per_s"]
            target(f"bump {size} vs {baseline}", f"{bump / base:.3f}x", f">= {goal}x",
                   bump >= goal * base)  # fmt: skip
    if "sustained" in results:
        rows = results["sustained"]
        for size, goal, malloc_goal in (("16B", 150e9, 25_000), ("mixed", 50e9, 10_000)):
            best = max(r["allocs_per_s"] for r in find(rows, allocator="warp_slab", size=size))
            target(f"sustained {size} warp_slab", f"{best / 1e9:.1f} G/s",
                   f">= {goal / 1e9:.0f} G/s", best >= goal)  # fmt: skip
            malloc = find(rows, allocator="device_malloc", size=size)
            if malloc:
                ratio = best / max(r["allocs_per_s"] for r in malloc)
                target(f"{size} vs device malloc", f"{ratio:,.0f}x", f">= {malloc_goal:,}x",
                       ratio >= malloc_goal)  # fmt: skip
    if "single_shot" in results:
        for row in results["single_shot"]:
            goal = 1.1 if row["threads"] <= 100_000 else 1.2
            strategy = row.get("strategy", "warp_slab")  # (runs before 2026-12-04: warp_slab)
            floor = ""
            if "by_hand_ratio" in row:  # (runs before 96d25fc: no floor)
                floor = f" (one atomic a warp by hand: {row['by_hand_ratio']:.3f}x)"
            target(f"single-shot vs preallocated, {row['threads']:,} threads, {strategy}",
                   f"{row['ratio']:.3f}x{floor}", f"<= {goal}x", row["ratio"] <= goal)  # fmt: skip
    if "with_store" in results:  # the target is warp_slab's; bump's rows are for comparison
        for row in find(results["with_store"], strategy="warp_slab"):
            target(f"with a store, {row['size']} warp_slab vs packed",
                   f"{row['ratio']:.3f}x", "<= 1.1x", row["ratio"] <= 1.1)  # fmt: skip
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
        for strategy in devalloc.STRATEGIES:
            worst = min(r["usable_fraction"] for r in find(results["oom"], strategy=strategy))
            target(f"usable fraction, 16 B - 8 KiB, {strategy}", f"{worst:.4f}", ">= 0.98",
                   worst >= 0.98)  # fmt: skip
    return targets


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suites", nargs="*", choices=list(SUITES), default=list(SUITES))
    parser.add_argument(
        "--compare",
        nargs="+",
        choices=["all", *C.COMPARISONS],
        default=[],
        help="comparisons with other tools to run too",
    )
    parser.add_argument("--comparisons-from", type=Path, metavar="FOLDER",
                        help="take the comparisons' results from FOLDER/<name>.json (each "
                             "script's --out) instead of running them")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument(
        "--out", type=Path, help="results file (default: results/<gpu>-<date>.json)"
    )
    args = parser.parse_args()
    if args.comparisons_from and not list(args.comparisons_from.glob("*.json")):
        parser.error(f"--comparisons-from {args.comparisons_from}: no results files in it")
    if not SIMULATOR and not cuda.is_available():
        parser.error(
            "no CUDA GPU here: the benchmarks time a GPU (NUMBA_ENABLE_CUDASIM=1 runs them "
            "on the simulator, to check they run: its figures measure nothing)"
        )

    env = M.environment()
    print(f"{env['gpu']} (cc {env['compute_capability']}), numba-cuda {env['numba_cuda']}")
    results = {}
    for name in tqdm(args.suites, desc="suites"):
        results[name] = SUITES[name](args.quick)
    targets = judge(results)
    names = list(C.COMPARISONS) if "all" in args.compare else args.compare
    if args.comparisons_from:
        comparisons = C.load_comparisons(args.comparisons_from)
    else:
        comparisons = C.run_comparisons(names, progress=tqdm.write)
    summary = C.summarize(comparisons)

    gpu = env["gpu"].replace("NVIDIA ", "").lower().replace(" ", "-")
    out = args.out or RESULTS / f"{gpu}-{env['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "environment": env,
                "results": results,
                "targets": targets,
                "comparisons": comparisons,
                "summary": summary,
            },
            indent=1,
        )
    )
    print(f"\nwrote {out}")
    try:
        from plot import plot_allocators, plot_summary

        for png in plot_allocators(out) if results else []:
            print(f"wrote {png}")
        if summary:
            print(f"wrote {plot_summary(out, summary, env)}")
    except ImportError as error:  # matplotlib missing: the numbers are what matters
        print(f"no plots: {error}")

    for name, found in comparisons.items():
        if "error" in found:
            print(f"comparison {name} failed: {found['error']}")
    for row in summary:
        memory = f", other holds {row['memory_ratio']:.2g}x" if row["memory_ratio"] else ""
        print(f"{row['scenario']}: devalloc {row['speedup']:.3g}x vs {row['other']}{memory}")
    width = max(len(t["target"]) for t in targets) if targets else 10
    print(f"\n{'target':{width}}  {'measured':>14}  {'goal':>12}  met")
    for t in targets:
        met = "yes" if t["met"] else "NO"
        print(f"{t['target']:{width}}  {t['measured']:>14}  {t['goal']:>12}  {met}")


if __name__ == "__main__":
    main()
