"""Plots of a results file, for the README. ``python benchmarks/plot.py RESULTS.json``"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {
    "warp_slab": "#1b7837",
    "bump": "#5aae61",
    "naive_bump": "#9970ab",
    "warp_aggregated": "#c2a5cf",
    "hand_slab": "#762a83",
    "device_malloc": "#d6604d",
    "devalloc": "#1b7837",
    "malloc": "#d6604d",
    "malloc-pool": "#f4a582",
    "static": "#4393c3",
    "devalloc-graph": "#00441b",
    "static-graph": "#2166ac",
}
LABELS = {
    "warp_slab": "devalloc warp_slab",
    "bump": "devalloc bump",
    "naive_bump": "one atomic per thread",
    "warp_aggregated": "warp-aggregated atomic (by hand)",
    "hand_slab": "per-warp slab by hand (no guarantees)",
    "device_malloc": "CUDA device malloc",
}


def spread_barh(ax, labels, low, median, high, ours, notes, room=3):
    """Horizontal bars of `median` with whiskers from `low` to `high` (the 10th
    and 90th percentiles) on a log axis, devalloc's rows (`ours`) green, and
    each row's note written right of its whisker."""
    spread = [[m - lo for m, lo in zip(median, low)], [hi - m for m, hi in zip(median, high)]]
    colors = ["#1b7837" if mine else "#4393c3" for mine in ours]
    ax.barh(labels, median, xerr=spread, color=colors, capsize=3)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlim(min(low) / 2, max(high) * room)
    for y, (hi, note) in enumerate(zip(high, notes)):
        ax.text(hi * 1.1, y, note, va="center", fontsize=8)


def _title(fig, env):
    fig.suptitle(f"{env['gpu']}, numba-cuda {env['numba_cuda']}, {env['date']}", fontsize=9)


def plot_allocators(path):
    path = Path(path)
    data = json.loads(path.read_text())
    results, env = data["results"], data["environment"]
    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    (sustained, scaling, stored), (oom, launch, spare) = axes
    spare.axis("off")

    if "sustained" in results:
        rows = results["sustained"]
        sizes = sorted({r["size"] for r in rows})
        allocators = [a for a in LABELS if any(r["allocator"] == a for r in rows)]
        top = max(r["threads"] for r in rows)
        width = 0.8 / len(allocators)
        for k, allocator in enumerate(allocators):
            values = [
                next((r["allocs_per_s"] for r in rows if r["allocator"] == allocator
                      and r["size"] == s and r["threads"] == top), 0)
                for s in sizes
            ]  # fmt: skip
            xs = [i + k * width for i in range(len(sizes))]
            sustained.bar(xs, values, width, label=LABELS[allocator], color=COLORS[allocator])
        sustained.set_xticks([i + 0.4 - width / 2 for i in range(len(sizes))], sizes)
        sustained.set_yscale("log")
        sustained.set_ylabel("allocations / s")
        sustained.set_title(f"sustained allocation, {top:,} threads")
        sustained.legend(fontsize=8)

    if "scaling" in results:
        rows = results["scaling"]
        for allocator in LABELS:
            pts = sorted(
                (r["threads"], r["allocs_per_s"]) for r in rows if r["allocator"] == allocator
            )
            if pts:
                scaling.plot(*zip(*pts), marker="o", ms=3, label=LABELS[allocator],
                             color=COLORS[allocator])  # fmt: skip
        scaling.set_xscale("log", base=2)
        scaling.set_yscale("log")
        scaling.set_xlabel("threads")
        scaling.set_ylabel("allocations / s")
        scaling.set_title("thread scaling, 16 B, 64 allocations per thread, 1 - 10 M threads")
        scaling.legend(fontsize=8)

    if "oom" in results:
        rows = results["oom"]
        sizes = sorted({r["size"] for r in rows})
        strategies = sorted({r.get("strategy", "warp_slab") for r in rows}, reverse=True)
        width = 0.8 / len(strategies)
        for k, strategy in enumerate(strategies):
            values = [
                next((100 * r["usable_fraction"] for r in rows
                      if r.get("strategy", "warp_slab") == strategy and r["size"] == size), 0)
                for size in sizes
            ]  # fmt: skip
            xs = [i + k * width for i in range(len(sizes))]
            oom.bar(xs, values, width, label=LABELS[strategy], color=COLORS[strategy])
        oom.set_xticks([i + 0.4 - width / 2 for i in range(len(sizes))], sizes, fontsize=7)
        oom.axhline(98, color="k", lw=0.8, ls="--", label="target 98%")
        oom.set_ylim(90, 100.5)
        oom.set_xlabel("allocation size, bytes")
        oom.set_ylabel("% of the arena used before failure")
        oom.set_title("memory efficiency (allocate until full)")
        oom.legend(fontsize=8)

    if "with_store" in results:
        rows = results["with_store"]
        labels = [f"{r['strategy']}\n{r['size']}" for r in rows]
        xs = range(len(rows))
        stored.bar([x - 0.2 for x in xs], [r["with_store_ms"] for r in rows], 0.4,
                   label="allocate + one store", color=COLORS["warp_slab"])  # fmt: skip
        stored.bar([x + 0.2 for x in xs], [r["packed_store_ms"] for r in rows], 0.4,
                   label="the same stores, packed by hand", color=COLORS["static"])  # fmt: skip
        stored.set_xticks(list(xs), labels, fontsize=8)
        stored.set_ylabel("ms per launch (median)")
        stored.set_title("what a kernel sees: allocation with its store")
        stored.legend(fontsize=8)
    else:
        stored.axis("off")

    if "launch" in results:
        rows = results["launch"]
        kinds = [("plain_us", "plain cuda.jit", COLORS["static"]),
                 ("plain_with_scalar_us", "plain + one int64", COLORS["naive_bump"]),
                 ("devalloc_us", "@devalloc.kernel", COLORS["devalloc"])]  # fmt: skip
        for k, (key, label, color) in enumerate(kinds):
            xs = [i + k * 0.27 for i in range(len(rows))]
            launch.bar(xs, [r.get(key, 0) for r in rows], 0.27, label=label, color=color)
        launch.set_xticks([i + 0.27 for i in range(len(rows))],
                          [r.get("stream", "default stream") for r in rows])  # fmt: skip
        launch.set_ylabel("host time per launch, us (median)")
        launch.set_title("launch overhead")
        launch.legend(fontsize=8)

    _title(fig, env)
    fig.tight_layout()
    png = path.with_suffix(".allocators.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [png]


def plot_pipeline(path):
    path = Path(path)
    data = json.loads(path.read_text())
    runs = data["results"]
    sizes = sorted({r["size"] for r in runs}, key=lambda s: int(s.split("x")[0]))
    modes = [m for m in ("malloc", "malloc-pool", "static", "devalloc", "static-graph",
                         "devalloc-graph")
             if any(r["mode"] == m for r in runs)]  # fmt: skip
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(modes)
    for k, mode in enumerate(modes):
        ms = [next((r["median_ms"] for r in runs if r["mode"] == mode and r["size"] == s), 0)
              for s in sizes]  # fmt: skip
        mib = [next((r["peak_mib"] for r in runs if r["mode"] == mode and r["size"] == s), 0)
               for s in sizes]  # fmt: skip
        xs = [i + k * width for i in range(len(sizes))]
        speed.bar(xs, ms, width, label=mode, color=COLORS[mode])
        memory.bar(xs, mib, width, label=mode, color=COLORS[mode])
    for ax, label in ((speed, "median ms / frame"), (memory, "peak device memory, MiB")):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(sizes))], sizes)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    speed.set_title("frame pipeline: time per frame")
    memory.set_title("frame pipeline: peak device memory")
    _title(fig, data["environment"])
    fig.tight_layout()
    png = path.with_suffix(".png")
    fig.savefig(png, dpi=110)
    plt.close(fig)
    streamed = [r for r in runs if " x" in r["mode"]]
    return [png, plot_streams(path, data, streamed)] if streamed else [png]


def plot_streams(path, data, rows):
    """Frames in flight: frames/s with 1 and N streams per size, and the timeline
    of the widest run's last frames (one bar per frame, a row per stream)."""
    sizes = sorted({r["size"] for r in rows}, key=lambda s: int(s.split("x")[0]))
    modes = sorted(
        {r["mode"] for r in rows}, key=lambda m: (m.split(" x")[0], int(m.split(" x")[1]))
    )
    fig, (rate, timeline) = plt.subplots(1, 2, figsize=(12, 4), width_ratios=(1, 1.4))
    width = 0.8 / len(modes)
    for k, mode in enumerate(modes):
        fps = [next((r["fps"] for r in rows if r["mode"] == mode and r["size"] == s), 0)
               for s in sizes]  # fmt: skip
        base = COLORS[mode.split(" x")[0]]
        xs = [i + k * width for i in range(len(sizes))]
        bars = rate.bar(
            xs, fps, width, label=mode, color=base, alpha=0.55 if mode.endswith("x1") else 1
        )
        rate.bar_label(bars, fmt="%.0f", fontsize=7)
    rate.set_xticks([i + 0.4 - width / 2 for i in range(len(sizes))], sizes)
    rate.set_ylabel("frames / s (whole run)")
    rate.set_title("frames in flight: devalloc.ArenaRing")
    rate.legend(fontsize=8)

    def most_streams_graph_smallest(r):
        return int(r["mode"].split(" x")[1]), r["mode"], -int(r["size"].split("x")[0])

    timed = [r for r in rows if r.get("timeline")]
    widest = max(timed, key=most_streams_graph_smallest, default=None)
    if widest is not None:
        for k, start, end in widest["timeline"]:
            timeline.barh(k, end - start, left=start, height=0.6, color=COLORS["devalloc"],
                          edgecolor="white")  # fmt: skip
        streams = int(widest["mode"].split(" x")[1])
        timeline.set_yticks(range(streams), [f"stream {k}" for k in range(streams)])
        timeline.invert_yaxis()
        timeline.set_xlabel("ms (CUDA events around each frame on its stream)")
        timeline.set_title(f"{widest['mode']}, {widest['size']}: frames overlap")
    else:
        timeline.axis("off")
    _title(fig, data["environment"])
    fig.tight_layout()
    png = path.with_name(path.stem + "-streams.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def plot_summary(path, rows, environment):
    """The one picture: devalloc against each other way, scenario by scenario
    (how many times faster devalloc is; the memory the other holds beside it)."""
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.6))
    labels = [f"{r['scenario']}: vs {r['other']}" for r in rows]
    speedups = [r["speedup"] for r in rows]
    colors = ["#1b7837" if s >= 1 else "#d6604d" for s in speedups]
    ax.barh(range(len(rows)), speedups, color=colors)
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    for y, r in enumerate(rows):
        note = f"{r['speedup']:.0f}x" if r["speedup"] >= 10 else f"{r['speedup']:.2g}x"
        if r.get("memory_ratio"):
            note += f", holds {r['memory_ratio']:.2g}x devalloc's memory"
        ax.text(max(r["speedup"], 1) * 1.15, y, note, va="center", fontsize=7)
    ax.set_xlim(min(min(speedups) / 2, 0.5), max(speedups) * 40)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("devalloc's advantage: the other's time / devalloc's (log; right of 1: faster)")
    ax.set_title(f"What devalloc buys over each other way\n{environment['gpu']}, "
                 f"{environment['date']}, every baseline in the same run", fontsize=9)  # fmt: skip
    fig.tight_layout()
    png = Path(path).with_suffix(".summary.png")
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


if __name__ == "__main__":
    for name in sys.argv[1:]:
        kind = plot_pipeline if "pipeline" in name else plot_allocators
        for png in kind(name):
            print(png)
