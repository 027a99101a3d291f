"""arena.capture() and graph.replay(): a frame recorded once, replayed as a frame
of its own each time (on the simulator, the recorded launches run in order)."""

import gc
import threading
import weakref

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import numba_compat
from devalloc.backend import SIMULATOR
from helpers import poisoned

POISON = poisoned(32, np.int64)


def poison():
    """A poisoned device array (captured launches take device arrays only)."""
    return cuda.to_device(POISON)


@devalloc.kernel
def put(arena, value, offsets):
    """Thread t allocates 32 bytes and writes value[0] + t into them."""
    t = cuda.grid(1)
    buf = arena.alloc(4, np.int64)
    if buf.size > 0:
        buf[0] = value[0] + t
    offsets[t] = arena.offset(buf)


@devalloc.kernel
def get(arena, offsets, out):
    """Thread t reads back what `put` left at offsets[t]."""
    t = cuda.grid(1)
    buf = arena.view(offsets[t], 4, np.int64)
    out[t] = buf[0] if buf.size > 0 else -1


@devalloc.kernel
def big(arena, nbytes, out):
    out[cuda.grid(1)] = arena.alloc(nbytes[0], np.uint8).size


def two_kernels(arena, value, offsets, out):
    with arena.capture() as graph:
        put[1, 32](arena, value, offsets)
        get[1, 32](arena, offsets, out)
    return graph


def test_a_capture_records_and_runs_nothing():
    value, offsets, out = cuda.to_device(np.array([5])), poison(), poison()
    with devalloc.Arena(1 << 16) as arena:
        graph = two_kernels(arena, value, offsets, out)
        stats = arena.stats()
    assert graph.launches == 2 and isinstance(graph, devalloc.Graph)
    assert (offsets.copy_to_host() == POISON).all()
    assert (out.copy_to_host() == POISON).all()
    assert (stats.launches, stats.total_allocs, stats.peak_bytes) == (0, 0, 0)


def test_each_replay_is_a_frame_that_starts_empty():
    value, offsets, out = cuda.to_device(np.array([0])), poison(), poison()
    with devalloc.Arena(1 << 16) as arena:
        graph = two_kernels(arena, value, offsets, out)
        for replay in range(3):
            value.copy_to_device(np.array([1000 * (replay + 1)]))
            graph.replay()
            # memory lives across the replay's kernels: `get` reads what `put` wrote
            np.testing.assert_array_equal(out.copy_to_host(), 1000 * (replay + 1) + np.arange(32))
            # and each replay starts with an empty arena
            assert sorted(offsets.copy_to_host()) == list(range(0, 32 * 32, 32))
        stats = arena.stats()
    assert (stats.launches, stats.resets, stats.total_allocs) == (6, 3, 3 * 32)
    assert stats.peak_bytes == 32 * 32 and stats.failed_allocs == 0


def test_replays_and_eager_launches_interleave():
    value, offsets, out = cuda.to_device(np.array([7])), poison(), poison()
    eager = poison()
    with devalloc.Arena(1 << 16) as arena:
        put[1, 32](arena, value, eager)  # before any capture
        graph = two_kernels(arena, value, offsets, out)
        for _ in range(2):
            put[1, 32](arena, value, eager)
            assert sorted(eager.copy_to_host()) == list(range(0, 1024, 32))
            graph.replay()
            assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))
        with arena.frame():  # a frame after replays: memory lives across its launches
            put[1, 32](arena, value, eager)
            put[1, 32](arena, value, offsets)
        assert sorted(eager.copy_to_host()) == list(range(0, 1024, 32))
        assert sorted(offsets.copy_to_host()) == list(range(1024, 2048, 32))
        graph.replay()
        np.testing.assert_array_equal(out.copy_to_host(), 7 + np.arange(32))
        assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))
        stats = arena.stats()
    assert stats.launches == 1 + 2 * 3 + 2 + 2 and stats.total_allocs == 32 * (1 + 2 * 2 + 2 + 1)


def test_a_replay_starts_empty_whichever_slot_the_launches_before_it_used():
    """After one eager launch, after two (the other slot), and after another
    replay, a replay starts empty, and so does the launch after it; after a
    graph with no devalloc launch (which uses no slot) too; every launch is
    counted in the totals once, and a reset for each eager launch and each
    replay that had devalloc launches."""
    value, offsets, out, eager = cuda.to_device(np.array([7])), poison(), poison(), poison()
    with devalloc.Arena(1 << 16) as arena:
        graph = two_kernels(arena, value, offsets, out)
        for eager_launches in (1, 2, 0):
            for _ in range(eager_launches):
                put[1, 32](arena, value, eager)
            offsets.copy_to_device(POISON)
            graph.replay()
            assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))
            np.testing.assert_array_equal(out.copy_to_host(), 7 + np.arange(32))
            assert arena.stats().current_bytes == 0  # the next launch starts empty
        with arena.capture() as empty:  # no launch: its replay leaves the host's slot as it was
            pass
        for eager_launches in (1, 2):
            for _ in range(eager_launches):
                put[1, 32](arena, value, eager)
            empty.replay()
            assert arena.stats().current_bytes == 0
        put[1, 32](arena, value, eager)
        assert sorted(eager.copy_to_host()) == list(range(0, 1024, 32))
        stats = arena.stats()
    assert (stats.launches, stats.resets, stats.total_allocs) == (3 * 2 + 7, 3 + 7, 32 * (3 + 7))
    assert stats.peak_bytes == 1024 and stats.failed_allocs == 0


def test_an_overflow_in_a_replay_is_reported_at_the_next_replay():
    nbytes, out = cuda.to_device(np.array([1 << 20])), poison()
    with devalloc.Arena(1 << 16) as arena:
        with arena.capture() as graph:
            big[1, 32](arena, nbytes, out)
        graph.replay()
        assert (out.copy_to_host() == 0).all()  # refused: zero-size arrays
        with pytest.raises(devalloc.ArenaOverflowError) as caught:
            graph.replay()
        error = caught.value
        assert (error.kernel, error.requested, error.failed) == ("big", 1 << 20, 32)
        assert "replay" in str(error.not_launched)
        nbytes.copy_to_device(np.array([16]))
        graph.replay()  # reported once: the graph replays again
        arena.check()
        assert (out.copy_to_host() == 16).all()
        stats = arena.stats()
    assert (stats.failed_allocs, stats.total_allocs) == (32, 32)


def test_an_overflow_in_a_replay_is_reported_by_check():
    nbytes, out = cuda.to_device(np.array([1 << 20])), poison()
    with devalloc.Arena(1 << 16) as arena:
        with arena.capture() as graph:
            big[1, 32](arena, nbytes, out)
        graph.replay()
        with pytest.raises(devalloc.ArenaOverflowError, match="'big'"):
            arena.check()
        arena.check()  # exactly once


def test_a_graph_keeps_the_arrays_its_launches_were_given():
    """An array made for the capture alone is dropped by the caller once it ends;
    the graph's replays read it, so the graph keeps it alive (Numba's launch
    does not) until it is closed. (Made before the capture: CUDA refuses
    cuMemAlloc inside one.)"""
    offsets = poison()
    with devalloc.Arena(1 << 16) as arena:
        put[1, 32](arena, cuda.to_device(np.array([1])), offsets)  # (loaded before capture)
        value = cuda.to_device(np.array([4000]))
        with arena.capture() as graph:
            put[1, 32](arena, value, offsets)
        kept = weakref.ref(value)
        del value
        if not SIMULATOR:  # what Numba would free in a later batch, freed now
            numba_compat.flush_deallocations()
        gc.collect()
        assert kept() is not None
        reused = [cuda.to_device(np.array([-1])) for _ in range(64)]  # (its memory, if freed)
        graph.replay()
        starts = sorted(offsets.copy_to_host())
        view = arena.device_view(0, 32 * 32, np.uint8).copy_to_host().view(np.int64)
        np.testing.assert_array_equal(view[np.array(starts) // 8], 4000 + np.arange(32))
        graph.close()
        gc.collect()
        assert kept() is None and len(reused) == 64


def test_what_a_capture_refuses():
    value, offsets = cuda.to_device(np.array([1])), poison()
    with devalloc.Arena(1 << 16) as arena:
        with arena.frame():
            with pytest.raises(devalloc.DevallocError, match="inside a frame"):
                arena.capture().__enter__()
        with arena.capture() as graph:
            with pytest.raises(devalloc.DevallocError, match=r"inside arena\.capture"):
                arena.frame().__enter__()
            with pytest.raises(devalloc.DevallocError, match="another capture"):
                arena.capture().__enter__()
            with pytest.raises(devalloc.DevallocError, match="without a stream"):
                put[1, 32, cuda.stream()](arena, value, offsets)
            with pytest.raises(devalloc.DevallocError, match="frame of its own"):
                graph.replay()
            for waits in (arena.check, arena.stats, arena.close):  # would end the capture
                with pytest.raises(devalloc.DevallocError, match=r"after arena\.capture"):
                    waits()
            put[1, 32, graph.stream](arena, value, offsets)  # the graph's own stream is fine
        with arena.frame():
            with pytest.raises(devalloc.DevallocError, match="frame of its own"):
                graph.replay()
        graph.replay()
        assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))


def test_an_exception_inside_a_capture_leaves_no_graph():
    value, offsets = cuda.to_device(np.array([1])), poison()
    with devalloc.Arena(1 << 16) as arena:
        with pytest.raises(ZeroDivisionError):
            with arena.capture() as graph:
                put[1, 32](arena, value, offsets)
                raise ZeroDivisionError("a mistake in the captured code")
        with pytest.raises(devalloc.DevallocError, match="did not finish"):
            graph.replay()
        put[1, 32](arena, value, offsets)  # the arena works on
        assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))


def test_numbas_own_allocation_inside_a_capture_fails_and_leaves_no_graph():
    """CUDA refuses cuMemAlloc in the capturing thread (and so does the simulator,
    for Numba's ``cuda.to_device`` and ``device_array``): the error reaches the
    caller, not one of the capture's, no graph is left, and the arena works on;
    another thread allocates meanwhile as it likes."""
    value, offsets = cuda.to_device(np.array([1])), poison()
    with devalloc.Arena(1 << 16) as arena:
        with pytest.raises(Exception, match="CAPTURE_UNSUPPORTED") as raised:
            with arena.capture() as graph:
                put[1, 32](arena, cuda.to_device(np.array([2])), offsets)
        assert not isinstance(raised.value, devalloc.DevallocError)
        with pytest.raises(devalloc.DevallocError, match="did not finish"):
            graph.replay()
        put[1, 32](arena, value, offsets)
        assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))
        made = []
        with arena.capture() as graph:  # (thread-local on CUDA as here)
            worker = threading.Thread(target=lambda: made.append(cuda.device_array(4)))
            worker.start()
            worker.join(60)
            put[1, 32](arena, value, offsets)
        assert len(made) == 1 and made[0].shape == (4,)
        graph.replay()
        assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))
        assert cuda.device_array(4).shape == (4,)  # (and this thread again, after it)


@pytest.mark.skipif(not SIMULATOR, reason="the simulator's bookkeeping of capturing threads")
def test_a_graph_closed_from_another_thread_leaves_both_threads_allocating():
    # The recording forgot its capture through the closing thread's records,
    # which another thread does not have: close() raised there.
    value, offsets, errors = cuda.to_device(np.array([1])), poison(), []
    with devalloc.Arena(1 << 16) as arena:
        with arena.capture() as graph:
            put[1, 32](arena, value, offsets)

        def close_and_allocate():
            try:
                graph.close()
                assert cuda.device_array(4).shape == (4,)
            except Exception as error:  # (seen by the test's thread, below)
                errors.append(error)

        other = threading.Thread(target=close_and_allocate)
        other.start()
        other.join(60)
        assert errors == [] and not other.is_alive()
        assert cuda.to_device(np.array([3])).copy_to_host()[0] == 3


def test_a_graph_of_a_closed_arena_refuses_to_replay():
    value, offsets, out = cuda.to_device(np.array([1])), poison(), poison()
    arena = devalloc.Arena(1 << 16)
    graph = two_kernels(arena, value, offsets, out)
    graph.replay()
    arena.close()
    with pytest.raises(devalloc.ArenaClosedError):
        graph.replay()
    with pytest.raises(devalloc.ArenaClosedError):
        arena.capture().__enter__()


@cuda.jit
def count_up(value):
    value[0] += 1


@pytest.mark.gpu
@pytest.mark.skipif(SIMULATOR or not cuda.is_available(), reason="needs a real CUDA GPU")
def test_a_real_graph_replays_back_to_back_with_plain_work_on_its_stream():
    """On the GPU the capture is a CUDA graph: a plain kernel queued on
    graph.stream is one of its nodes, and fifty replays queued on a stream of
    their own, with no host synchronization between them, each start empty."""
    value, offsets, out = cuda.to_device(np.array([0])), poison(), poison()
    with devalloc.Arena(1 << 16) as arena:
        put[1, 32](arena, value, offsets)  # every kernel loaded before the capture
        get[1, 32](arena, offsets, out)
        count_up[1, 1](value)
        dropped = [cuda.device_array(16) for _ in range(64)]
        with arena.capture() as graph:
            # Numba frees dropped arrays in batches: not while capturing (a
            # cuMemFree would invalidate the capture, as the pipeline met).
            dropped.clear()
            count_up[1, 1, graph.stream](value)
            put[1, 32](arena, value, offsets)
            get[1, 32](arena, offsets, out)
        cuda.synchronize()
        assert value.copy_to_host()[0] == 1  # recorded, not run
        assert graph_nodes(graph) == 3  # its own: no node of devalloc's
        stream = cuda.stream()
        for _ in range(50):
            graph.replay(stream)
        stream.synchronize()
        arena.check()
        stats = arena.stats()
    assert value.copy_to_host()[0] == 51
    np.testing.assert_array_equal(out.copy_to_host(), 51 + np.arange(32))
    assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))
    assert stats.launches == 2 + 50 * 2 and stats.total_allocs == 32 * 51
    assert stats.peak_bytes == 1024


def graph_nodes(graph):
    """How many nodes a captured graph has."""
    from cuda.bindings import driver as cu

    error, _, count = cu.cuGraphGetNodes(graph._recording._capture._graph, 0)
    assert error == cu.CUresult.CUDA_SUCCESS
    return count


@pytest.mark.gpu
@pytest.mark.skipif(SIMULATOR or not cuda.is_available(), reason="needs a real CUDA GPU")
def test_a_hundred_replays_back_to_back_each_start_empty():
    """A graph of two devalloc kernels has those two nodes alone, and a hundred
    replays queued back to back, alternating the graph's two instances, each
    start empty; so do the eager launches after them."""
    value, offsets, out = cuda.to_device(np.array([4])), poison(), poison()
    eager = poison()
    with devalloc.Arena(1 << 16) as arena:
        graph = two_kernels(arena, value, offsets, out)
        assert graph_nodes(graph) == 2
        for _ in range(100):
            graph.replay()
        for _ in range(3):
            eager.copy_to_device(POISON)
            put[1, 32](arena, value, eager)
            assert sorted(eager.copy_to_host()) == list(range(0, 1024, 32))
        arena.check()
        stats = arena.stats()
    np.testing.assert_array_equal(out.copy_to_host(), 4 + np.arange(32))
    assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))
    assert stats.peak_bytes == 1024 and stats.total_allocs == 32 * 103
    assert stats.launches == 2 * 100 + 3 and stats.failed_allocs == 0


@pytest.mark.gpu
@pytest.mark.skipif(SIMULATOR or not cuda.is_available(), reason="needs a real CUDA GPU")
def test_a_graph_of_plain_work_only_replays_and_leaves_the_arena_empty():
    """No devalloc launch in the capture: its replays run the plain work alone
    and leave the host's slot as it was, so the launches after them start
    empty (had a replay flipped the slot, the second would find the first's
    memory taken)."""
    value = cuda.to_device(np.array([10]))
    offsets = poison()
    with devalloc.Arena(1 << 16) as arena:
        count_up[1, 1](value)
        put[1, 32](arena, value, offsets)
        cuda.synchronize()
        with arena.capture() as graph:
            count_up[1, 1, graph.stream](value)
        assert graph.launches == 0 and graph_nodes(graph) == 1
        before = arena.stats()
        for _ in range(5):
            graph.replay()
        after = arena.stats()  # five frames; nothing emptied, so no reset counted
        assert (after.frames - before.frames, after.resets, after.launches) == (
            5, before.resets, before.launches)  # fmt: skip
        for _ in range(2):  # after the replays: an empty arena, each time
            offsets.copy_to_device(POISON)
            put[1, 32](arena, value, offsets)
            assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))
        arena.check()
        assert arena.stats().peak_bytes == 1024
    assert value.copy_to_host()[0] == 16


def test_another_threads_launch_waits_for_the_capture_and_runs_eagerly():
    """A capture holds the arena as a frame does: another thread's launch waits
    until it closes, and is then made, not recorded."""
    import threading

    value, offsets, eager = cuda.to_device(np.array([3])), poison(), poison()
    with devalloc.Arena(1 << 16) as arena:
        started = threading.Event()

        def other():
            started.set()
            put[1, 32](arena, value, eager)

        with arena.capture() as graph:
            put[1, 32](arena, value, offsets)
            thread = threading.Thread(target=other)
            thread.start()
            started.wait()
            thread.join(timeout=0.5)
            assert thread.is_alive()  # waiting for the capture (and so not recorded in it)
            # (No copy to check `eager` here: a synchronous copy during a CUDA
            # stream capture is an error, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT.)
        thread.join()
        assert graph.launches == 1
        assert sorted(eager.copy_to_host()) == list(range(0, 1024, 32))
        assert (offsets.copy_to_host() == POISON).all()  # recorded, not run


@pytest.mark.gpu
@pytest.mark.skipif(SIMULATOR or not cuda.is_available(), reason="needs a real CUDA GPU")
def test_another_threads_default_stream_work_neither_waits_for_nor_breaks_a_capture():
    """The capture's own stream does not wait for the legacy default stream: a
    plain kernel another thread launches there meanwhile runs at once, and the
    capture (which CUDA would invalidate on a blocking stream) still records."""
    import threading

    value, offsets, counted = cuda.to_device(np.array([5])), poison(), cuda.to_device(np.array([7]))
    with devalloc.Arena(1 << 16) as arena:
        put[1, 32](arena, value, offsets)
        count_up[1, 1](counted)
        cuda.synchronize()

        def other():
            count_up[1, 1](counted)
            cuda.default_stream().synchronize()

        with arena.capture() as graph:
            put[1, 32](arena, value, offsets)
            thread = threading.Thread(target=other)
            thread.start()
            thread.join(timeout=30)
            assert not thread.is_alive()
        assert counted.copy_to_host()[0] == 9  # ran during the capture, not recorded
        offsets.copy_to_device(POISON)
        graph.replay()
        graph.replay()
        arena.check()
    assert counted.copy_to_host()[0] == 9
    assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))


def test_a_driver_older_than_cuda_12_4_is_named_before_any_graph_is_touched(monkeypatch):
    """Setting the second instance's handles needs cuFuncGetParamInfo (CUDA 12.4):
    an older driver gets an error that says so, before any call on the graph
    (no GPU needed: the driver's version is the only thing asked)."""
    pytest.importorskip("cuda.bindings")
    from devalloc import cuda_graphs

    monkeypatch.setattr(cuda_graphs, "driver_version", lambda: (12, 3))
    with pytest.raises(devalloc.DevallocError, match=r"CUDA 12\.4 driver or later.*CUDA 12\.3"):
        cuda_graphs._set_first_parameter(None, None, 0, 1)
    monkeypatch.setattr(cuda_graphs, "driver_version", lambda: (12, 4))
    with pytest.raises(Exception) as passed:  # past the check: the first driver call refuses None
        cuda_graphs._set_first_parameter(None, None, 0, 1)
    assert "12.4 driver" not in str(passed.value)


@pytest.mark.gpu
@pytest.mark.skipif(SIMULATOR or not cuda.is_available(), reason="needs a real CUDA GPU")
def test_a_graph_whose_second_instance_fails_is_not_replayable(monkeypatch):
    """If the graph's instance for slot 1 cannot be made, the error reaches the
    user at the end of the capture, the graph refuses to replay (one
    instance would leave every other replay in the wrong slot), no capture is
    left open, and the arena and later captures work on."""
    from cuda.bindings import driver as cu

    from devalloc import cuda_graphs
    from devalloc.cuda_graphs import stream_handle

    def refused(instance, node, captured, value, known_sizes=None):
        raise devalloc.CudaError("CUDA_ERROR_NOT_SUPPORTED", "cuGraphExecKernelNodeSetParams")

    value, offsets, out = cuda.to_device(np.array([6])), poison(), poison()
    with devalloc.Arena(1 << 16) as arena:
        put[1, 32](arena, value, offsets)
        get[1, 32](arena, offsets, out)
        monkeypatch.setattr(cuda_graphs, "_set_first_parameter", refused)
        with pytest.raises(devalloc.CudaError, match="NOT_SUPPORTED"):
            with arena.capture() as failed:
                put[1, 32](arena, value, offsets)
                get[1, 32](arena, offsets, out)
        monkeypatch.undo()
        with pytest.raises(devalloc.DevallocError, match="did not finish"):
            failed.replay()
        error, status = cu.cuStreamIsCapturing(stream_handle(failed.stream))
        assert error == cu.CUresult.CUDA_SUCCESS
        assert status == cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
        assert (cuda.to_device(POISON).copy_to_host() == POISON).all()
        graph = two_kernels(arena, value, offsets, out)
        for _ in range(3):
            offsets.copy_to_device(POISON)
            graph.replay()
            assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))
        arena.check()
    np.testing.assert_array_equal(out.copy_to_host(), 6 + np.arange(32))


@pytest.mark.gpu
@pytest.mark.skipif(SIMULATOR or not cuda.is_available(), reason="needs a real CUDA GPU")
def test_a_capture_asks_each_kernels_parameters_once(monkeypatch):
    """Setting slot 1 in the second instance needs each kernel's parameter sizes
    (cuFuncGetParamInfo, one driver call per parameter and one refused past
    the last): asked once per kernel of the graph, however often it runs."""
    from devalloc import cuda_graphs

    asked = []
    original = cuda_graphs.parameter_sizes

    def counted(func):
        asked.append(int(func))
        return original(func)

    monkeypatch.setattr(cuda_graphs, "parameter_sizes", counted)
    value, offsets, out = cuda.to_device(np.array([40])), poison(), poison()
    with devalloc.Arena(1 << 16) as arena:
        put[1, 32](arena, value, offsets)
        get[1, 32](arena, offsets, out)
        with arena.capture() as graph:
            for _ in range(3):
                put[1, 32](arena, value, offsets)
                get[1, 32](arena, offsets, out)
        for _ in range(2):  # both instances: the slot of each launch's handle
            graph.replay()
            np.testing.assert_array_equal(out.copy_to_host(), 40 + np.arange(32))
        arena.check()
    assert len(asked) == 2 and len(set(asked)) == 2


@pytest.mark.gpu
@pytest.mark.skipif(SIMULATOR or not cuda.is_available(), reason="needs a real CUDA GPU")
def test_closing_a_graph_keeps_a_stream_the_user_gave():
    value, offsets, out = cuda.to_device(np.array([2])), poison(), poison()
    mine = cuda.stream()
    with devalloc.Arena(1 << 16) as arena:
        with arena.capture(stream=mine) as given:
            put[1, 32](arena, value, offsets)
        with arena.capture() as own:
            get[1, 32](arena, offsets, out)
        assert given.stream is mine and own.stream is not mine
        given.replay()
        given.close()
        own.close()
        own.close()  # twice is fine
        count_up[1, 1, mine](value)  # the user's stream lives on
        mine.synchronize()
        with pytest.raises(devalloc.DevallocError, match="closed"):
            own.replay()
    assert value.copy_to_host()[0] == 3
    assert sorted(offsets.copy_to_host()) == list(range(0, 1024, 32))


@pytest.mark.gpu
@pytest.mark.skipif(SIMULATOR or not cuda.is_available(), reason="needs a real CUDA GPU")
def test_a_graph_dropped_during_another_capture_is_closed_after_it():
    """A Graph's finalizer destroys its CUDA graph and the stream it captured on;
    run inside another capture of the same thread (the old graph dropped while
    the new frame is recorded), that would end the capture in error. It waits
    for the capture's end."""
    value, offsets, out = cuda.to_device(np.array([3])), poison(), poison()
    with devalloc.Arena(1 << 16) as arena:
        put[1, 32](arena, value, offsets)  # every kernel loaded before the capture
        get[1, 32](arena, offsets, out)
        old = two_kernels(arena, value, offsets, out)
        closed = old._recording._capture
        with arena.capture() as graph:
            put[1, 32](arena, value, offsets)
            del old  # its finalizer runs here, inside this capture
            assert closed._execs is not None  # not closed yet
            get[1, 32](arena, offsets, out)
        assert closed._execs is None  # closed when the capture ended
        graph.replay()
        arena.check()
    np.testing.assert_array_equal(out.copy_to_host(), 3 + np.arange(32))


def test_replays_and_launches_on_the_default_stream_queue_no_stream_ordering(arena, monkeypatch):
    # graph.replay() (stream None) and k[g, b](...) (stream 0) both go to the
    # default stream, but the arena took them for two and queued an event record
    # and a wait (two CUDA calls) at every switch between them.
    orderings = []
    monkeypatch.setattr(arena._memory, "order_after", lambda *streams: orderings.append(streams))
    nbytes = cuda.to_device(np.array([64], np.int64))
    out = cuda.to_device(poisoned(1, np.int64))
    with arena.capture() as graph:
        big[1, 1](arena, nbytes, out)
    for _ in range(3):
        big[1, 1](arena, nbytes, out)
        graph.replay()
        graph.replay(None)
    assert out.copy_to_host()[0] == 64
    assert orderings == []
