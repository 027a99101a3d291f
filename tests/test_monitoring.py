"""Monitoring: allocation counts per frame and per kernel (`ArenaStats`), and the
process's arenas at a glance (`devalloc.stats()`)."""

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc.arena import OTHER_KERNELS


def counting_kernel(name, per_thread):
    """A kernel named `name` whose threads each make `per_thread` 16-byte allocations."""

    def kernel(arena, out):
        t = cuda.grid(1)
        made = 0
        for _ in range(per_thread):
            made += arena.alloc(16, np.uint8).size // 16
        out[t] = made

    kernel.__name__ = kernel.__qualname__ = name
    return devalloc.kernel(kernel)


one = counting_kernel("one", 1)
three = counting_kernel("three", 3)


@pytest.fixture
def out():
    return cuda.to_device(np.full(64, -1, np.int64))


def test_allocations_are_counted_per_kernel_wherever_they_run(arena, out):
    one[2, 32](arena, out)  # outside a frame
    with arena.frame():
        one[1, 32](arena, out)
        three[1, 32](arena, out)
        assert arena.stats().current_allocs == 32 + 96  # the frame so far
    with arena.capture() as graph:
        three[2, 32](arena, out)
    for _ in range(2):
        graph.replay()
    stats = arena.stats()
    assert stats.allocs_by_kernel == {"one": 64 + 32, "three": 96 + 2 * 192}
    assert sum(stats.allocs_by_kernel.values()) == stats.total_allocs
    assert stats.frames == 3  # one frame, two replays


def test_counts_per_kernel_survive_a_resize(arena, out):
    three[1, 32](arena, out)
    arena.resize(1 << 17)
    one[1, 32](arena, out)
    assert arena.stats().allocs_by_kernel == {"three": 96, "one": 32}


def test_kernels_past_the_first_31_are_counted_together(out):
    kernels = [counting_kernel(f"k{i}", 1) for i in range(34)]
    with devalloc.Arena(1 << 16) as arena:
        for kernel in kernels:
            kernel[1, 32](arena, out)
        counts = arena.stats().allocs_by_kernel
    assert [counts[f"k{i}"] for i in range(31)] == [32] * 31
    assert counts[OTHER_KERNELS] == 3 * 32 and len(counts) == 32


def test_process_stats_count_arenas_memory_and_cudamallocs():
    before = devalloc.stats()
    first = devalloc.Arena(1 << 16)
    second = devalloc.Arena(1 << 20)
    during = devalloc.stats()
    assert during.arenas == before.arenas + 2
    assert during.reserved_bytes >= before.reserved_bytes + (1 << 16) + (1 << 20)
    assert during.device_mallocs == before.device_mallocs + 2
    second.resize(1 << 21)
    after_resize = devalloc.stats()
    assert after_resize.device_mallocs == before.device_mallocs + 3
    assert after_resize.reserved_bytes >= during.reserved_bytes + (1 << 20)
    assert after_resize.peak_reserved_bytes >= after_resize.reserved_bytes + (1 << 20)  # both
    first.close()
    second.close()
    after = devalloc.stats()
    assert (after.arenas, after.reserved_bytes) == (before.arenas, before.reserved_bytes)
    assert after.device_mallocs == before.device_mallocs + 3
