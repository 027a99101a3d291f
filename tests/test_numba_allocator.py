"""`devalloc.allocators.numba`, Numba's memory manager over a cudaMallocAsync pool.

A memory manager is chosen once per process, before its first CUDA call, so
every check runs in a fresh process (tests/numba_allocator_checks.py says what
each does): on the GPU (marker ``gpu``), against a stand-in for the CUDA driver
(no GPU needed), and on the simulator.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MANAGER = "devalloc.allocators.numba"


def run_check(name, *, simulator=False, manager=MANAGER):
    """Run ``numba_allocator_checks.<name>()`` in a new process; returns it done."""
    path = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH")) if p
    )
    env = dict(os.environ, PYTHONPATH=path, NUMBA_ENABLE_CUDASIM="1" if simulator else "0")
    env.pop("NUMBA_CUDA_MEMORY_MANAGER", None)
    if manager:
        env["NUMBA_CUDA_MEMORY_MANAGER"] = manager
    env.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")  # tiny test grids
    code = f"import numba_allocator_checks as checks; checks.{name}()"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def assert_passes(name, **options):
    done = run_check(name, **options)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    [
        "gpu_round_trip",
        "gpu_many_arrays",
        "gpu_deferred_cleanup",
        "gpu_kernel_on_pool_arrays",
        "gpu_zero_bytes",
        "gpu_huge_request",
        "gpu_streams",
        "gpu_memory_info",
        "gpu_close_with_live_arrays",
    ],
)
def test_on_the_gpu(name):
    assert_passes(name)


@pytest.mark.gpu
def test_exit_with_live_arrays_is_clean():
    done = assert_passes("gpu_shutdown_with_live_arrays")
    assert done.stderr == "" and done.stdout == ""


@pytest.mark.gpu
def test_chosen_by_the_program():
    assert_passes("gpu_set_in_program", manager=None)


@pytest.mark.gpu
def test_stats_say_when_the_manager_is_not_in_use():
    assert_passes("gpu_default_manager_has_no_stats", manager=None)


@pytest.mark.parametrize(
    "name",
    [
        "standin_pool_setup",
        "standin_counts",
        "standin_deferred",
        "standin_frees_in_its_own_context",
        "standin_allocation_errors",
        "standin_reset_retires_the_pool",
        "standin_exit_closes_every_pool",
        "standin_chosen_without_a_gpu",
    ],
)
def test_bookkeeping_with_a_stand_in_driver(name):
    # Without a GPU the driver is never loaded: these also show that importing
    # and choosing the manager touch no CUDA.
    done = assert_passes(name)
    assert done.stderr == ""


def test_the_simulator_refuses_clearly():
    assert_passes("simulator_refuses", simulator=True)
