"""benchmarks/host_pools.py runs as a user would run it, in a subprocess with few
units (on the simulator without a GPU): both workloads, the JSON they write, and
the errors for bad input."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from devalloc.backend import SIMULATOR
from helpers import run_script

ROOT = Path(__file__).resolve().parent.parent
HOST_POOLS = ROOT / "benchmarks" / "host_pools.py"


def host_pools(*args, timeout=600):
    return run_script(HOST_POOLS, *args, timeout=timeout)


@pytest.fixture(scope="module")
def module():
    spec = importlib.util.spec_from_file_location("host_pools", HOST_POOLS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_spread(cell):
    assert math.isfinite(cell["median_us"]) and cell["median_us"] > 0, cell
    assert 0 < cell["p10_us"] <= cell["median_us"] <= cell["p90_us"], cell


def test_sizes_workload(tmp_path):
    out = tmp_path / "x.json"
    rows = ["devalloc-frame", "devalloc-kernel", "cuda-malloc"]
    result = host_pools(
        "--workload", "sizes", "--sizes", "4KiB", "64KiB", "--frames", "5", "--warmup", "1",
        "--rows", *rows, "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["workload"] == "sizes" and data["sizes"] == [4096, 65536]
    assert data["frames"] == 5 and data["warmup"] == 1 and data["budget_s"] > 0
    assert "rmm" in data["environment"]["packages"]
    results = {r["row"]: r for r in data["results"]}
    assert list(results) == rows
    for name in rows if not SIMULATOR else rows[:2]:
        cells = results[name]["sizes"]
        assert [c["bytes"] for c in cells] == [4096, 65536]
        assert [c["reps"] for c in cells] == [5, 5]
        for cell in cells:
            assert_spread(cell)
    if SIMULATOR:  # cudaMalloc needs a real GPU
        assert results["cuda-malloc"]["skipped"], results["cuda-malloc"]
        assert "sizes" not in results["cuda-malloc"]
    # Both devalloc rows really took the memory from their arena: 6 units a size
    # (5 timed, 1 warm-up), and none failed.
    frame_arena = results["devalloc-frame"]["arena"]
    assert frame_arena["peak_frame_array_bytes"] >= 65536
    assert frame_arena["frames"] >= 12
    kernel_arena = results["devalloc-kernel"]["arena"]
    assert kernel_arena["total_allocs"] == 12 and kernel_arena["launches"] == 12
    assert kernel_arena["peak_requested_bytes"] >= 65536 and kernel_arena["peak_bytes"] >= 65536
    assert kernel_arena["failed_allocs"] == 0 and kernel_arena["current_bytes"] == 0
    # The table (rows x sizes) and the plot.
    assert "4KiB" in result.stdout and "64KiB" in result.stdout
    assert "devalloc-kernel" in result.stdout and "the allocation happens on the GPU" in (
        result.stdout
    )
    assert out.with_suffix(".png").stat().st_size > 0


def test_frame_workload_writes_its_usual_keys(tmp_path, module):
    out = tmp_path / "frame.json"
    rows = ["numba-default", "devalloc-frame", "devalloc-kernel"]
    result = host_pools(
        "--frames", "2", "--warmup", "0", "--rows", *rows, "--out", str(out)
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = json.loads(out.read_text())
    for key in ("environment", "frame", "frame_bytes", "frames", "warmup", "results"):
        assert key in data, key
    assert "sizes" not in data
    assert len(data["frame"]) == 13 and data["frame_bytes"] == module.FRAME_BYTES
    assert (data["frames"], data["warmup"]) == (2, 0)
    results = {r["row"]: r for r in data["results"]}
    assert list(results) == rows
    for r in results.values():
        assert r["frames"] == 2
        assert_spread(r)
        assert r["mean_us"] > 0
    # One launch a frame allocates the 13 arrays on the device.
    kernel_arena = results["devalloc-kernel"]["arena"]
    assert kernel_arena["total_allocs"] == 2 * 13 and kernel_arena["failed_allocs"] == 0
    assert kernel_arena["peak_requested_bytes"] >= module.FRAME_BYTES
    assert results["devalloc-frame"]["arena"]["peak_frame_array_bytes"] >= module.FRAME_BYTES
    assert "vs numba-default" in result.stdout
    assert out.with_suffix(".png").stat().st_size > 0


def test_the_floor_row_costs_less_than_numbas_own_manager(tmp_path):
    """`numba-floor` (Numba's device arrays over one block, no CUDA call) is the
    bound any memory manager plugged into Numba has; it has no simulator."""
    out = tmp_path / "floor.json"
    rows = ["numba-floor", "numba-default"]
    result = host_pools("--frames", "5", "--warmup", "1", "--rows", *rows, "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = {r["row"]: r for r in json.loads(out.read_text())["results"]}
    if SIMULATOR:
        assert "no GPU" in results["numba-floor"]["skipped"], results["numba-floor"]
        return
    floor, default = results["numba-floor"], results["numba-default"]
    assert_spread(floor)
    assert floor["median_us"] < default["median_us"], (floor, default)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--sizes=-4KiB"], "expected a positive size"),
        (["--sizes", "abc"], "expected a positive size"),
        (["--sizes", "4KiB", "0"], "expected a positive size"),
        (["--sizes", "4QB"], "expected a positive size"),
        (["--sizes", "-4KiB"], "--sizes"),  # (argparse takes it for an option)
        (["--budget", "0"], "--budget"),
    ],
)
def test_bad_input_exits_with_a_message(args, says):
    result = host_pools("--workload", "sizes", *args, "--rows", "devalloc-frame", timeout=120)
    assert result.returncode != 0
    assert says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_sizes_are_for_the_sizes_workload():
    result = host_pools("--sizes", "4KiB", "--rows", "devalloc-frame", timeout=120)
    assert result.returncode != 0 and "--workload sizes" in result.stderr, result.stderr


def test_sizes_read_with_units(module):
    parse, label = module.parse_size, module.size_label
    assert [parse(s) for s in ("4096", "4KiB", "4 kib", "1MiB", "100MiB", "1GiB")] == [
        4096, 4096, 4096, 1 << 20, 100 << 20, 1 << 30,
    ]  # fmt: skip
    assert [parse(s) for s in ("1B", "1kB", "1MB", "2GB")] == [1, 1000, 10**6, 2 * 10**9]
    for size in (1, 1000, 4096, 65536, 100 << 20, 1 << 30, (1 << 30) + 1):
        assert parse(label(size)) == size
    assert [label(s) for s in (4096, 100 << 20, 1 << 30, 1000)] == [
        "4KiB", "100MiB", "1GiB", "1000B",
    ]  # fmt: skip
