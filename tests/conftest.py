"""Test configuration: which world the tests run in, and shared fixtures.

Without a GPU (developer machines, CI) the tests run on Numba's CUDA simulator,
and the PTX checks (marker ``ptx``) run in a second process with the real
compiler, which needs no GPU. With a GPU, everything runs for real and the
``gpu`` tests run too.
"""

import os
import zlib

from kernels.world import simulate_without_gpu

simulate_without_gpu()
# Tests launch deliberately tiny grids; Numba would warn that they under-use the GPU.
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numba import cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc.device_memory import SIMULATOR  # noqa: E402


def pytest_collection_modifyitems(config, items):
    gpu_ok = not SIMULATOR and cuda.is_available()
    skip_gpu = pytest.mark.skip(reason="needs a real CUDA GPU")
    skip_ptx = pytest.mark.skip(reason="PTX checks run in their own process (test_ptx_suite)")
    for item in items:
        if "gpu" in item.keywords and not gpu_ok:
            item.add_marker(skip_gpu)
        if "ptx" in item.keywords and SIMULATOR:
            item.add_marker(skip_ptx)


@pytest.fixture
def arena():
    with devalloc.Arena(1 << 16) as arena:
        yield arena


@pytest.fixture
def rng(request):
    # A fresh, reproducible stream per test.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
