"""pytest-benchmark suite: the allocators side by side, on a real GPU.

    pytest benchmarks/ --benchmark-enable            # see README; skipped without a GPU

Each case times one launch plus a synchronize (host wall time, as
pytest-benchmark measures); `run.py` gives the device-time figures of the
results files. Targets are asserted against the baseline measured in the same
session.
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from numba import cuda

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or not cuda.is_available():
    pytest.skip("benchmarks need a real CUDA GPU", allow_module_level=True)

import devalloc
import measure as M
from measure import K

THREADS = 100_000
CASES = [("16B", 16, 64), ("mixed", M.MIXED, 16)]


def synchronized(run):
    def once():
        run()
        cuda.synchronize()

    return once


# The gate compares these with the last accepted run: devalloc's cases and the
# baselines the targets are judged against (the other baselines are run.py's).
@pytest.mark.parametrize("allocator", ["warp_slab", "bump", "naive_bump", "device_malloc"])
@pytest.mark.parametrize("name, size, iters", CASES, ids=[c[0] for c in CASES])
def test_sustained(benchmark, allocator, name, size, iters):
    iters = 1 if allocator == "device_malloc" else iters
    run = M.launcher(allocator, THREADS, iters, size)
    try:
        benchmark.pedantic(synchronized(run), rounds=5 if allocator == "device_malloc" else 100)
    finally:
        run.close()
    benchmark.extra_info["allocations"] = THREADS * iters
    allocs_per_s = THREADS * iters / benchmark.stats.stats.median
    benchmark.extra_info["allocs_per_s_wall"] = allocs_per_s


def test_launch_overhead(benchmark):
    """Host time of one @devalloc.kernel launch, against the same plain kernel
    with one more int64 argument, in turns (see `measure.launch_overhead_us`)."""
    out = cuda.to_device(np.zeros(1, np.int64))
    with devalloc.Arena(1 << 20) as arena:
        benchmark.pedantic(lambda: K.launch_only[1, 32](arena, out), rounds=3000, warmup_rounds=100)
        arena.check()
    rows = M.launch_overhead_us(launches=500, pairs=9)
    benchmark.extra_info.update(rows=rows)
    for row in rows:
        assert row["over_plain_us"] <= 3.0, row
        assert row["over_plain_with_scalar_us"] <= 1.0, row


@pytest.mark.xfail(
    strict=False,
    reason="issue 8's single-shot target, not met: at 1 M threads the allocator written by "
    "hand for this kernel is itself 2.4x preallocated (H100, 2026-12-06; README)",
)
def test_single_shot_against_preallocated(benchmark):
    """One 16 B allocation per thread, a million threads; device times compared."""
    blocks, block = M.grid(1 << 20)
    out = cuda.device_array(1 << 20, np.int64)
    with devalloc.Arena(256 << 20) as arena:
        benchmark.pedantic(synchronized(lambda: K.single_shot[blocks, block](arena, out)),
                           rounds=20, warmup_rounds=2)  # fmt: skip
    devalloc_ms, pre_ms, hand_ms = M.single_shot_ms(1 << 20)
    benchmark.extra_info.update(devalloc_ms=devalloc_ms, preallocated_ms=pre_ms, by_hand_ms=hand_ms)
    assert devalloc_ms <= 1.2 * pre_ms


@pytest.mark.parametrize("strategy", devalloc.STRATEGIES)
@pytest.mark.parametrize("size", [16, 256, 8192])
def test_usable_fraction(size, strategy):
    """A memory target, not a timing: no benchmark fixture, so the gate does not
    compare the time it takes to fill a GiB."""
    assert M.usable_fraction(size, strategy) >= 0.98


def test_warp_slab_beats_device_malloc(benchmark):
    """The warp_slab launch is what the benchmark times; both rates come from
    device times (CUDA events) in this session."""
    run = M.launcher("warp_slab", THREADS, 64, 16)
    try:
        benchmark.pedantic(synchronized(run), rounds=20, warmup_rounds=2)
        slab = THREADS * 64 / (M.device_ms(run) / 1e3)
    finally:
        run.close()
    malloc = M.allocation_rate("device_malloc", THREADS, 1, 16, reps=3)["allocs_per_s"]
    benchmark.extra_info.update(warp_slab=slab, device_malloc=malloc)
    assert slab >= 1e4 * malloc
