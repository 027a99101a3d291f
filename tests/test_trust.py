"""What fresh probing broke (issue 7), each as a test: failed requests that must
fail alone, kernel parameters named like the wrapper's own variables, host
threads, overflow reports at a launch, bad sizes, simulator/GPU agreement,
dropped arenas and unhelpful errors."""

import gc
import threading
import time

import numba
import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc.backend import SIMULATOR
from helpers import STRATEGIES, poisoned, run_threads

pytestmark = pytest.mark.parametrize("strategy", STRATEGIES)


@devalloc.kernel
def ask_in_turn(arena, sizes, got):
    """Thread t asks sizes[t, j] bytes in turn and records what it got."""
    t = cuda.grid(1)
    if t < sizes.shape[0]:
        for j in range(sizes.shape[1]):
            buf = arena.alloc(sizes[t, j], np.uint8)
            got[t, j] = buf.size
            if buf.size > 0:
                buf[0] = 1
                buf[buf.size - 1] = 2


def ask(arena, sizes, threads=None):
    sizes = np.atleast_2d(np.asarray(sizes, np.int64))
    got = poisoned(sizes.shape, np.int64)
    threads = threads or sizes.shape[0]
    ask_in_turn[-(-sizes.shape[0] // threads), threads](arena, sizes, got)
    return got


# -- 1. a request that does not fit fails alone ------------------------------------------


def test_try_big_then_fall_back_smaller(strategy):
    with devalloc.Arena(64 << 10, strategy=strategy) as arena:
        got = ask(arena, [[40960, 40960, 16, 1024]])
        np.testing.assert_array_equal(got, [[40960, 0, 16, 1024]])
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        assert (info.value.failed, info.value.requested) == (1, 40960)


@devalloc.kernel
def try_big_then_small(arena, big, small, got):
    """Each thread asks `big` bytes with `try_alloc`, and if it got none, `small`
    with `alloc`; it writes its id over what it got, records the size, then
    checks the id is still there (no other thread's memory overlaps)."""
    t = cuda.grid(1)
    if t < got.shape[0]:
        buf = arena.try_alloc(big[t], np.uint8)
        if buf.size == 0:
            buf = arena.alloc(small[t], np.uint8)
        for i in range(buf.size):
            buf[i] = t & 0xFF
        cuda.syncthreads()
        intact = 1
        for i in range(buf.size):
            if buf[i] != t & 0xFF:
                intact = 0
        got[t, 0] = buf.size
        got[t, 1] = intact


def test_try_alloc_fails_without_a_report_so_falling_back_works(strategy):
    """`try_alloc` is `alloc` for a request that may not fit: the threads the
    arena has no room for fall back, and nothing is reported or counted as a
    failure. Invalid sizes are reported still (a bug, not a lack of room), and
    the fallback's own failures are."""
    threads = 64
    big, small = np.full(threads, 5000), np.full(threads, 16)  # 12 bigs fit, and 4 KiB
    with devalloc.Arena(64 << 10, strategy=strategy) as arena:
        for _ in range(2):  # a second launch: no report waiting
            got = poisoned((threads, 2), np.int64)
            try_big_then_small[1, threads](arena, big, small, got)
            sizes = got[:, 0]
            assert set(sizes) == {5000, 16} and (got[:, 1] == 1).all()
            assert 0 < 5000 * np.count_nonzero(sizes == 5000) <= 64 << 10
        arena.check()
        assert arena.stats().failed_allocs == 0
        big[7], small[7] = -5, 100  # an invalid size: reported, and the fallback serves
        got = poisoned((threads, 2), np.int64)
        try_big_then_small[1, threads](arena, big, small, got)
        assert got[7, 0] == 100
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        assert (info.value.failed, info.value.requested) == (1, -5)
        big[:], small[:] = 1 << 20, 1 << 20  # neither fits: only alloc's failures count
        try_big_then_small[1, threads](arena, big, small, got)
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        assert info.value.failed == threads and arena.stats().failed_allocs == 1 + threads


def test_one_lane_asking_too_much_fails_alone(strategy):
    sizes = np.full((32, 1), 64)
    sizes[5] = 70000  # more than the whole arena
    with devalloc.Arena(64 << 10, strategy=strategy) as arena:
        got = ask(arena, sizes)
        expected = sizes.copy()
        expected[5] = 0
        np.testing.assert_array_equal(got, expected)
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        assert (info.value.failed, info.value.requested) == (1, 70000)


def test_one_lane_asking_more_than_is_left_fails_alone(strategy):
    # Lane 0 first takes 60 KiB; then, in one call, lane 0 asks 8 KiB (4 KiB are
    # left) while the 31 others ask 64 B each (1984 B, which fit).
    sizes = np.zeros((32, 2), np.int64)
    sizes[0] = [60 << 10, 8 << 10]
    sizes[1:, 1] = 64
    with devalloc.Arena(64 << 10, strategy=strategy) as arena:
        got = ask(arena, sizes)
        assert got[0].tolist() == [60 << 10, 0]
        assert (got[1:, 1] == 64).all()
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        assert (info.value.failed, info.value.requested) == (1, 8 << 10)


def test_after_a_failure_the_rest_of_the_arena_is_still_there(strategy):
    # 8 threads ask more than the arena holds, then ask for what must remain.
    with devalloc.Arena(1 << 16, strategy=strategy) as arena:
        got = ask(arena, [[4096, 1 << 17, 1 << 20, 2048]] * 8)
        assert (got[:, 0] == 4096).all() and (got[:, 1:3] == 0).all()
        assert (got[:, 3] == 2048).all()
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        assert (info.value.failed, info.value.requested) == (16, 1 << 20)


# One launch of the hypothesis program (test_stateful) that failed on the H200:
# two warps, `bump`, 4096 B, align 16. Every lane of the first warp retried alone
# (its group asked more than the arena), and from lane 20 on all failed with
# 1648 B free: a refill's rest was dropped. X: more than any arena.
X = 1 << 40
FOUND_ON_THE_H200 = [
    47, 7, 12563, 0, 0, X, 15, 9264, 0, 7, 36, 9110, 127, X, 0, -38, 411, 420, 40, 0,
    541, 662, -91, 6441, 2938, 617, -84, 700, 4098, 0, X, 15996, 58, X, 4988, 0, 20, 1183, X,
]  # fmt: skip


def random_sizes():
    sizes = np.random.default_rng(7).integers(1, 600, size=(128, 8))
    sizes[::32] = 1 << 16  # lane 0 of each warp asks for the whole arena
    return sizes


@pytest.mark.parametrize(
    "capacity, sizes, threads",
    [(4096, np.array(FOUND_ON_THE_H200)[:, None], 32), (1 << 16, random_sizes(), 64)],
    ids=["found on the H200", "random"],
)
def test_lanes_retrying_alone_waste_nothing(strategy, capacity, sizes, threads):
    """No warp's group request fits, so its lanes retry alone. What they leave
    unused is less than the smallest request that failed (`bump`), or that plus
    slab tails (`warp_slab`)."""
    with devalloc.Arena(capacity, strategy=strategy, align=16) as arena:
        got = ask(arena, sizes, threads=threads)
        with pytest.raises(devalloc.ArenaOverflowError):
            arena.check()
    granted = got > 0
    assert (got[granted] == sizes[granted]).all() and (got[~granted] == 0).all()
    gap = capacity - (-(-sizes[granted] // 16) * 16).sum()
    possible = (sizes > 0) & (sizes <= capacity)
    tails = 0 if strategy == "bump" else capacity // 4
    assert 0 <= gap < sizes[~granted & possible].min() + tails


@pytest.mark.parametrize("nbytes", [1, 15, 16, 17, 100, 255, 256, 1000, 4096])
def test_any_capacity_holds_one_request_of_its_size(strategy, nbytes):
    """Capacities round up to 16 bytes; one request of the whole capacity fits,
    in any arena, however small; one byte more does not."""
    with devalloc.Arena(nbytes, strategy=strategy) as arena:
        capacity = arena.capacity
        assert capacity == -(-nbytes // 16) * 16
        assert ask(arena, [[capacity]]).tolist() == [[capacity]]
        assert ask(arena, [[16] * (capacity // 16)])[0].tolist() == [16] * (capacity // 16)
        arena.check()
        assert ask(arena, [[capacity + 1, 16]]).tolist() == [[0, 16]]
        with pytest.raises(devalloc.ArenaOverflowError):
            arena.check()


# -- 2. every valid parameter name works --------------------------------------------------


def test_parameters_named_like_the_wrappers_variables(strategy):
    @devalloc.kernel
    def odd(
        arena, state, handle, hdr, slot, warp, launch, warps, user, cuda, int64, array_at,
        make_arena, enter_block, leave_block, _devalloc_handle, odd, out,
    ):  # fmt: skip
        buf = arena.alloc(3, np.int64)
        buf[0] = state[0] + handle[0] + hdr[0] + slot[0] + warp[0] + launch[0] + warps[0]
        buf[1] = user[0] + cuda[0] + int64[0] + array_at[0] + make_arena[0] + enter_block[0]
        buf[2] = leave_block[0] + _devalloc_handle[0] + odd[0]
        out[0] = buf[0] * 1000000 + buf[1] * 1000 + buf[2]

    values = [np.array([v], np.int64) for v in range(1, 17)]
    out = poisoned(1, np.int64)
    with devalloc.Arena(4096, strategy=strategy) as arena:
        odd[1, 1](arena, *values, out)
    expected = sum(range(1, 8)) * 1000000 + sum(range(8, 14)) * 1000 + sum(range(14, 17))
    assert out[0] == expected


# -- 3. host threads -------------------------------------------------------------------


@devalloc.kernel
def stamp(arena, value, out):
    """Every thread takes 16 bytes, writes `value` there and copies it out."""
    t = cuda.grid(1)
    buf = arena.alloc(2, np.int64)
    if buf.size == 2:
        buf[0] = value
        buf[1] = t
        out[t] = buf[0] * 1000 + buf[1]


@pytest.mark.parametrize("shared", [True, False], ids=["one arena", "arena each"])
def test_host_threads_launching(strategy, shared):
    threads, launches, lanes = 4, 3, 32
    common = devalloc.Arena(lanes * 16, strategy=strategy)  # exactly one launch's worth
    results = {}

    def work(i):
        arena = common if shared else devalloc.Arena(lanes * 16, strategy=strategy)
        for n in range(launches):
            out = poisoned(lanes, np.int64)
            stamp[1, lanes](arena, 100 * i + n, out)
            results[i, n] = out
        if not shared:
            arena.close()

    run_threads(threads, work)
    common.close()  # raises if any launch overflowed
    for (i, n), out in results.items():
        np.testing.assert_array_equal(out, (100 * i + n) * 1000 + np.arange(lanes))


def test_a_frame_belongs_to_its_thread(strategy):
    """Another thread's launch waits until the frame exits; the frame's memory
    stays its own meanwhile."""
    events = []
    opened = threading.Event()
    with devalloc.Arena(64 * 16, strategy=strategy) as arena:
        first = poisoned(32, np.int64)

        def other():
            opened.wait(60)
            out = poisoned(32, np.int64)
            stamp[1, 32](arena, 7, out)
            events.append(("other launched", out))

        thread = threading.Thread(target=other)
        thread.start()
        with arena.frame():
            stamp[1, 32](arena, 1, first)
            opened.set()
            time.sleep(0.3)  # the other thread is waiting for the frame now
            events.append(("frame exits", None))
        thread.join(300)
        assert [name for name, _ in events] == ["frame exits", "other launched"]
        np.testing.assert_array_equal(events[1][1], 7000 + np.arange(32))
    np.testing.assert_array_equal(first, 1000 + np.arange(32))


# -- 4. a report at a launch says it did not launch -----------------------------------------


def test_the_launch_that_finds_a_report_is_not_made_and_says_so(strategy):
    with devalloc.Arena(1 << 12, strategy=strategy) as arena:
        ask(arena, [[5000], [9000], [100]], threads=32)  # two fail: 5000 and 9000 bytes
        out = poisoned(32, np.int64)
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            stamp[1, 32](arena, 3, out)
        error = info.value
        assert (error.kernel, error.not_launched) == ("ask_in_turn", "stamp")
        assert (error.failed, error.requested) == (2, 9000)
        assert "'stamp'" in str(error) and "not made" in str(error)
        np.testing.assert_array_equal(out, poisoned(32, np.int64))  # it did not run
        stamp[1, 32](arena, 3, out)  # reported once: launching again works
        np.testing.assert_array_equal(out, 3000 + np.arange(32))
        assert arena.stats().launches == 2


def test_a_report_names_its_kernel_when_the_launch_numbers_wrap(strategy):
    """Launches are numbered mod 2**SEQ_BITS in their handles; a failure at the
    wrap still names the kernel that failed (white box: the counter is set near
    its end, instead of making 32 K launches)."""
    from devalloc import layout

    with devalloc.Arena(1 << 12, strategy=strategy) as arena:
        out = poisoned(32, np.int64)
        arena._seq = layout.SEQ_MASK - 1
        stamp[1, 32](arena, 4, out)  # number SEQ_MASK
        ask(arena, [[9000]], threads=32)  # number 0: fails
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            stamp[1, 32](arena, 5, out)
        assert (info.value.kernel, info.value.not_launched) == ("ask_in_turn", "stamp")
        np.testing.assert_array_equal(out, 4000 + np.arange(32))


@devalloc.kernel
def ask_too(arena, sizes, got):
    """`ask_in_turn` under another name."""
    t = cuda.grid(1)
    if t < sizes.shape[0]:
        for j in range(sizes.shape[1]):
            got[t, j] = arena.alloc(sizes[t, j], np.uint8).size


def test_a_report_of_several_kernels_names_each(strategy):
    """Failures of two kernels of one replay (launched before the host could
    look) come in one report: it names both, the first to fail as `.kernel`,
    and none that did not fail."""
    with devalloc.Arena(1 << 12, strategy=strategy) as arena:
        out = cuda.to_device(poisoned(32, np.int64))
        first, second = cuda.to_device(np.array([[16]])), cuda.to_device(np.array([[16], [16]]))
        got, got_too = (cuda.to_device(poisoned(shape, np.int64)) for shape in [(1, 1), (2, 1)])
        with arena.frame():  # each launched once before it is captured, as CUDA needs
            stamp[1, 32](arena, 1, out)
            ask_in_turn[1, 1](arena, first, got)
            ask_too[1, 2](arena, second, got_too)
        with arena.capture() as graph:
            stamp[1, 32](arena, 1, out)
            ask_in_turn[1, 1](arena, first, got)
            ask_too[1, 2](arena, second, got_too)
        first.copy_to_device(np.array([[5000]]))
        second.copy_to_device(np.array([[9000], [16]]))
        graph.replay()
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        error = info.value
        assert error.kernel == "ask_in_turn" and error.kernels == ("ask_in_turn", "ask_too")
        assert (error.failed, error.requested) == (2, 9000)
        assert "kernels 'ask_in_turn', 'ask_too' (first in 'ask_in_turn')" in str(error)
        np.testing.assert_array_equal(got_too.copy_to_host(), [[0], [16]])
        ask(arena, [[5000]])  # alone again: one kernel, as before
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        assert info.value.kernels == ("ask_in_turn",)
        assert "in kernel 'ask_in_turn': 1 allocation(s)" in str(info.value)


def test_catching_and_continuing_loses_no_launch(strategy):
    made = 0
    with devalloc.Arena(1 << 10, strategy=strategy) as arena:
        for _ in range(6):
            try:
                ask(arena, [[2048]])  # always overflows
                made += 1
            except devalloc.ArenaOverflowError as error:
                assert error.not_launched == "ask_in_turn"
                ask(arena, [[2048]])  # the launch the report stopped, made again
                made += 1
        with pytest.raises(devalloc.ArenaOverflowError):
            arena.check()
        assert arena.stats().launches == made == 6


# -- 5. bad sizes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "nbytes, error, message",
    [
        (2**63, ValueError, "at most 4398046511104 (4 TiB)"),
        (2**42 + 1, ValueError, "got 4398046511105"),
        (-1, ValueError, "positive"),
    ],
)
def test_impossible_sizes_are_refused_up_front(strategy, nbytes, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        devalloc.Arena(nbytes, strategy=strategy)


@pytest.mark.skipif(not SIMULATOR, reason="the GPU suite reserves beyond the device")
def test_an_arena_the_machine_cannot_hold_is_a_memory_error(strategy):
    with pytest.raises(devalloc.DeviceMemoryError) as info:
        devalloc.Arena(2**41, strategy=strategy)
    error = info.value
    assert isinstance(error, MemoryError) and isinstance(error, devalloc.DevallocError)
    assert error.requested == 2**41 and "2199023255552 bytes" in str(error)
    assert error.free is not None and f"{error.free} bytes free" in str(error)


# -- 6. the simulator accepts what the GPU accepts, and gives the same values -----------------


@pytest.mark.parametrize("dtype", [float, "f4", None], ids=["float", "f4", "None"])
def test_dtypes_the_gpu_refuses_are_refused(strategy, dtype):
    @devalloc.kernel
    def typed(arena, out):
        out[0] = arena.alloc(4, dtype).size

    with devalloc.Arena(4096, strategy=strategy) as arena:
        with pytest.raises(Exception, match="dtype must be a NumPy number or bool type"):
            typed[1, 1](arena, poisoned(1, np.int64))


def test_numba_scalar_types_are_taken_as_the_gpu_takes_them(strategy):
    @devalloc.kernel
    def typed(arena, out):
        small = arena.alloc(3, numba.uint8)
        wide = arena.alloc(2, numba.float64)
        flag = arena.alloc(1, numba.boolean)
        out[0] = small.size + wide.size + flag.size
        out[1] = arena.offset(wide) - arena.offset(small)

    out = poisoned(2, np.int64)
    with devalloc.Arena(4096, strategy=strategy) as arena:
        typed[1, 1](arena, out)
        arena.check()
        with arena.frame():
            image = arena.empty((2, 3), numba.float32)
            assert image.dtype == np.float32 and image.shape == (2, 3)
    assert out[0] == 6 and out[1] > 0


def test_a_dtype_passed_at_run_time_is_refused(strategy):
    @devalloc.kernel
    def typed(arena, dtype, out):
        out[0] = arena.alloc(4, dtype).size

    with devalloc.Arena(4096, strategy=strategy) as arena:
        for dtype in (np.float32, np.dtype(np.int16)):
            with pytest.raises(TypeError, match="a dtype cannot be a kernel argument"):
                typed[1, 1](arena, dtype, poisoned(1, np.int64))


def test_zero_size_arrays_sit_at_offset_minus_one(strategy):
    @devalloc.kernel
    def empties(arena, out):
        out[0] = arena.offset(arena.alloc(0, np.float32))
        out[1] = arena.offset(arena.alloc(1 << 40, np.float32))  # fails
        out[2] = arena.offset(arena.alloc((0, 3), np.int16))
        out[3] = arena.offset(arena.view(-32, 4, np.float32))  # out of bounds
        out[4] = arena.offset(arena.view(64, 0, np.float32))  # in bounds, empty

    out = poisoned(5, np.int64)
    with devalloc.Arena(4096, strategy=strategy) as arena:
        empties[1, 1](arena, out)
        with pytest.raises(devalloc.ArenaOverflowError):
            arena.check()
    assert out.tolist() == [-1, -1, -1, -1, 64]


# Shapes read at run time whose element count wraps int64 if multiplied plainly
# (2**32 x 2**32 is 0 mod 2**64), or comes near 2**62 where the count saturates:
# each must fail (alloc) or be refused (view), never give memory.
HUGE_SHAPES = [
    (1 << 32, 1 << 32, 1),
    (1 << 31, 1 << 31, 4),
    (3, 1 << 61, 1),
    (1 << 20, 0, 7),  # zero elements: an empty array, no failure
    (1 << 40, -1, 2),
    (5, 7, 3),  # a plain one: 105 elements
]


def test_shapes_whose_count_wraps_int64_never_get_memory(strategy):
    @devalloc.kernel
    def shaped(arena, shapes, out):
        i = cuda.grid(1)
        if i < shapes.shape[0]:
            shape = (shapes[i, 0], shapes[i, 1], shapes[i, 2])
            a = arena.alloc(shape, np.int16)
            out[i, 0] = arena.offset(a)
            out[i, 1] = a.size
            v = arena.view(0, shape, np.int16)
            out[i, 2] = arena.offset(v)
            out[i, 3] = v.size

    shapes = np.array(HUGE_SHAPES, np.int64)
    out = poisoned((len(shapes), 4), np.int64)
    with devalloc.Arena(4096, strategy=strategy) as arena:
        shaped[1, len(shapes)](arena, cuda.to_device(shapes), out)
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
    assert info.value.failed == 4  # the three huge counts and the negative dimension
    assert out[[0, 1, 2, 4]].tolist() == [[-1, 0, -1, 0]] * 4
    assert out[3].tolist() == [-1, 0, 0, 0]  # empty: no failure, and a view in bounds
    assert out[5, 0] >= 0 and out[5, 1] == 105 and out[5, 2:].tolist() == [0, 105]


@pytest.mark.parametrize(
    "config, message",
    [
        ((1, 1025), "1 to 1024 along x"),
        ((1, (32, 33)), "at most 1024 threads"),
        ((1, (1, 1, 65)), "1 to 64 along z"),
        ((0, 32), "1 to 2147483647 along x"),
        ((1, 0), "1 to 1024 along x"),
        ((1, 2.5), "an int or a tuple of 1-3 ints"),
        ((1, (1, 1, 1, 1)), "an int or a tuple of 1-3 ints"),
    ],
)
def test_launch_configurations_cuda_refuses_are_refused(strategy, config, message):
    with pytest.raises((ValueError, TypeError), match=message):
        stamp[config]


def test_a_kernel_that_raises_leaves_the_next_launch_an_empty_arena(strategy):
    @devalloc.kernel
    def fragile(arena, boom, out):
        t = cuda.grid(1)
        buf = arena.alloc(64, np.uint8)
        out[t] = arena.offset(buf)
        if boom[0] == 1 and t == 3:
            raise ValueError("boom")

    first = poisoned(32, np.int64)
    again = poisoned(32, np.int64)
    with devalloc.Arena(32 * 64, strategy=strategy) as arena:  # exactly one launch's worth
        if SIMULATOR:
            with pytest.raises(ValueError, match="boom"):
                fragile[1, 32](arena, np.array([1]), first)
        fragile[1, 32](arena, np.array([0]), again)
        assert (again >= 0).all() and len(set(again.tolist())) == 32


# -- 7. dropped arenas ---------------------------------------------------------------------------


@pytest.mark.skipif(not SIMULATOR, reason="counts the simulator's registered buffers")
def test_dropped_arenas_give_their_memory_back(strategy):
    from devalloc.simulator import device_memory

    gc.collect()
    before = len(device_memory._buffers)
    for _ in range(50):
        arena = devalloc.Arena(1 << 20, strategy=strategy)
        ask(arena, [[64]])
    del arena
    gc.collect()
    devalloc.Arena(16).close()  # a safe point: dropped arenas are released
    assert len(device_memory._buffers) == before


def test_a_dropped_arena_warns_of_an_unreported_overflow(strategy):
    arena = devalloc.Arena(1024, strategy=strategy)
    ask(arena, [[4096]])
    del arena
    gc.collect()
    with pytest.warns(devalloc.ArenaOverflowWarning, match="ask_in_turn"):
        devalloc.Arena(16).close()  # the next safe point reports it


# -- 8. errors that say what to do ------------------------------------------------------------


def test_a_plain_kernel_given_an_arena_says_what_to_do(strategy):
    @cuda.jit
    def plain(arena, out):
        out[0] = arena.alloc(4, np.float32).size

    with devalloc.Arena(4096, strategy=strategy) as arena:
        with pytest.raises(TypeError, match=r"@devalloc\.kernel"):
            plain[1, 1](arena, poisoned(1, np.int64))


@devalloc.kernel
def tiles_after_an_early_return(arena, n, rounds, offsets):
    """The common shape of a tiled kernel: threads past the end return at once,
    the others meet at `cuda.syncthreads()` (the threads that returned do not
    count) and allocate after each."""
    t = cuda.grid(1)
    if t >= n:
        return
    for r in range(rounds):
        cuda.syncthreads()
        buf = arena.alloc(2, np.int64)
        buf[0] = t
        buf[1] = r
        offsets[t, r] = arena.offset(buf)


def test_threads_returning_early_before_a_barrier_leave_the_block_intact(strategy):
    """A block's exit work (its counts, its slab's unused tail handed back) waits
    for its last thread, not for a barrier the early returners would share with
    the others' `cuda.syncthreads()`: a frame's next launch then allocates
    nothing any thread of this one holds, and every allocation is counted."""
    n, rounds = 40, 3
    offsets = poisoned((n, rounds), np.int64)
    after = poisoned((64, 1), np.int64)
    with devalloc.Arena(1 << 16, strategy=strategy) as arena:
        with arena.frame():
            tiles_after_an_early_return[1, 64](arena, n, rounds, offsets)
            tiles_after_an_early_return[1, 64](arena, 64, 1, after)
            memory = arena.device_view(0, arena.capacity // 8, np.int64).copy_to_host()
        stats = arena.stats()
    assert stats.total_allocs == n * rounds + 64 and stats.failed_allocs == 0
    first = sorted(offsets.ravel())
    assert len(set(first)) == n * rounds and not set(first) & set(after.ravel())
    for t in range(n):
        for r in range(rounds):
            assert tuple(memory[offsets[t, r] // 8 : offsets[t, r] // 8 + 2]) == (t, r)
