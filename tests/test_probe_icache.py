"""benchmarks/probe_icache.py: its kernels do the plain kernel's work (threads 0
and 1 each add 1 to out[0]) and never run the code they carry, wherever it is."""

import sys

import numpy as np
from numba import cuda

from helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import probe_icache


def test_every_probe_kernel_does_the_plain_work_and_skips_its_dead_code():
    found = probe_icache.kernels()
    assert next(iter(found)) == "plain" and len(found) == 1 + 2 * len(probe_icache.DEAD_CALLS)
    for name, func in found.items():
        out = cuda.to_device(np.array([40], np.int64))  # (dead code would write int(x) here)
        cuda.jit(func)[2, 32](out)
        assert out.copy_to_host()[0] == 42, name


def test_the_dead_code_is_there_and_grows_with_its_size():
    small = probe_icache.dead_code(probe_icache.DEAD_CALLS["small"])
    large = probe_icache.dead_code(probe_icache.DEAD_CALLS["large"])
    assert len(large) > 4 * len(small) > 0
    assert len(set(large)) == len(large)  # distinct calls: nothing for the compiler to merge
