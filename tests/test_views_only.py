"""Kernels that only view arena memory get the lean wrapper (`launch.may_allocate`):
which functions count as allocating, and that a views-only launch behaves as any
other: it reads what a frame's earlier launch wrote, resets the arena outside a
frame and counts in its statistics alike, is refused after an overflow, and is
captured and replayed."""

import dataclasses

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc.launch import may_allocate
from helpers import STRATEGIES, poisoned

WORDS = 4


@devalloc.kernel
def fill(arena, n, table):
    """Thread t allocates WORDS int32s, writes t * WORDS + i + 1 into them and
    records their offset."""
    t = cuda.grid(1)
    if t < n:
        words = arena.alloc(WORDS, np.int32)
        table[t] = arena.offset(words)
        for i in range(words.size):
            words[i] = t * WORDS + i + 1


@devalloc.kernel
def read_back(arena, table, sums):
    """Views only: sums[t] is the sum of thread t's words (0 for a refused view);
    t counts the threads of a 2-D grid too."""
    x, y = cuda.grid(2)
    t = y * cuda.gridDim.x * cuda.blockDim.x + x
    if t < table.shape[0]:
        words = arena.view(table[t], WORDS, np.int32)
        total = 0
        for i in range(words.size):
            total += words[i]
        sums[t] = total + (arena.offset(words) - table[t])  # (a kept view: at its offset)


@devalloc.kernel
def read_back_full(arena, table, sums):
    """`read_back`, given the full wrapper by an allocation it never makes."""
    t = cuda.grid(1)
    if t < 0:
        arena.alloc(1, np.int8)
    if t < table.shape[0]:
        words = arena.view(table[t], WORDS, np.int32)
        total = 0
        for i in range(words.size):
            total += words[i]
        sums[t] = total + (arena.offset(words) - table[t])


def expected_sums(n):
    t = np.arange(n)
    return WORDS * WORDS * t + WORDS * (WORDS + 1) // 2


# -- which functions count as allocating ------------------------------------------------


def _helper(arena, n):
    return n


def views(arena, t):
    return arena.offset(arena.view(t[0], 3, np.int32))


def allocates(arena, n):
    return arena.alloc(n, np.int32)


def passes_it_on(arena, n):
    return _helper(arena, n)  # the helper might allocate


def rebinds(arena, n):
    arena = n
    return arena


def another_attribute(arena, n):
    return arena._data + n


def keeps_it(arena, t):
    kept = arena
    return kept.view(t[0], 3, np.int32)


def captures(arena, t):
    def inner():
        return arena.view(t[0], 3, np.int32)

    return inner()


def never_uses_it(arena, out):
    out[0] = 1


@pytest.mark.parametrize(
    "func, expected",
    [
        (views, False),
        (never_uses_it, False),
        (allocates, True),
        (passes_it_on, True),
        (rebinds, True),
        (another_attribute, True),
        (keeps_it, True),
        (captures, True),
    ],
)
def test_only_views_and_offsets_count_as_not_allocating(func, expected):
    assert may_allocate(func) is expected


def test_a_callable_without_bytecode_counts_as_allocating():
    assert may_allocate(len) is True and may_allocate(np.add) is True


def test_the_kernels_get_the_wrapper_their_code_needs():
    assert (fill.allocates, read_back.allocates, read_back_full.allocates) == (True, False, True)
    assert "enter_views" in _wrapper_text(read_back)
    assert "leave_block" in _wrapper_text(read_back_full)


def _wrapper_text(kernel):
    """The globals the generated wrapper calls (its source is exec'd: no file)."""
    return " ".join(kernel.wrapper_source().__code__.co_names)


# -- a views-only launch behaves as any other --------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_views_only_kernel_reads_what_the_frame_wrote(strategy):
    n = 200
    table = cuda.to_device(poisoned(n, np.int64))
    sums = cuda.to_device(poisoned(n, np.int64))
    with devalloc.Arena(1 << 16, strategy=strategy) as arena:
        with arena.frame():
            fill[4, 64](arena, n, table)
            read_back[(2, 2), (32, 2)](arena, table, sums)
    np.testing.assert_array_equal(sums.copy_to_host(), expected_sums(n))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_outside_a_frame_it_resets_and_counts_as_the_full_wrapper_does(strategy):
    n = 96
    seen = []
    for reader in (read_back, read_back_full):
        table = cuda.to_device(poisoned(n, np.int64))
        sums = cuda.to_device(poisoned(n, np.int64))
        with devalloc.Arena(1 << 16, strategy=strategy) as arena:
            fill[3, 32](arena, n, table)
            reader[3, 32](arena, table, sums)  # the arena it starts with is empty
            fill[3, 32](arena, n, table)  # from the slot the reader's launch emptied
            stats = arena.stats()
        assert (stats.launches, stats.resets, stats.total_allocs) == (3, 3, 2 * n)
        assert stats.current_bytes == 0 and stats.peak_bytes >= n * WORDS * 4
        assert stats.allocs_by_kernel == {"fill": 2 * n, reader.__name__: 0}
        seen.append(dataclasses.replace(stats, allocs_by_kernel=None))
    assert seen[0] == seen[1]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_after_an_overflow_a_views_only_launch_is_refused(strategy):
    n = 64
    table = cuda.to_device(poisoned(n, np.int64))
    sums = cuda.to_device(poisoned(n, np.int64))
    with devalloc.Arena(256, strategy=strategy) as arena:  # room for 16 of the 64
        fill[2, 32](arena, n, table)
        cuda.synchronize()
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            read_back[2, 32](arena, table, sums)
        assert info.value.kernel.endswith("fill") and info.value.not_launched.endswith("read_back")
    assert (sums.copy_to_host() == poisoned(n, np.int64)).all()  # it did not run


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_views_only_kernel_is_captured_and_replayed(strategy):
    n = 128
    table = cuda.to_device(poisoned(n, np.int64))
    sums = cuda.device_array(n, np.int64)
    with devalloc.Arena(1 << 16, strategy=strategy) as arena:
        fill[4, 32](arena, n, table)  # every kernel loaded before the capture
        read_back[4, 32](arena, table, sums)
        with arena.capture() as graph:
            fill[4, 32](arena, n, table)
            read_back[4, 32](arena, table, sums)
        for _ in range(3):
            sums.copy_to_device(poisoned(n, np.int64))
            graph.replay()
            np.testing.assert_array_equal(sums.copy_to_host(), expected_sums(n))
        assert arena.stats().total_allocs == 4 * n


# -- on the GPU: what the lean wrapper leaves out -----------------------------------------


@pytest.mark.ptx
def test_a_views_only_wrapper_has_no_barrier_and_no_atomic():
    from numba import types

    signature = (types.int64[::1], types.int64[::1])
    lean, full = (k.ptx(*signature) for k in (read_back, read_back_full))
    assert "bar.sync" in full and "atom" in full  # (what the test would miss)
    assert "bar.sync" not in lean and "atom" not in lean and "red." not in lean
    named = read_first.ptx(types.int64[::1], types.int32[::1])  # its names: none captured
    assert "bar.sync" not in named and "atom" not in named


@devalloc.kernel
def read_first(_devalloc_arena, _devalloc_hdr, _devalloc_state):
    """Views only, with parameters named like the wrapper's own variables."""
    if cuda.grid(1) == 0:
        _devalloc_state[0] = _devalloc_arena.view(_devalloc_hdr[0], WORDS, np.int32)[0]


def test_parameters_named_like_the_lean_wrappers_variables_work():
    table = cuda.to_device(poisoned(1, np.int64))
    first = cuda.to_device(poisoned(1, np.int32))
    with devalloc.Arena(1 << 16) as arena:
        with arena.frame():
            fill[1, 32](arena, 1, table)
            read_first[1, 32](arena, table, first)
    assert not read_first.allocates and first.copy_to_host()[0] == 1
