"""Kernels and checks shared by the test modules."""

import itertools
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
from numba import cuda

import devalloc

STRATEGIES = list(devalloc.STRATEGIES)
NO_CALL = -1  # in a request table: this lane makes no more calls
GRANULE = 16


def poisoned(shape, dtype):
    """An output array filled with a value no correct kernel writes (never zero)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.kind == "c":
        value = np.nan
    elif dtype.kind == "b":
        value = True
    else:
        value = np.iinfo(dtype).min + 0x5A if dtype.kind == "i" else np.iinfo(dtype).max - 0x5A
    return np.full(shape, value, dtype)


def pattern(lane, call):
    return (lane * 7 + call * 13 + 1) & 0xFF


@devalloc.kernel
def record_allocs(arena, requests, offsets, lengths):
    """Lane t makes requests[t, j] byte allocations in turn (stopping at NO_CALL),
    fills each with a pattern, and records its offset and length."""
    t = cuda.grid(1)
    if t < requests.shape[0]:
        for j in range(requests.shape[1]):
            n = requests[t, j]
            if n == NO_CALL:
                break
            buf = arena.alloc(n, np.uint8)
            lengths[t, j] = buf.size
            offsets[t, j] = arena.offset(buf)
            for b in range(buf.size):
                buf[b] = (t * 7 + j * 13 + 1) & 0xFF


def run_requests(arena, requests, threads=64):
    """Launch `record_allocs` over a request table; returns (offsets, lengths)."""
    requests = np.ascontiguousarray(requests, dtype=np.int64)
    offsets = poisoned(requests.shape, np.int64)
    lengths = poisoned(requests.shape, np.int64)
    blocks = -(-requests.shape[0] // threads)
    d_offsets, d_lengths = cuda.to_device(offsets), cuda.to_device(lengths)
    record_allocs[blocks, threads](arena, cuda.to_device(requests), d_offsets, d_lengths)
    return d_offsets.copy_to_host(), d_lengths.copy_to_host()


def arena_bytes(arena):
    return arena.device_view(0, arena.capacity, np.uint8).copy_to_host()


def check_allocations(arena, requests, offsets, lengths, *, all_succeed=True):
    """Every allocation inside the arena, aligned, disjoint from all others, and
    holding what its lane wrote. Returns the number that succeeded."""
    align = arena.align
    memory = arena_bytes(arena)
    spans = []
    for (lane, call), n in np.ndenumerate(requests):
        if (requests[lane, : call + 1] == NO_CALL).any():
            continue  # this lane stopped calling
        got = int(lengths[lane, call])
        if n <= 0 or got == 0:
            assert got == 0, f"lane {lane} call {call}: asked {n} bytes, got {got}"
            assert not (all_succeed and n > 0), f"lane {lane} call {call}: {n} bytes failed"
            continue
        assert got == n, f"lane {lane} call {call}: asked {n} bytes, got {got}"
        start = int(offsets[lane, call])
        assert 0 <= start and start + n <= arena.capacity, (lane, call, start, n)
        need = align if n >= align else GRANULE
        assert start % need == 0, f"{n}-byte allocation at offset {start} is not {need}-aligned"
        assert (memory[start : start + n] == pattern(lane, call)).all(), (lane, call, start)
        spans.append((start, start + n))
    spans.sort()
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, f"allocations overlap: one ends at {end}, the next starts at {start}"
    return len(spans)


ROOT = Path(__file__).resolve().parent.parent


def env_with_root(**extra):
    """The environment for a child Python that imports devalloc from this checkout."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, **{"PYTHONPATH": path, **extra})


def run_script(script, *args, timeout=600, **env):
    """Run `script` (a path) with `args` as a user would, from the repository root
    (`env`: variables set or replaced for it)."""
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=ROOT, env=env_with_root(**env), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def run_script_or_dump(script, *args, timeout):
    """`run_script`, but a run still going after `timeout` seconds is stopped
    with SIGABRT, which makes Python's faulthandler print every thread's stack:
    returns ``(None, that dump)`` then, else ``(the finished run, "")``."""
    process = subprocess.Popen(
        [sys.executable, str(script), *args], cwd=ROOT,
        env=env_with_root(PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        stdout, stderr = process.communicate()
        return None, stdout[-2000:] + stderr[-12000:]
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), ""


def compile_all(module, cc=(9, 0)):
    """PTX of every kernel a module lists in PTX_SIGNATURES ({(name, strategy): ptx};
    a `@devalloc.kernel` once per strategy, a plain kernel once with None)."""
    from devalloc.numba_compat import compiling_for

    ptx = {}
    for name, argtypes in module.PTX_SIGNATURES.items():
        kernel = getattr(module, name)
        if isinstance(kernel, devalloc.Kernel):
            for strategy in devalloc.STRATEGIES:
                ptx[name, strategy] = kernel.ptx(*argtypes, strategy=strategy, cc=cc)
        else:
            with compiling_for(cc):
                ptx[name, None], _ = cuda.compile_ptx(kernel.py_func, argtypes, cc=cc)
    return ptx


def run_threads(count, work):
    """`work(i)` in `count` host threads at once; their errors fail the test."""
    errors = []

    def guarded(i):
        try:
            work(i)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors[:3]
