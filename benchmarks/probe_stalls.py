"""Where a short kernel's time goes (issue 8's single-shot rows): the three
single-shot kernels of `measure.single_shot_ms` (devalloc, preallocated, the
allocator written by hand), launched in turns, for Nsight Compute to sample;
then a summary of its per-instruction samples, as JSON and a plot.

    ncu -k regex:"single_shot|preallocated" --launch-skip 9 --launch-count 3 \\
        --section WarpStateStats --section SourceCounters -o stalls \\
        python benchmarks/probe_stalls.py --threads 100000 --strategy bump
    ncu --import stalls.ncu-rep --page source --print-source sass --csv > stalls.csv
    python benchmarks/probe_stalls.py --summarize 100000=stalls.csv --out stalls.json

(`benchmarks/h200.sh stalls` runs the first two at 10 K and 100 K threads.)
Each round launches the three kernels once; rounds before the last warm them
up (compilation, the instruction cache's L2 lines), so that the profiled round
sees them as the benchmark's interleaved batches do."""

import argparse
import csv
import json
import sys
from collections import Counter
from pathlib import Path

LINE = 128  # bytes of an instruction cache line (16-byte instructions: 8 a line)
# (by hand first: its name holds single_shot's)
KERNELS = {
    "single_shot_by_hand": "by hand",
    "preallocated": "preallocated",
    "single_shot": "devalloc",
}


def launch(threads, strategy, rounds):
    from numba import cuda

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from measure import single_shot_launches

    with single_shot_launches(threads, strategy) as launches:
        for _ in range(rounds):
            for each in launches:
                each()
        cuda.synchronize()
    print(f"{rounds} rounds of 3 kernels, {threads:,} threads, {strategy}")


def kernel_tables(path):
    """{kernel: rows} of Nsight Compute's ``--page source --csv`` output: one
    header row per kernel, then one row per SASS instruction."""
    tables, rows, header = {}, None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                name = next(v for k, v in KERNELS.items() if k in row[1])
                rows = tables[name] = []
            elif row[0] == "Address":
                header = row
            elif rows is not None:
                rows.append(dict(zip(header, row)))
    return tables


def summarize_kernel(rows):
    """Samples by stall reason, and the code the launch ran: instructions,
    cache lines, and the stretches of consecutive instructions they make
    (each jump to a stretch not in the cache waits for it)."""
    reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    stalls = Counter()
    for row in rows:
        for reason in reasons:
            stalls[reason[len("stall_") :]] += int(row[reason] or 0)
    ran = [int(r["Address"], 16) for r in rows if int(r["Instructions Executed"] or 0) > 0]
    stretches = sum(1 for i, a in enumerate(ran) if i == 0 or a != ran[i - 1] + 16)
    samples = sum(stalls.values())
    return {
        "instructions": len(rows),
        "instructions_run": len(ran),
        "lines_run": len({a // LINE for a in ran}),
        "stretches_run": stretches,
        "samples": samples,
        "stalls": dict(stalls.most_common()),
        "no_instruction_share": stalls["no_inst"] / samples if samples else 0.0,
    }


def summarize(pairs, out):
    results = {}
    for threads, path in pairs:
        results[threads] = {k: summarize_kernel(r) for k, r in kernel_tables(path).items()}
    for threads, kernels in results.items():
        print(f"{int(threads):,} threads")
        for name, s in kernels.items():
            ran = f"{s['instructions_run']:4d} run in {s['stretches_run']:3d} stretches"
            print(f"  {name:12s} {s['instructions']:5d} instructions, {ran} over "
                  f"{s['lines_run']:3d} lines; {s['samples']:4d} samples, "
                  f"{100 * s['no_instruction_share']:4.1f}% waiting for instructions")  # fmt: skip
    Path(out).write_text(json.dumps(results, indent=1))
    plot(results, Path(out).with_suffix(".png"))


def plot(results, path):
    """Stacked bars: each kernel's warp samples by stall reason (the
    seven largest overall, the rest as one), a panel per thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    total = Counter()
    for kernels in results.values():
        for s in kernels.values():
            total.update(s["stalls"])
    shown = [reason for reason, _ in total.most_common(7)]
    names = {"no_inst": "waiting for instructions", "long_sb": "waiting for global memory",
             "drain": "draining stores at exit", "wait": "fixed latency",
             "branch_resolving": "resolving branches", "sleep": "sleeping (nanosleep)",
             "imc": "constant cache miss", "short_sb": "waiting for shared memory",
             "selected": "issuing"}  # fmt: skip
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, (threads, kernels) in zip(axes[0], results.items()):
        labels = list(kernels)
        bottom = [0] * len(labels)
        for reason in [*shown, "other"]:
            values = [
                kernels[k]["stalls"].get(reason, 0) if reason != "other"
                else sum(v for r, v in kernels[k]["stalls"].items() if r not in shown)
                for k in labels
            ]  # fmt: skip
            ax.bar(labels, values, bottom=bottom, label=names.get(reason, reason))
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_title(f"single-shot, {int(threads):,} threads")
        ax.set_ylabel("warp samples (Nsight Compute)")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--strategy", choices=("bump", "warp_slab"), default="bump")
    parser.add_argument("--rounds", type=int, default=4, help="the last is the one to profile")
    parser.add_argument("--summarize", nargs="+", metavar="THREADS=CSV",
                        help="summarize Nsight Compute's CSVs instead of launching")  # fmt: skip
    parser.add_argument("--out", default="stalls.json", help="with --summarize (and a .png)")
    args = parser.parse_args()
    if args.summarize:
        pairs = [item.split("=", 1) for item in args.summarize]
        if any(len(p) != 2 or not p[0].isdigit() or not Path(p[1]).is_file() for p in pairs):
            parser.error("--summarize takes THREADS=CSV pairs of existing files")
        return summarize(pairs, args.out)
    if args.threads < 1 or args.rounds < 1:
        parser.error("--threads and --rounds must be positive")
    launch(args.threads, args.strategy, args.rounds)


if __name__ == "__main__":
    main()
