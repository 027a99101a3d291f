"""The host API as a hostile user drives it (2026-12-04 audit), each hole found
as a test: arenas made from several threads at once, a reset inside a capture
or a frame, a frame run in a self-sizing arena that another arena overflows,
a replay that raises, arenas copied or pickled, a frame exited from the wrong
thread, and input the other entry points already refused."""

import copy
import functools
import pickle
import sys
import threading

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc.backend import SIMULATOR
from helpers import poisoned, run_threads


@devalloc.kernel
def take(arena, nbytes, out):
    """Each thread takes `nbytes` and records its offset (-1: none)."""
    t = cuda.grid(1)
    if t < out.shape[0]:
        out[t] = arena.offset(arena.alloc(nbytes, np.uint8))


def offsets(arena, nbytes, threads=4):
    out = cuda.to_device(poisoned(threads, np.int64))
    take[1, threads](arena, nbytes, out)
    return out.copy_to_host()


@pytest.fixture
def fast_thread_switches():
    """Switch host threads every 10 us, so races show within a test's time."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


def test_arenas_made_and_closed_from_several_threads_at_once(fast_thread_switches):
    # The registry of open arenas was a WeakSet iterated while other threads
    # added to it: "Set changed size during iteration" from Arena() and
    # devalloc.stats(), and the arena that raised kept its memory.
    before = devalloc.stats().arenas
    kept = [devalloc.Arena(16) for _ in range(200)]

    def work(_):
        for _ in range(60):
            with devalloc.Arena(4096):
                devalloc.stats()

    run_threads(4, work)
    assert devalloc.stats().arenas == before + len(kept)
    for arena in kept:
        arena.close()
    assert devalloc.stats().arenas == before


def test_a_reset_inside_a_capture_is_refused_and_the_capture_goes_on():
    # It was accepted and not recorded: the eager frame took the arena twice,
    # its replay failed the second launch's requests.
    with devalloc.Arena(1024, align=16) as arena:
        first, second = (cuda.to_device(poisoned(4, np.int64)) for _ in range(2))
        with arena.capture() as graph:
            take[1, 4](arena, 256, first)
            with pytest.raises(devalloc.DevallocError, match="two graphs"):
                arena.reset()
        graph.replay()
        arena.check()
        assert sorted(first.copy_to_host()) == [0, 256, 512, 768]
        assert list(second.copy_to_host()) == list(poisoned(4, np.int64))


def test_a_reset_inside_a_frame_keeps_the_frames_arrays():
    # Frame arrays are valid until the frame exits: a reset inside it used to
    # release them, and the next arena.empty() handed out the same memory.
    with devalloc.Arena(4096, align=16) as arena:
        with pytest.raises(devalloc.ArenaOverflowError), arena.frame():
            kept = arena.zeros(1024, np.uint8)
            assert list(offsets(arena, 256)) == [0, 256, 512, 768]
            arena.reset()
            assert list(offsets(arena, 256)) == [0, 256, 512, 768]  # kernels start over
            other = arena.empty(1024, np.uint8)
            other.copy_to_device(np.full(1024, 7, np.uint8))
            assert not kept.copy_to_host().any()
            assert arena.stats().frame_array_bytes == 2048
            # Kernels have the 2048 B below the arrays: 1024 of them are taken.
            assert sorted(offsets(arena, 512)) == [-1, -1, 1024, 1536]
        assert arena.stats().frame_array_bytes == 0  # released when the frame exits


def test_run_grows_only_for_its_own_arenas_overflow():
    # A frame that overflowed another arena made `run` grow this one and run
    # the frame again, doubling until the device had no more.
    calls = []
    with devalloc.Arena(4096) as arena, devalloc.Arena(256) as other:

        def frame():
            calls.append(arena.capacity)
            offsets(other, 4096)
            other.check()

        with pytest.raises(devalloc.ArenaOverflowError) as raised:
            arena.run(frame)
        assert raised.value.capacity == 256
        assert calls == [4096]
        assert arena.stats().device_mallocs == 1

        def own_frame():  # its own overflow still grows it
            calls.append(arena.capacity)
            offsets(arena, 2048)

        arena.run(own_frame)
        assert calls[1:] == [4096, 8192]


@pytest.mark.skipif(not SIMULATOR, reason="a kernel raises on the simulator only")
def test_a_replay_that_raises_leaves_the_next_launch_an_empty_arena():
    # The eager path already did; after a replay that raised, the host once
    # kept its slot while the replay had moved on to the other, and the next
    # launch found the replay's memory still taken.
    @devalloc.kernel
    def fragile(arena, boom, out):
        t = cuda.grid(1)
        out[t] = arena.offset(arena.alloc(256, np.uint8))
        if boom[0] == 1 and t == 3:
            raise ValueError("boom")

    with devalloc.Arena(1024, align=16) as arena:
        out, boom = cuda.to_device(poisoned(4, np.int64)), cuda.to_device(np.array([1]))
        with arena.capture() as graph:
            fragile[1, 4](arena, boom, out)
        with pytest.raises(ValueError, match="boom"):
            graph.replay()
        assert sorted(offsets(arena, 256)) == [0, 256, 512, 768]
        arena.check()
        assert arena.stats().frames == 1


@pytest.mark.parametrize(
    "duplicate", [copy.copy, copy.deepcopy, pickle.dumps], ids=["copy", "deepcopy", "pickle"]
)
def test_an_arena_cannot_be_copied_or_pickled(duplicate):
    # copy.copy shared the device memory: closing the copy freed the original's.
    with devalloc.Arena(1024, align=16) as arena:
        with pytest.raises(TypeError, match="cannot be copied or pickled"):
            duplicate(arena)
        assert sorted(offsets(arena, 256)) == [0, 256, 512, 768]


def test_a_frame_exited_from_another_thread_is_refused_and_the_arena_stays_usable():
    # The exit released a lock the thread did not hold after marking the frame
    # closed: every other thread then waited for the arena forever.
    with devalloc.Arena(1024, align=16) as arena:
        frame = arena.frame()
        frame.__enter__()
        errors = []
        thread = threading.Thread(target=lambda: errors.append(_exit_error(frame)))
        thread.start()
        thread.join(60)
        assert isinstance(errors[0], devalloc.DevallocError)
        assert "opened it" in str(errors[0])
        assert sorted(offsets(arena, 256)) == [0, 256, 512, 768]
        frame.__exit__(None, None, None)  # the owner closes it
        with pytest.raises(devalloc.DevallocError, match="only once"):
            frame.__exit__(None, None, None)
        done = threading.Event()
        threading.Thread(target=lambda: (offsets(arena, 256), done.set())).start()
        assert done.wait(60)  # the arena is free for other threads again


def _exit_error(frame):
    try:
        frame.__exit__(None, None, None)
    except Exception as error:
        return error
    return None


def test_frame_array_shapes_and_dtypes_are_checked_every_time():
    # A float shape was refused, unless the same int shape had been asked
    # before (its cached spec answered); True passed as a shape of 1, and
    # dtype=None as float64.
    with devalloc.Arena(4096) as arena, arena.frame():
        for _ in range(2):  # the second time, after (2,) was asked
            with pytest.raises(TypeError, match="tuple of ints"):
                arena.empty((2.0,), np.float32)
            with pytest.raises(TypeError, match="tuple of ints"):
                arena.empty(2.0, np.float32)
            assert arena.empty((2,), np.float32).shape == (2,)
            assert arena.empty(2, np.float32).shape == (2,)
        for shape in (True, (True, 2), np.bool_(True)):
            with pytest.raises(TypeError, match="tuple of ints"):
                arena.empty(shape, np.float32)
        with pytest.raises(TypeError, match="got None"):
            arena.empty(2, None)
        with pytest.raises(TypeError, match="got None"):
            arena.device_view(0, 2, None)
        assert arena.empty((np.int64(3), 2), np.float32).shape == (3, 2)


@pytest.mark.parametrize(
    "use",
    [
        lambda arena, out: take[1, 4, "not a stream"](arena, 16, out),
        lambda arena, out: arena.reset(stream="not a stream"),
        lambda arena, out: arena.capture(stream=1.5),
    ],
    ids=["launch", "reset", "capture"],
)
def test_what_is_not_a_stream_is_refused_before_anything_changes(use):
    with devalloc.Arena(1024, align=16) as arena:
        out = cuda.to_device(poisoned(4, np.int64))
        with pytest.raises(TypeError, match="must be a Numba stream"):
            use(arena, out)
        with arena.frame():
            with pytest.raises(TypeError, match="must be a Numba stream"):
                arena.empty(4, np.uint8, stream="not a stream")
        assert list(out.copy_to_host()) == list(poisoned(4, np.int64))
        assert sorted(offsets(arena, 256)) == [0, 256, 512, 768]
        assert arena.stats().launches == 1


def test_a_launch_configuration_with_a_list_in_it_is_taken_as_a_tuple_is():
    # A list made "unhashable type: 'list'", which said nothing of what to pass.
    with devalloc.Arena(1024, align=16) as arena:
        out = cuda.to_device(poisoned(4, np.int64))
        take[[1], [4]](arena, 256, out)
        assert sorted(out.copy_to_host()) == [0, 256, 512, 768]
        out.copy_to_device(poisoned(4, np.int64))  # (NumPy ints: Numba's launch takes none)
        take[[np.int64(1)], (np.int32(4),)](arena, 256, out)
        assert sorted(out.copy_to_host()) == [0, 256, 512, 768]
        with pytest.raises(TypeError, match="the number of blocks must be an int"):
            take[["one"], 4](arena, 256, out)


def test_sizing_takes_numpy_ints_as_arena_does():
    sizing = devalloc.Sizing(measure=np.int32(2), max_nbytes=np.int64(1 << 20))
    assert (sizing.measure, sizing.max_nbytes) == (2, 1 << 20)
    assert type(sizing.max_nbytes) is int
    for bad in ({"measure": True}, {"measure": 1.5}, {"max_nbytes": np.bool_(True)}):
        with pytest.raises(ValueError):
            devalloc.Sizing(**bad)


def test_an_overflow_of_invalid_sizes_does_not_say_to_grow_the_arena():
    with devalloc.Arena(1024, align=16) as arena:
        assert list(offsets(arena, -5)) == [-1] * 4
        with pytest.raises(devalloc.ArenaOverflowError, match="negative") as raised:
            arena.check()
        assert "Make the arena larger" not in str(raised.value)
        offsets(arena, 4096)
        with pytest.raises(devalloc.ArenaOverflowError, match="Make the arena larger"):
            arena.check()


@pytest.mark.parametrize(
    "dtype",
    [np.dtype(np.longdouble), np.dtype(np.clongdouble), np.dtype(">i4"), np.dtype(">f8")],
    ids=str,
)
def test_dtypes_numba_cannot_type_are_refused_on_the_host_and_in_kernels(dtype):
    # The simulator and the host took float128 and big-endian dtypes, which
    # the GPU's typing refuses (sm_90 PTX, 2026-12-04).
    if dtype.isnative and dtype.itemsize <= (16 if dtype.kind == "c" else 8):
        pytest.skip(f"{dtype} is a plain type on this platform")

    @devalloc.kernel
    def alloc_it(arena, out):
        out[0] = arena.alloc(3, dtype).size

    with devalloc.Arena(4096) as arena:
        with arena.frame(), pytest.raises(TypeError, match="dtype must be"):
            arena.empty(3, dtype)
        with pytest.raises(TypeError, match="dtype must be"):
            arena.device_view(0, 3, dtype)
        if SIMULATOR:  # (the GPU refuses it while typing the kernel)
            with pytest.raises(TypeError, match="dtype must be"):
                alloc_it[1, 1](arena, np.zeros(1, np.int64))


def test_a_devalloc_device_function_is_refused_when_decorated():
    # It was accepted, and its launch failed with an AttributeError of Numba's.
    def body(arena, out):
        out[0] = arena.alloc(3, np.int8).size

    with pytest.raises(TypeError, match=r"@cuda.jit\(device=True\)"):
        devalloc.kernel(device=True)(body)


def test_a_second_arena_as_a_kernel_argument_is_refused_as_the_gpu_refuses_it():
    # The simulator ran the kernel, and its `other.alloc` said to decorate the
    # kernel with @devalloc.kernel, which it was.
    @devalloc.kernel
    def two(arena, other, out):
        out[0] = other.alloc(3, np.int8).size

    out = cuda.to_device(poisoned(1, np.int64))
    with devalloc.Arena(4096) as arena, devalloc.Arena(4096) as other:
        with pytest.raises(TypeError, match="as its first argument"):
            two[1, 1](arena, other, out)
        assert arena.stats().launches == 0
    assert out.copy_to_host()[0] == poisoned(1, np.int64)[0]


@pytest.mark.parametrize(
    ("shared", "error"), [(None, TypeError), (-1, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_dynamic_shared_memory_that_cuda_refuses_is_refused(shared, error):
    # None and -1 were passed on; on the simulator, Numba then kept the bad
    # value for every later launch of the kernel.
    with devalloc.Arena(1024, align=16) as arena:
        out = cuda.to_device(poisoned(4, np.int64))
        with pytest.raises(error, match="dynamic shared memory"):
            take[1, 4, 0, shared](arena, 256, out)
        take[1, 4, 0, 0](arena, 256, out)
        assert sorted(out.copy_to_host()) == [0, 256, 512, 768]


def test_a_refused_replay_counts_nothing_and_the_next_launch_starts_empty():
    # On the simulator a replay of a closed graph (or of a capture that raised)
    # was refused but counted as a frame, and moved the host to the slot the
    # latest launch had used: the next launch found that launch's memory taken.
    with devalloc.Arena(1024, align=16) as arena:
        out = cuda.to_device(poisoned(4, np.int64))  # (CUDA refuses cuMemAlloc in a capture)
        with arena.capture() as closed:
            take[1, 4](arena, 256, out)
        closed.close()
        with pytest.raises(RuntimeError), arena.capture() as abandoned:
            take[1, 4](arena, 256, out)
            raise RuntimeError("the capture fails")
        assert sorted(offsets(arena, 256)) == [0, 256, 512, 768]
        before = arena.stats()
        for graph in (closed, abandoned):
            with pytest.raises(devalloc.DevallocError, match="closed, or its capture did not"):
                graph.replay()
        after = arena.stats()
        assert (after.launches, after.frames, after.resets) == (
            before.launches, before.frames, before.resets)  # fmt: skip
        assert sorted(offsets(arena, 256)) == [0, 256, 512, 768]
        arena.check()


def test_a_capture_refuses_host_arrays_and_another_arenas_launches_on_its_stream():
    # Both were taken: a host array is copied by Numba while capturing, not at
    # each replay (the simulator wrote into it at every replay), and a launch
    # of another arena on graph.stream would join this graph with that arena's
    # handle of the moment: its replays would not reset it.
    with devalloc.Arena(1024, align=16) as arena, devalloc.Arena(1024, align=16) as other:
        out = cuda.to_device(poisoned(4, np.int64))
        with arena.capture() as graph:
            with pytest.raises(TypeError, match="pass device arrays"):
                take[1, 4](arena, 256, poisoned(4, np.int64))
            with pytest.raises(devalloc.DevallocError, match=r"its own arena\.capture"):
                take[1, 4, graph.stream](other, 256, out)
            take[1, 4](arena, 256, out)
        assert graph.launches == 1
        graph.replay()
        arena.check()
        assert sorted(out.copy_to_host()) == [0, 256, 512, 768]
        assert other.stats().launches == 0
        take[1, 4, graph.stream](other, 256, out)  # after the capture: a stream as any other
        other.check()


def test_a_bool_or_float_configuration_is_refused_after_its_int_twin_was_launched():
    # The launchers were cached by configuration, and True == 1, 1.0 == 1: once
    # take[1, 4] had run, take[1, True] and take[1.0, 4] found its launcher.
    with devalloc.Arena(1024, align=16) as arena:
        out = cuda.to_device(poisoned(4, np.int64))
        take[1, 4](arena, 256, out)
        take[1, 1](arena, 256, out)
        for config, what in (
            ((1, True), "the threads per block"),
            ((1.0, 4), "the number of blocks"),
            ((True, 1), "the number of blocks"),
        ):
            with pytest.raises(TypeError, match=what):
                take[config](arena, 256, out)
        assert arena.stats().launches == 2


@pytest.mark.parametrize(
    "twin, config",
    [
        ((1, 1, 0, 0), (1, 1, 0, 0.0)),
        ((1, 1, 0, 0), (1, 1, 0, False)),
        ((1, 1, 0), (1, 1, False)),
        ((1, 1, 0), (1, 1, 0.0)),
    ],
    ids=["float-shared-memory", "bool-shared-memory", "bool-stream", "float-stream"],
)
def test_a_refused_stream_or_shared_memory_is_refused_after_its_int_twin(twin, config):
    # As above for the stream and the shared memory: 0.0 == False == 0.
    @devalloc.kernel  # (a kernel of its own: no launcher cached yet)
    def put_seven(arena, out):
        out[0] = 7

    with devalloc.Arena(1024) as arena:
        out = cuda.to_device(poisoned(1, np.int64))
        with pytest.raises(TypeError):
            put_seven[config](arena, out)
        put_seven[twin](arena, out)
        assert out.copy_to_host()[0] == 7
        with pytest.raises(TypeError):
            put_seven[config](arena, out)
        assert arena.stats().launches == 1


def _put(arena, out, value):
    out[0] = value


class _CallableObject:
    def __call__(self, arena, out, value):
        out[0] = value


@pytest.mark.parametrize(
    "func",
    [_CallableObject(), functools.partial(_put, value=3), functools.partial(_put), len],
    ids=["callable-object", "partial-keyword", "partial", "builtin"],
)
def test_a_kernel_of_what_is_not_a_python_function_is_refused_saying_so(func):
    # A callable object or a functools.partial raised AttributeError
    # '__qualname__'; a builtin was taken, and its launch failed inside Numba.
    with pytest.raises(TypeError, match="needs a Python function"):
        devalloc.kernel(func)
