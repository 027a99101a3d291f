"""Frame arrays: `arena.empty` / `arena.zeros`, host-side requests for device arrays
from the arena that live until the frame ends, and never meet in-kernel allocations."""

import gc
import itertools
import threading

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc.backend import SIMULATOR
from helpers import poisoned, record_allocs, run_requests


def address(array):
    """Where a device array's data starts (a simulated array's numpy address)."""
    interface = getattr(array, "__cuda_array_interface__", None) or array.__array_interface__
    return interface["data"][0]


def offset_of(arena, array):
    return address(array) - address(arena.device_view(0, 1, np.uint8))


def fill(array, seed):
    """Put a pattern (never all zeros) into a device array; returns it."""
    values = (np.arange(array.size) * 7 + seed + 1).astype(array.dtype).reshape(array.shape)
    array.copy_to_device(values)
    return values


def take_until_full(arena, lanes=64, calls=64, nbytes=48):
    """Every lane allocates `nbytes` until the arena refuses; (offsets, lengths)."""
    return run_requests(arena, np.full((lanes, calls), nbytes))


def spans_of(offsets, lengths):
    return [(int(o), int(o) + int(n)) for o, n in zip(offsets.ravel(), lengths.ravel()) if n > 0]


def test_an_empty_array_is_a_typed_aligned_array_inside_the_arena(arena):
    with arena.frame():
        image = arena.empty((3, 5), np.float32)
        small = arena.empty(3, np.int16)
        big = arena.empty(300, np.uint8)
        assert image.shape == (3, 5) and image.dtype == np.float32
        assert image.strides == (20, 4)  # C-contiguous
        assert small.shape == (3,) and big.size == 300
        arrays = (image, small, big)
        for array in arrays:
            values = fill(array, 3)
            np.testing.assert_array_equal(array.copy_to_host(), values)
            start = offset_of(arena, array)
            assert 0 <= start and start + array.nbytes <= arena.capacity
        assert offset_of(arena, big) % arena.align == 0  # at least `align` bytes: on `align`
        assert offset_of(arena, small) % 16 == 0 and offset_of(arena, image) % 16 == 0
        spans = sorted((offset_of(arena, a), offset_of(arena, a) + a.nbytes) for a in arrays)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))


def test_frame_arrays_and_in_kernel_allocations_of_a_frame_never_overlap(arena):
    with pytest.raises(devalloc.ArenaOverflowError, match="record_allocs"), arena.frame():
        arrays = [arena.empty(1000, np.uint8), arena.empty((7, 9), np.float64)]
        kept = [fill(array, i) for i, array in enumerate(arrays)]
        offsets, lengths = take_until_full(arena)  # kernels take all they can
        assert (lengths == 0).any()  # the arena did run out
        with pytest.raises(devalloc.ArenaOverflowError, match=r"arena\.empty"):
            arena.empty(16, np.int32)  # and left no room for another array
        spans = spans_of(offsets, lengths)
        assert sum(end - begin for begin, end in spans) > arena.capacity // 2
        for array, values in zip(arrays, kept):
            start = offset_of(arena, array)
            assert all(end <= start or begin >= start + array.nbytes for begin, end in spans)
            np.testing.assert_array_equal(array.copy_to_host(), values)  # nothing wrote over it
    # (the frame's exit reported the kernels' failures, as for any frame)


def test_a_frame_array_asked_for_after_launches_waits_once_then_is_set_aside(arena, monkeypatch):
    waits = []
    synchronize = arena._memory.synchronize
    monkeypatch.setattr(arena._memory, "synchronize", lambda s: waits.append(s) or synchronize(s))
    requests = np.full((32, 4), 64)
    for frame in range(3):
        with arena.frame(check=False):
            offsets, lengths = run_requests(arena, requests, threads=32)
            late = arena.empty(2048, np.uint8)
            values = fill(late, frame)
            again, again_lengths = run_requests(arena, requests, threads=32)
            start = offset_of(arena, late)
            for begin, end in spans_of(offsets, lengths) + spans_of(again, again_lengths):
                assert end <= start or begin >= start + 2048
            np.testing.assert_array_equal(late.copy_to_host(), values)
            if frame == 0:
                assert len(waits) == 1  # it had to see how far the kernels went
        assert (lengths > 0).all() and (again_lengths > 0).all()
    assert len(waits) == 1  # later frames set the array's room aside at their start
    assert arena.stats().peak_frame_array_bytes == 2048


def test_arrays_taken_before_a_frames_launches_set_nothing_aside_for_later_frames():
    # Only arrays asked for after a launch need room set aside in later frames.
    # Such a frame made every later one keep its arrays' size from the kernels:
    # a kernel-only frame asking for half the arena overflowed an empty arena.
    with devalloc.Arena(1 << 16) as arena:
        with arena.frame():
            arena.empty(40000, np.uint8)  # no launch in this frame at all
        with arena.frame():  # kernels only: the whole arena is theirs
            _, lengths = run_requests(arena, [[30000]], threads=1)
        assert lengths[0, 0] == 30000
        assert arena.stats().failed_allocs == 0


def test_arrays_of_a_frame_are_released_when_it_exits(arena):
    with arena.frame():
        first = offset_of(arena, arena.empty(100, np.float32))
    with arena.frame():
        assert offset_of(arena, arena.empty(100, np.float32)) == first
        assert arena.stats().frame_array_bytes == arena.capacity - first
    assert arena.stats().frame_array_bytes == 0


def test_zeros_clears_what_an_earlier_frame_left(arena):
    with arena.frame():
        fill(arena.empty(64, np.int64), 9)
    with arena.frame():
        zeros = arena.zeros(64, np.int64)
        np.testing.assert_array_equal(zeros.copy_to_host(), np.zeros(64, np.int64))


def test_a_zero_size_array_takes_nothing(arena):
    with arena.frame():
        empty = arena.empty((0, 4), np.float32)
        assert empty.shape == (0, 4) and empty.size == 0
        assert arena.stats().frame_array_bytes == 0


def test_a_request_too_large_fails_alone_and_takes_nothing(arena):
    with arena.frame():
        small = arena.empty(32, np.uint8)
        refused = r"arena\.empty\(70000, uint8\)"
        with pytest.raises(devalloc.ArenaOverflowError, match=refused) as error:
            arena.empty(70_000, np.uint8)
        assert isinstance(error.value, MemoryError)
        assert error.value.requested == 70_000 and error.value.capacity == arena.capacity
        next_one = arena.empty(32, np.uint8)
        assert offset_of(arena, next_one) == offset_of(arena, small) - 32  # nothing was taken
        rest = arena.capacity - 64
        arena.empty(rest, np.uint8)  # the whole rest still fits
        with pytest.raises(devalloc.ArenaOverflowError):
            arena.empty(1, np.uint8)


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((-1, np.float32), ValueError, "negative"),
        (((2, -3), np.float32), ValueError, "negative"),
        (([2, 3], np.float32), TypeError, "tuple of ints"),
        ((2.5, np.float32), TypeError, "int or a tuple"),
        ((4, object), TypeError, "number or bool"),
        ((4, "not a dtype"), TypeError, "number or bool"),
    ],
)
def test_bad_requests_say_what_was_expected(arena, args, error, message):
    with arena.frame(), pytest.raises(error, match=message):
        arena.empty(*args)


def test_outside_a_frame_or_on_a_closed_arena_there_are_no_frame_arrays():
    arena = devalloc.Arena(4096)
    with pytest.raises(devalloc.DevallocError, match=r"inside `with arena\.frame"):
        arena.empty(4, np.float32)
    arena.close()
    with pytest.raises(devalloc.ArenaClosedError):
        arena.zeros(4, np.float32)


def test_stats_count_frame_arrays(arena):
    with arena.frame():
        arena.empty(100, np.uint8)  # 112 bytes with its 16-byte alignment
        lowest = arena.empty(256, np.uint8)  # on 256: 256 more, and the gap below the first
        stats = arena.stats()
        assert stats.frame_array_bytes == arena.capacity - offset_of(arena, lowest)
        assert stats.frame_array_bytes >= 112 + 256
        assert stats.current_bytes == stats.frame_array_bytes  # no kernel allocated yet
    stats = arena.stats()
    assert stats.frame_array_bytes == 0 and stats.peak_frame_array_bytes >= 368
    assert stats.peak_bytes >= stats.peak_frame_array_bytes


@devalloc.kernel
def scale_into_scratch(arena, src, out):
    """out[t] = 2 * src[t], through a scratch value allocated in the kernel."""
    t = cuda.grid(1)
    scratch = arena.alloc(1, np.float32)
    if t < src.size and scratch.size == 1:
        scratch[0] = src[t] * 2
        out[t] = scratch[0]


@cuda.jit
def add_one(values):
    t = cuda.grid(1)
    if t < values.size:
        values[t] += 1


def test_frame_arrays_feed_devalloc_and_plain_kernels(arena):
    with arena.frame():
        src = arena.empty(64, np.float32)
        out = arena.empty(64, np.float32)
        values = fill(src, 1)
        out.copy_to_device(poisoned(64, np.float32))
        add_one[2, 32](src)
        scale_into_scratch[2, 32](arena, src, out)
        np.testing.assert_array_equal(out.copy_to_host(), 2 * (values + 1))


@devalloc.kernel
def offsets_of(arena, first, second, out):
    out[0] = arena.offset(first)
    out[1] = arena.offset(second)


def test_a_kernel_finds_the_offsets_of_arena_arrays_it_is_given(arena):
    """`arena.offset` of arrays passed in (a frame array, a device view), not only
    of those the kernel allocated (the simulator once refused them, as no array)."""
    out = cuda.to_device(poisoned(2, np.int64))
    with arena.frame():
        image = arena.empty(40, np.float32)
        view = arena.device_view(128, 8, np.int32)
        offsets_of[1, 1](arena, image, view, out)
        assert list(out.copy_to_host()) == [offset_of(arena, image), 128]
    assert offset_of(arena, image) > 128


def test_frame_arrays_on_a_stream_are_bound_to_it(arena):
    stream = cuda.stream()
    with arena.frame():
        array = arena.empty(8, np.int32, stream=stream)
        assert array.stream is stream
        values = fill(array, 2)
        np.testing.assert_array_equal(array.copy_to_host(stream=stream), values)


def test_a_captured_frame_array_is_the_same_memory_at_every_replay(arena):
    with arena.capture() as graph:
        src = arena.empty(64, np.float32)
        out = arena.empty(64, np.float32)
        scale_into_scratch[2, 32](arena, src, out)
    for replay in range(3):
        values = fill(src, replay)
        out.copy_to_device(poisoned(64, np.float32))
        graph.replay()
        np.testing.assert_array_equal(out.copy_to_host(), 2 * values)
        # The graph's arrays are its own: a frame in between stops below them,
        # and the graph's input, filled before the frame, is intact after it.
        values = fill(src, replay + 10)
        with pytest.raises(devalloc.ArenaOverflowError), arena.frame():
            offsets, lengths = take_until_full(arena, lanes=32, calls=8, nbytes=4096)
        assert max(end for _, end in spans_of(offsets, lengths)) <= offset_of(arena, out)
        np.testing.assert_array_equal(src.copy_to_host(), values)
    graph.close()  # its arrays are the arena's again
    with pytest.raises(devalloc.ArenaOverflowError), arena.frame():
        offsets, lengths = take_until_full(arena, lanes=32, calls=8, nbytes=4096)
    assert max(end for _, end in spans_of(offsets, lengths)) > offset_of(arena, out)


def capture_doubling(arena, n=64):
    """A graph doubling its own input array into its own output array."""
    with arena.frame():  # (launched once before it is captured, as CUDA needs)
        scratch = arena.empty(n, np.float32)
        scale_into_scratch[2, 32](arena, scratch, scratch)
    with arena.capture() as graph:
        src = arena.empty(n, np.float32)
        out = arena.empty(n, np.float32)
        scale_into_scratch[2, 32](arena, src, out)
    return graph, src, out


def test_two_graphs_keep_their_arrays_apart(arena):
    """Each graph's arrays are its own (inputs filled for both, then both
    replayed: each doubles its own), and a graph replayed after another was
    captured allocates below that one's arrays too."""
    first, first_src, first_out = capture_doubling(arena)
    second, second_src, second_out = capture_doubling(arena)
    spans = sorted((offset_of(arena, a), offset_of(arena, a) + a.nbytes)
                   for a in (first_src, first_out, second_src, second_out))  # fmt: skip
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    for turn in range(2):
        ones, twos = fill(first_src, turn), fill(second_src, 50 + turn)
        first_out.copy_to_device(poisoned(64, np.float32))
        second_out.copy_to_device(poisoned(64, np.float32))
        first.replay()
        second.replay()
        np.testing.assert_array_equal(first_out.copy_to_host(), 2 * ones)
        np.testing.assert_array_equal(second_out.copy_to_host(), 2 * twos)
    requests = np.full((64, 64), 4096)
    got = [cuda.to_device(poisoned(requests.shape, np.int64)) for _ in range(2)]
    record_allocs[1, 64](arena, cuda.to_device(0 * requests), *got)  # (loaded before capture)
    sizes = cuda.to_device(requests)  # (CUDA refuses cuMemAlloc inside a capture)
    with arena.capture() as greedy:  # (takes all it can: no arrays of its own)
        record_allocs[1, 64](arena, sizes, *got)
    ones = fill(first_src, 7)
    greedy.replay()
    with pytest.raises(devalloc.ArenaOverflowError):
        arena.check()
    spans = spans_of(got[0].copy_to_host(), got[1].copy_to_host())
    assert spans and max(end for _, end in spans) <= offset_of(arena, second_src)
    first.replay()
    np.testing.assert_array_equal(first_out.copy_to_host(), 2 * ones)


def test_graphs_give_their_arrays_back_when_closed_or_dropped(arena):
    """Graphs' arrays are a stack: the latest's come back when it is closed
    (or dropped, at the arena's next frame), an earlier one's once those
    captured after it are back too. A capture that raised, or whose graph
    could not be made, keeps none."""
    first, *_ = capture_doubling(arena, 256)
    second, *_ = capture_doubling(arena, 512)
    held = arena.stats().frame_array_bytes
    assert held == 2 * 4 * (256 + 512)
    with pytest.raises(RuntimeError), arena.capture():
        arena.empty(1000, np.float32)
        raise RuntimeError("a capture that fails")
    assert arena.stats().frame_array_bytes == held

    with pytest.raises(devalloc.CudaError), arena.capture() as unmade:
        arena.empty(1000, np.float32)
        recording = unmade._recording
        finish = recording.finish

        def refuse():  # (the capture ended, as a failed instantiation leaves it)
            finish()
            recording.close()
            raise devalloc.CudaError("CUDA_ERROR_INVALID_VALUE", "cuGraphInstantiate")

        recording.finish = refuse
    assert arena.stats().frame_array_bytes == held and not recording.replayable
    first.close()  # below `second`'s arrays: held until those come back
    assert arena.stats().frame_array_bytes == held
    del second
    gc.collect()
    with arena.frame():
        pass
    assert arena.stats().frame_array_bytes == 0
    with arena.frame():  # the whole arena is the frame's again
        whole = arena.empty(arena.capacity, np.uint8)
        assert whole.size == arena.capacity


def test_a_capture_keeps_its_kernels_below_its_frame_arrays(arena):
    requests = np.full((64, 64), 48)
    offsets, lengths = poisoned(requests.shape, np.int64), poisoned(requests.shape, np.int64)
    d_requests, d_offsets, d_lengths = (cuda.to_device(a) for a in (requests, offsets, lengths))
    with arena.capture() as graph:  # (no device memory is allocated while capturing)
        record_allocs[1, 64](arena, d_requests, d_offsets, d_lengths)
        late = arena.empty(8192, np.uint8)  # after the launch: nothing ran yet, so it fits
    values = fill(late, 4)
    graph.replay()
    with pytest.raises(devalloc.ArenaOverflowError):
        arena.check()
    spans = spans_of(d_offsets.copy_to_host(), d_lengths.copy_to_host())
    assert spans and max(end for _, end in spans) <= offset_of(arena, late)
    np.testing.assert_array_equal(late.copy_to_host(), values)


def test_another_threads_request_waits_for_the_frame_and_gets_none_of_it(arena):
    results = []
    with arena.frame():
        mine = arena.empty(16, np.uint8)

        def other():
            try:
                arena.empty(16, np.uint8)
            except devalloc.DevallocError as error:
                results.append(error)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()  # waiting for the frame to exit
        assert offset_of(arena, arena.empty(16, np.uint8)) == offset_of(arena, mine) - 16
    thread.join(10)
    assert len(results) == 1 and "inside `with arena.frame" in str(results[0])


@pytest.mark.skipif(SIMULATOR, reason="the simulator's arrays have no __cuda_array_interface__")
@pytest.mark.gpu
def test_cupy_and_torch_read_frame_arrays_without_a_copy(arena):
    with arena.frame():
        array = arena.empty((4, 8), np.float32)
        values = fill(array, 6)
        cp = pytest.importorskip("cupy")
        as_cupy = cp.asarray(array)
        assert as_cupy.data.ptr == address(array)
        np.testing.assert_array_equal(cp.asnumpy(as_cupy), values)
        torch = pytest.importorskip("torch")
        as_torch = torch.as_tensor(array, device="cuda")
        assert as_torch.data_ptr() == address(array)
        np.testing.assert_array_equal(as_torch.cpu().numpy(), values)


@devalloc.kernel
def count_up(arena, counts, seen):
    """seen[t] = what counts[t] held; then counts[t] += t + 1."""
    t = cuda.grid(1)
    if t < counts.size:
        seen[t] = counts[t]
        counts[t] += t + 1


def test_zeros_in_a_capture_are_zeros_at_every_replay(arena):
    seen = cuda.to_device(poisoned(32, np.int64))
    with arena.capture() as graph:
        counts = arena.zeros(32, np.int64)
        count_up[1, 32](arena, counts, seen)
    for _ in range(3):
        seen.copy_to_device(poisoned(32, np.int64))
        graph.replay()
        np.testing.assert_array_equal(seen.copy_to_host(), np.zeros(32, np.int64))
        np.testing.assert_array_equal(counts.copy_to_host(), np.arange(1, 33))


def test_a_captured_frame_array_is_bound_to_where_replays_go(arena):
    # Not to graph.stream: the replays' stream would not wait for what the user
    # queues there (it is a non-blocking stream), such as filling the array.
    stream = cuda.stream()
    with arena.capture() as graph:
        assert arena.empty(8, np.int32).stream is not graph.stream
        assert arena.empty(8, np.int32, stream=stream).stream is stream


@pytest.mark.parametrize(
    "shape, expected", [(np.int64(6), (6,)), ((np.int32(2), np.int64(3)), (2, 3)), ((), ())]
)
def test_numpy_integers_and_no_dimensions_make_shapes(arena, shape, expected):
    with arena.frame():
        array = arena.empty(shape, np.float64)
        assert array.shape == expected and array.size == int(np.prod(expected))
        values = fill(array, 8)
        np.testing.assert_array_equal(array.copy_to_host(), values)


@pytest.mark.parametrize(
    "shape, expected", [(np.array(3), (3,)), ((np.array(2), 3), (2, 3))], ids=["0-d", "in-tuple"]
)
def test_a_zero_dimensional_integer_array_makes_a_shape_as_in_numpy(arena, shape, expected):
    # NumPy takes a 0-d integer array as a dimension; arena.empty raised
    # "unhashable type: 'numpy.ndarray'" from its cache of shapes.
    assert np.empty(shape).shape == expected
    with arena.frame():
        for _ in range(2):
            array = arena.empty(shape, np.float32)
            assert array.shape == expected and array.dtype == np.float32
