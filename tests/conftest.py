"""Test configuration: which world the tests run in, and shared fixtures.

Without a GPU (developer machines, CI) the tests run on Numba's CUDA simulator,
and the PTX checks (marker ``ptx``) run in a second process with the real
compiler, which needs no GPU. With a GPU, everything runs for real and the
``gpu`` tests run too.
"""

import ctypes
import os
import zlib

from kernels.world import simulate_without_gpu

simulate_without_gpu()
if os.environ.get("DEVALLOC_TEST_NVVM"):
    # Compile with this libnvvm rather than the one Numba would find first (the
    # PTX suite runs once per libnvvm on the machine: see test_ptx_suite).
    ctypes.CDLL(os.environ["DEVALLOC_TEST_NVVM"], mode=ctypes.RTLD_GLOBAL)
# Tests launch deliberately tiny grids; Numba would warn that they under-use the GPU.
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import Phase, settings  # noqa: E402
from numba import cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc.backend import SIMULATOR  # noqa: E402

# `--hypothesis-profile=report` on the GPU: find and report failures, without the
# minutes of relaunching that shrinking them takes.
settings.register_profile("report", phases=[Phase.explicit, Phase.reuse, Phase.generate])


def pytest_collection_modifyitems(config, items):
    gpu_ok = not SIMULATOR and cuda.is_available()
    skip_gpu = pytest.mark.skip(reason="needs a real CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not gpu_ok:
            item.add_marker(skip_gpu)
    if SIMULATOR:
        # The PTX checks need the real compiler: test_ptx_suite runs them in a
        # process of their own and fails if any of them does. Here they are
        # deselected, not skipped, since they do run.
        in_other_process = [item for item in items if "ptx" in item.keywords]
        items[:] = [item for item in items if "ptx" not in item.keywords]
        config.hook.pytest_deselected(items=in_other_process)


@pytest.fixture
def arena():
    with devalloc.Arena(1 << 16) as arena:
        yield arena


@pytest.fixture
def rng(request):
    # A fresh, reproducible stream per test.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
