"""An arena that sizes itself (`Arena.run`, `Sizing`) and one that moves (`Arena.resize`)."""

import itertools

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc.sizing import SIZE_STEP
from helpers import poisoned


@devalloc.kernel
def take_and_sum(arena, nbytes, out):
    """Thread t allocates nbytes[0] bytes, fills them with t + i and writes their sum."""
    t = cuda.grid(1)
    buf = arena.alloc(nbytes[0], np.uint8)
    total = -1
    if buf.size == nbytes[0]:
        total = 0
        for i in range(buf.size):
            buf[i] = (t + i) & 0xFF
        for i in range(buf.size):
            total += np.int64(buf[i])
    out[t] = total


def expected_sums(threads, nbytes):
    return np.array([sum((t + i) & 0xFF for i in range(nbytes)) for t in range(threads)])


def frame_of(arena, nbytes, threads=64, array_bytes=0):
    """A frame's work: a frame array (if asked for) and one kernel; the sums it left."""
    if array_bytes:
        arena.empty(array_bytes, np.uint8)
    out = cuda.to_device(poisoned(threads, np.int64))
    take_and_sum[2, threads // 2](arena, cuda.to_device(np.array([nbytes])), out)
    return out


# -- resize ------------------------------------------------------------------------------


def test_a_resized_arena_moves_and_carries_its_counts():
    with devalloc.Arena(4096) as arena:
        out = frame_of(arena, 32)
        kept = arena.device_view(0, 64, np.uint8)
        before = kept.copy_to_host()
        arena.resize(1 << 16)
        assert arena.capacity == 1 << 16
        out = frame_of(arena, 512)  # 32 KiB: more than the old arena held
        np.testing.assert_array_equal(out.copy_to_host(), expected_sums(64, 512))
        stats = arena.stats()
        assert (stats.device_mallocs, stats.launches, stats.total_allocs) == (2, 2, 128)
        # A view of the old memory still reads it: the kernels above wrote elsewhere.
        np.testing.assert_array_equal(kept.copy_to_host(), before)


def test_a_graph_captured_before_a_resize_refuses_to_replay():
    with devalloc.Arena(1 << 16) as arena:
        out, nbytes = cuda.to_device(poisoned(64, np.int64)), cuda.to_device(np.array([16]))
        with arena.capture() as graph:  # (no device memory is allocated while capturing)
            take_and_sum[2, 32](arena, nbytes, out)
        graph.replay()
        arena.resize(1 << 17)
        with pytest.raises(devalloc.DevallocError, match="Capture the frame again"):
            graph.replay()
        graph.close()  # closed as well: that is what it is told
        with pytest.raises(devalloc.DevallocError, match="graph was closed"):
            graph.replay()
        assert arena.stats().frames == 1  # the refused replays counted nothing


def test_a_resize_reports_a_pending_overflow_and_changes_nothing():
    with devalloc.Arena(1024) as arena:
        frame_of(arena, 64)  # 4 KiB asked of 1 KiB
        with pytest.raises(devalloc.ArenaOverflowError):
            arena.resize(1 << 20)
        assert arena.capacity == 1024 and arena.stats().device_mallocs == 1


@pytest.mark.parametrize(
    "nbytes, error, message",
    [(0, ValueError, "positive"), (-5, ValueError, "positive"), (1.5, TypeError, "int"),
     (1 << 50, ValueError, "at most")],
)  # fmt: skip
def test_bad_sizes_are_refused(nbytes, error, message):
    with devalloc.Arena(1024) as arena, pytest.raises(error, match=message):
        arena.resize(nbytes)


def test_no_resize_inside_a_frame_or_a_capture():
    with devalloc.Arena(1024) as arena:
        with arena.frame(), pytest.raises(devalloc.DevallocError, match="outside"):
            arena.resize(2048)
        with arena.capture(), pytest.raises(devalloc.DevallocError, match="outside"):
            arena.resize(2048)
        assert arena.capacity == 1024


# -- run -----------------------------------------------------------------------------------


def test_a_frame_that_overflows_runs_again_in_a_grown_arena():
    calls = []

    def frame(arena):
        calls.append(arena.capacity)
        return frame_of(arena, 256)  # 16 KiB in a 1 KiB arena

    with devalloc.Arena(1024) as arena:
        out = arena.run(frame, arena)
        np.testing.assert_array_equal(out.copy_to_host(), expected_sums(64, 256))
        assert calls[0] == 1024 and len(calls) >= 2 and calls[-1] >= 64 * 256
        assert all(later >= 2 * earlier for earlier, later in itertools.pairwise(calls))
        assert arena.stats().device_mallocs == len(calls)
        arena.check()  # the failures were reported once, to run(), not again


def test_a_frame_array_too_large_grows_the_arena_too():
    with devalloc.Arena(1024) as arena:
        out = arena.run(lambda: frame_of(arena, 16, array_bytes=10_000))
        np.testing.assert_array_equal(out.copy_to_host(), expected_sums(64, 16))
        assert arena.capacity >= 10_000 + 64 * 16


def test_the_arena_settles_at_headroom_times_the_measured_peak():
    sizing = devalloc.Sizing(headroom=1.5, measure=2)
    with devalloc.Arena(16 << 20, strategy="bump", sizing=sizing) as arena:
        for _ in range(2):
            out = arena.run(frame_of, arena, 1024, array_bytes=SIZE_STEP)
        peak = 64 * 1024 + SIZE_STEP  # (bump takes exactly what it is asked for)
        assert arena.capacity == -(-peak * 3 // 2 // SIZE_STEP) * SIZE_STEP
        for _ in range(5):  # settled: no more moves
            out = arena.run(frame_of, arena, 1024, array_bytes=SIZE_STEP)
        np.testing.assert_array_equal(out.copy_to_host(), expected_sums(64, 1024))
        assert arena.stats().device_mallocs == 2


def test_growth_stops_at_max_nbytes():
    sizing = devalloc.Sizing(max_nbytes=4096)
    with devalloc.Arena(1024, sizing=sizing) as arena:
        with pytest.raises(devalloc.ArenaOverflowError):
            arena.run(frame_of, arena, 256)
        assert arena.capacity == 4096


def test_an_invalid_request_is_raised_not_grown_for():
    with devalloc.Arena(1024) as arena:
        with pytest.raises(devalloc.ArenaOverflowError, match="negative"):
            arena.run(frame_of, arena, -16)
        assert arena.stats().device_mallocs == 1


def test_errors_of_the_frame_itself_pass_through():
    def broken(arena):
        frame_of(arena, 16)
        raise KeyError("mine")

    with devalloc.Arena(1024) as arena:
        with pytest.raises(KeyError, match="mine"):
            arena.run(broken, arena)
        assert arena.stats().device_mallocs == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [({"headroom": 0.5}, "headroom"), ({"growth": 1}, "growth"), ({"measure": 0}, "measure"),
     ({"measure": True}, "measure"), ({"max_nbytes": -1}, "max_nbytes"),
     ({"growth": float("inf")}, "finite"), ({"headroom": float("nan")}, "finite"),
     ({"headroom": "2"}, "finite"), ({"growth": True}, "finite")],
)  # fmt: skip
def test_bad_sizing_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        devalloc.Sizing(**kwargs)


def test_sizing_must_be_a_sizing():
    with pytest.raises(TypeError, match=r"devalloc\.Sizing"):
        devalloc.Arena(1024, sizing={"headroom": 2})
