"""Every library and example kernel compiles for the H200 (sm_90), with no GPU; and
the allocator's fast path, read off the PTX, takes no global atomic.

These tests need the real Numba compiler, not the simulator. In a simulator run,
`test_ptx_suite` runs them in a second process."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, types

import devalloc
from devalloc.device_memory import SIMULATOR
from ptx_cfg import Cfg

ROOT = Path(__file__).resolve().parent.parent
CC = (9, 0)


@pytest.mark.skipif(not SIMULATOR, reason="runs directly outside the simulator")
def test_ptx_suite():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "ptx", "-p", "no:cacheprovider", __file__],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout.split("\n")[-2]


def compile_all(module):
    """PTX of every kernel a `kernels` module lists in PTX_SIGNATURES."""
    from devalloc.launch import compiling_for

    ptx = {}
    for name, argtypes in module.PTX_SIGNATURES.items():
        kernel = getattr(module, name)
        if isinstance(kernel, devalloc.Kernel):
            for strategy in devalloc.STRATEGIES:
                ptx[name, strategy] = kernel.ptx(*argtypes, strategy=strategy, cc=CC)
        else:
            with compiling_for(CC):
                ptx[name, None], _ = cuda.compile_ptx(kernel.py_func, argtypes, cc=CC)
    return ptx


@pytest.mark.ptx
@pytest.mark.parametrize("module_name", ["kernels.bench", "kernels.image"])
def test_every_kernel_compiles_for_sm90(module_name):
    import importlib

    module = importlib.import_module(module_name)
    compiled = compile_all(module)
    assert len(compiled) >= len(module.PTX_SIGNATURES)
    for key, ptx in compiled.items():
        assert ".target sm_90" in ptx, key
        assert ".entry" in ptx, key


@pytest.mark.ptx
def test_library_examples_from_the_design_compile():
    @devalloc.kernel
    def smooth(arena, img, out):
        y = cuda.grid(1)
        if y < img.shape[0]:
            row = arena.alloc(img.shape[1], np.float32)
            tile = arena.alloc((4, 8), np.int32)
            if row.size == 0:
                return
            same = arena.view(arena.offset(row), img.shape[1], np.float32)
            for x in range(img.shape[1]):
                row[x] = img[y, x]
            out[y] = same[0] + tile.size

    for strategy in devalloc.STRATEGIES:
        for align in (16, 256, 4096):
            ptx = smooth.ptx(
                types.float32[:, :], types.float32[:], strategy=strategy, align=align, cc=CC
            )
            assert ".target sm_90" in ptx


@pytest.mark.ptx
def test_bad_dtype_is_a_typing_error_naming_what_arrived():
    @devalloc.kernel
    def bad(arena, out):
        out[0] = arena.alloc(4, out).size

    with pytest.raises(Exception, match="dtype must be a NumPy number or bool type"):
        bad.ptx(types.float32[:], cc=CC)


@pytest.fixture(scope="module")
def one_alloc_cfg():
    @devalloc.kernel
    def one(arena, n, out):
        buf = arena.alloc(n, np.uint8)
        out[cuda.grid(1)] = arena.offset(buf)

    return Cfg(one.ptx(types.int64, types.int64[::1], cc=CC))


@pytest.mark.ptx
def test_slab_hit_takes_no_global_atomic(one_alloc_cfg):
    cfg = one_alloc_cfg
    start = cfg.find("activemask")  # the allocation begins
    end = cfg.find("atom.shared.add")  # the group's leader counts what it got
    # A path through the CAS on the warp's slab word: a lane whose group got its
    # chunk from the slab.
    hits = cfg.path_counts(
        start, end, "atom.global", avoid=["membar.sys"], through="atom.shared.cas"
    )
    assert min(hits) == 0, hits


@pytest.mark.ptx
def test_warp_slab_refill_takes_at_most_one_global_atomic(one_alloc_cfg):
    cfg = one_alloc_cfg
    load = cfg.find("ld.shared.u64", after=cfg.find("activemask"))  # the warp's slab word
    installs = [i for i in range(load, len(cfg.blocks)) if cfg.count(i, "atom.shared.exch")]
    assert installs  # a dry slab is replaced
    counts = set()
    for install in installs:
        counts |= cfg.path_counts(load, install, "atom.global")
    # None when the block's slab has room; one when that too is dry.
    assert counts == {0, 1}, counts


@pytest.mark.ptx
def test_global_atomics_outside_failure_reports_only_take_from_the_cursor(one_alloc_cfg):
    cfg = one_alloc_cfg
    start, end = cfg.find("activemask"), cfg.find("atom.shared.add")
    rare = [  # block refills, chunks larger than a block slab, requests larger than a slab
        line
        for i in range(start, end + 1)
        if not cfg.count(i, "membar.sys")
        for line in cfg.blocks[i]
        if "atom.global" in line or "red.global" in line
    ]
    assert 1 <= len(rare) <= 4, rare
    assert all(line.startswith("atom.global.add.u64") for line in rare), rare
