"""Why run.py's mixed-size figure sits below the variants' A/B of the same code:
the same two measurements (each in an arena of its own, as `run.py` takes
them), fresh and then after each suite `run.py` runs before them.

    python benchmarks/probe_mixed.py            # on the GPU
    python benchmarks/probe_mixed.py --queued   # each timed as it comes and queued

On the H200 (2026-12-04), timed as they came, they moved between 35.8 and 46.5
G/s in one call and between 41.6 and 50.0 in the next, with no order to either.
`--queued` found why: timed as it comes, a launch's events also time the host
launching it. In two calls of three turns, mixed sizes gave 43.0-49.5 G/s as
they came and 64.2-64.4 queued behind a spin kernel (16 B: 145.5-155.1 and
166.5-166.7), so `measure.allocation_rate` now queues by default
(`results/h200-2026-12-04-run14-probe-queued.txt`).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as R

from measure import MIXED, allocation_rate


def rates(when, queued=True):
    """`run.py`'s mixed-size and 16 B measurements, in arenas of their own."""
    figures = []
    for threads, size in ((100_000, MIXED), (1 << 20, 16)):
        rate = allocation_rate("warp_slab", threads, 64, size, queued=queued)
        figures.append(f"{rate['allocs_per_s'] / 1e9:6.1f} G/s ({rate['median_ms'] * 1e3:6.1f} us)")
    print(f"{when:28} mixed {figures[0]}   16 B {figures[1]}", flush=True)


def queued_or_not(turns=3):
    """The same two measurements, each launch timed as it comes (the events
    also time the host launching it) and queued behind a spin kernel."""
    for turn in range(turns):
        for queued in (False, True):
            rates(f"turn {turn} {'queued' if queued else 'as it comes'}", queued)


def main():
    if "--queued" in sys.argv:
        return queued_or_not()
    rates("fresh")
    rates("fresh again")
    R.suite_launch(False)
    rates("after the launch suite")
    R.suite_graph(False)
    rates("after the graph suite")
    R.suite_bump_vs_atomic(False)
    rates("after bump_vs_atomic")
    allocation_rate("device_malloc", 10_000, 1, 16, reps=3)
    rates("after device malloc")
    for allocator in ("bump", "naive_bump", "warp_aggregated", "hand_slab"):
        allocation_rate(allocator, 100_000, 64, MIXED, reps=7)
    rates("after the mixed baselines")


if __name__ == "__main__":
    main()
