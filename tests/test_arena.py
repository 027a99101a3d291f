"""The host API: construction, bad input, launches, lifetimes, overflow reports, stats."""

import numpy as np
import pytest
from numba import cuda

import devalloc
from helpers import poisoned


@devalloc.kernel
def take(arena, nbytes, out):
    """Thread t allocates nbytes[0] bytes, fills them, and records the offset."""
    t = cuda.grid(1)
    buf = arena.alloc(nbytes[0], np.uint8)
    for i in range(buf.size):
        buf[i] = (t + i) & 0xFF
    out[t] = arena.offset(buf) if buf.size > 0 else -1


@devalloc.kernel
def read_back(arena, offsets, nbytes, out):
    """Thread t reads what `take` wrote at offsets[t], through arena.view."""
    t = cuda.grid(1)
    buf = arena.view(offsets[t], nbytes[0], np.uint8)
    ok = buf.size == nbytes[0]
    for i in range(buf.size):
        ok = ok and buf[i] == (t + i) & 0xFF
    out[t] = 1 if ok else 0


def launch_take(arena, nbytes, threads=32):
    out = poisoned(threads, np.int64)
    take[1, threads](arena, np.array([nbytes]), out)
    return out


# -- construction and bad input ---------------------------------------------------------


def test_defaults_and_properties():
    with devalloc.Arena(1 << 20) as arena:
        assert arena.capacity == 1 << 20
        assert arena.strategy == "warp_slab" and arena.align == 256
        assert "capacity=1048576" in repr(arena)
        assert not arena.closed
    assert arena.closed and "closed" in repr(arena)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"nbytes": 0}, ValueError, "nbytes must be positive (got 0)"),
        ({"nbytes": -4}, ValueError, "got -4"),
        ({"nbytes": 1.5}, TypeError, "nbytes must be an int (got float 1.5)"),
        ({"nbytes": True}, TypeError, "got bool"),
        ({"nbytes": "64"}, TypeError, "got str"),
        ({"nbytes": 64, "align": 96}, ValueError, "power of two from 16 to 1048576 (got 96)"),
        ({"nbytes": 64, "align": 8}, ValueError, "(got 8)"),
        ({"nbytes": 64, "align": 1 << 21}, ValueError, "(got 2097152)"),
        ({"nbytes": 64, "strategy": "buddy"}, ValueError, "got 'buddy'"),
    ],
)
def test_bad_construction_says_what_was_expected(kwargs, error, message):
    with pytest.raises(error) as info:
        devalloc.Arena(kwargs.pop("nbytes"), **kwargs)
    assert message in str(info.value)


def test_kernel_decorator_forms():
    @devalloc.kernel()
    def bare(arena, out):
        out[0] = arena.alloc(4, np.float32).size

    @devalloc.kernel(fastmath=True)
    def tuned(arena, out):
        out[0] = arena.alloc(6, np.float32).size * 1.0

    # Options for the GPU's machine code only: the simulator runs the kernel as written.
    @devalloc.kernel(max_registers=32, launch_bounds=64)
    def capped(arena, out):
        out[0] = arena.alloc(10, np.float32).size

    out = poisoned(1, np.float32)
    with devalloc.Arena(4096) as arena:
        bare[1, 1](arena, out)
        assert out[0] == 4
        tuned[1, 1, 0](arena, out)
        assert out[0] == 6
        capped[1, 32](arena, out)
        assert out[0] == 10


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: devalloc.kernel("void(int32)"), "takes no signature"),
        (lambda: devalloc.kernel(lambda: None), "plain positional parameters"),
        (lambda: devalloc.kernel(lambda arena, *rest: None), "plain positional parameters"),
        (lambda: devalloc.kernel(lambda arena, n=3: None), "plain positional parameters"),
        (lambda: devalloc.kernel(cache=True)(lambda arena: None), "cache=True"),
        # Options the simulator ignores are checked on both, as the GPU would.
        (lambda: devalloc.kernel(max_registers=0)(lambda arena: None), "got 0"),
        (lambda: devalloc.kernel(max_registers=256)(lambda arena: None), "1 to 255"),
        (lambda: devalloc.kernel(max_registers="32")(lambda arena: None), "got '32'"),
        (lambda: devalloc.kernel(max_registers=True)(lambda arena: None), "got True"),
        (lambda: devalloc.kernel(launch_bounds=(64, 0))(lambda arena: None), "got .64, 0.."),
        (lambda: devalloc.kernel(launch_bounds=(1, 2, 3, 4))(lambda arena: None), "1-3 of them"),
        (lambda: devalloc.kernel(launch_bounds=-32)(lambda arena: None), "got -32"),
    ],
)
def test_bad_kernels_are_refused(make, message):
    with pytest.raises((TypeError, ValueError), match=message.replace("=", ".")):
        make()


def test_bad_launches_are_refused(arena):
    with pytest.raises(TypeError, match=r"first argument must be a devalloc\.Arena \(got ndarray"):
        take[1, 1](np.zeros(4), np.array([4]), np.zeros(1))
    with pytest.raises(TypeError, match=r"take\[blocks, threads\]\(arena"):
        take(arena, np.array([4]), np.zeros(1))
    with pytest.raises(ValueError, match="launch configuration"):
        take[1](arena, np.array([4]), np.zeros(1))


def test_a_block_larger_than_the_launch_bounds_is_refused_before_launching(arena):
    """The GPU refuses such a launch and the simulator would run it: both refuse
    it, before anything is queued; within the bound it runs."""

    @devalloc.kernel(launch_bounds=(64, 2))
    def bounded(arena, out):
        out[cuda.grid(1)] = arena.alloc(3, np.int64).size

    out = poisoned(64, np.int64)
    with pytest.raises(ValueError, match=r"at most 64 threads per block \(got \(16, 8\): 128\)"):
        bounded[1, (16, 8)](arena, out)
    assert (out == poisoned(64, np.int64)).all()
    bounded[1, 64](arena, out)
    assert (out == 3).all()


# -- lifetimes: launches, frames, resets ----------------------------------------------


def test_every_launch_outside_a_frame_starts_empty(arena):
    first = launch_take(arena, 64)
    second = launch_take(arena, 64)
    np.testing.assert_array_equal(first, second)  # the same memory, handed out again
    assert arena.stats().current_bytes == 0


def test_memory_lives_across_launches_inside_a_frame(arena):
    checks = poisoned(32, np.int64)
    with arena.frame():
        first = launch_take(arena, 40)
        read_back[1, 32](arena, first, np.array([40]), checks)
        second = launch_take(arena, 40)
        assert arena.stats().current_bytes > 0
    assert (checks == 1).all()  # the second kernel saw what the first wrote
    assert not set(first) & set(second)  # and the third got fresh memory
    assert launch_take(arena, 40).tolist() == first.tolist()  # the frame's exit reset it


def test_reset_inside_a_frame_starts_over(arena):
    with arena.frame():
        first = launch_take(arena, 16)
        arena.reset()
        again = launch_take(arena, 16)
    np.testing.assert_array_equal(first, again)


def test_frame_exit_resets_even_when_the_body_raises(arena):
    with pytest.raises(KeyError, match="mine"), arena.frame():
        first = launch_take(arena, 16)
        raise KeyError("mine")
    np.testing.assert_array_equal(launch_take(arena, 16), first)


def test_frames_do_not_nest(arena):
    with arena.frame(), pytest.raises(devalloc.DevallocError, match="do not nest"):
        with arena.frame():
            pass


def test_device_view_of_nothing_at_offset_minus_one_is_empty(arena):
    """Where a kernel's `alloc(0, ...)` (or a failed request) lies: so that
    results of any length, none included, gather alike."""
    for dims in (0, (0, 3)):
        view = arena.device_view(-1, dims, np.int32)
        assert view.size == 0 and view.shape == np.empty(dims).shape
    with pytest.raises(ValueError, match="does not fit"):
        arena.device_view(-1, 1, np.int32)


def test_device_view_reads_what_kernels_wrote(arena):
    offsets = launch_take(arena, 24)
    for t in (0, 5, 31):
        view = arena.device_view(int(offsets[t]), (3, 8), np.uint8).copy_to_host()
        np.testing.assert_array_equal(view.ravel(), (t + np.arange(24)) & 0xFF)


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((-16, 4, np.float32), ValueError, "does not fit"),
        (((1 << 16) - 8, 4, np.float32), ValueError, "does not fit"),
        ((2, 4, np.float32), ValueError, "multiple of the float32 item size 4 (got 2)"),
        ((0, -1, np.float32), ValueError, "negative dimensions"),
        ((0, 2.5, np.float32), TypeError, "shape must be an int or a tuple of ints"),
        ((0, 4, "U8"), TypeError, "number or bool"),
        ((0, 4, object), TypeError, "number or bool"),
    ],
)
def test_device_view_refuses_bad_input(arena, args, error, message):
    with pytest.raises(error) as info:
        arena.device_view(*args)
    assert message in str(info.value)


# -- failure reports ----------------------------------------------------------------------


def test_overflow_is_reported_once_at_the_next_launch(arena):
    launch_take(arena, 4096)  # 32 x 4 KiB from 64 KiB: half the requests fail
    with pytest.raises(devalloc.ArenaOverflowError) as info:
        launch_take(arena, 16)
    error = info.value
    assert isinstance(error, MemoryError) and isinstance(error, devalloc.DevallocError)
    assert (error.kernel, error.capacity, error.requested) == ("take", 1 << 16, 4096)
    assert "'take'" in str(error) and "4096 bytes" in str(error) and "65536" in str(error)
    launch_take(arena, 16)  # reported once: the arena carries on
    arena.check()
    assert arena.stats().failed_allocs == 16


@pytest.mark.parametrize("where", ["check", "stats", "frame", "close"])
def test_overflow_is_never_lost(where):
    arena = devalloc.Arena(1 << 12)
    with pytest.raises(devalloc.ArenaOverflowError, match="'take'"):
        if where == "frame":
            with arena.frame():
                launch_take(arena, 1024)
        else:
            launch_take(arena, 1024)
            getattr(arena, where)()
    arena.close()


def test_frame_without_check_defers_the_report(arena):
    with arena.frame(check=False):
        launch_take(arena, 8192)
    with pytest.raises(devalloc.ArenaOverflowError):
        arena.check()


# -- statistics ---------------------------------------------------------------------


def test_stats_count_what_happened(arena):
    launch_take(arena, 100)  # 32 allocations of 100 bytes
    with arena.frame():
        launch_take(arena, 16)
        launch_take(arena, 16)
        during = arena.stats()
    arena.reset()  # nothing launched since the frame's exit: not a reset
    after = arena.stats()
    assert isinstance(after, devalloc.ArenaStats)
    assert during.current_bytes >= 2 * 32 * 16 and after.current_bytes == 0
    assert after.peak_bytes >= 32 * 100 and after.peak_bytes >= during.current_bytes
    assert after.total_allocs == 96 and after.failed_allocs == 0
    assert during.requested_bytes == 2 * 32 * 16 and after.requested_bytes == 0
    assert after.peak_requested_bytes == 32 * 112  # 100 B rounds up to 112
    assert (after.launches, after.resets, after.device_mallocs) == (3, 2, 1)
    assert after.capacity_bytes == 1 << 16
    with pytest.raises(AttributeError):
        after.launches = 0  # frozen


def test_counts_of_many_blocks_add_up_across_the_count_lines():
    """Blocks add their counts to one of several header lines each (by block
    index, so they do not queue on the cursor's line); stats and the fold of a
    finished launch into the totals sum them."""
    blocks = 2 * devalloc.layout.COUNT_SHARDS + 3
    out = poisoned(32 * blocks, np.int64)
    with devalloc.Arena(1 << 20) as arena:
        with arena.frame():
            take[blocks, 32](arena, np.array([40]), out)
            during = arena.stats()
        launch_take(arena, 16)  # a new launch folds the frame's slot into the totals
        after = arena.stats()
    assert (out >= 0).all()
    assert during.total_allocs == 32 * blocks
    assert during.requested_bytes == during.peak_requested_bytes == 32 * blocks * 48
    assert after.total_allocs == 32 * blocks + 32
    assert after.peak_requested_bytes == 32 * blocks * 48


@pytest.mark.parametrize("strategy", devalloc.STRATEGIES)
def test_a_frame_of_many_small_launches_fits_in_twice_what_it_asks(strategy):
    """Slabs sized from the arena (not from demand) left each launch's unused
    tail taken for the rest of the frame: 8 MiB per launch on the H200. Here
    each launch asks 64 x 16 B of a 64 MiB arena."""
    launches, threads = 40, 64
    with devalloc.Arena(64 << 20, strategy=strategy) as arena:
        with arena.frame():
            for _ in range(launches):
                launch_take(arena, 16, threads)
            stats = arena.stats()
    asked = launches * threads * 16
    assert stats.requested_bytes == asked
    assert asked <= stats.current_bytes <= 2 * asked
    assert stats.total_allocs == launches * threads and stats.failed_allocs == 0


# -- closing ----------------------------------------------------------------------


def test_a_closed_arena_refuses_everything():
    arena = devalloc.Arena(4096)
    arena.close()
    arena.close()  # twice is fine
    for use in (
        lambda: launch_take(arena, 16),
        arena.stats,
        arena.check,
        arena.reset,
        lambda: arena.device_view(0, 4, np.uint8),
        lambda: arena.frame().__enter__(),
        arena.__enter__,
    ):
        with pytest.raises(devalloc.ArenaClosedError):
            use()
    assert issubclass(devalloc.ArenaClosedError, devalloc.DevallocError)


def test_several_arenas_coexist():
    with devalloc.Arena(1 << 14) as a, devalloc.Arena(1 << 14, strategy="bump") as b:
        in_a = launch_take(a, 64)
        in_b = launch_take(b, 64)
        in_a_again = launch_take(a, 64)
        np.testing.assert_array_equal(in_a, in_a_again)
        assert a.stats().total_allocs == 64 and b.stats().total_allocs == 32
        assert (in_b >= 0).all()


@pytest.mark.parametrize("align", [16, 256, 4096, 8192, 1 << 16])
@pytest.mark.parametrize("capacity", [16, 512, 4096, 100_000])
def test_the_arena_fits_its_allocation_wherever_that_starts(align, capacity):
    """Header and data region, with the header 256-byte aligned (the launch
    handle keeps its low 8 bits) and the data on `align`, inside the one device
    allocation for every address CUDA may return (256-byte aligned; any 16-byte
    address for the simulator's buffers). Found on the H200: the padding was
    once 256 bytes short of a 4 KiB boundary counted as none, and a small arena
    whose allocation did not start on 4 KiB reached past its end."""
    from devalloc import layout as L

    size = L.allocation_bytes(capacity, align)
    for base in range(1 << 20, (1 << 20) + 2 * L.data_boundary(align), 16):
        header = base + L.header_offset(base, align)
        data = header + L.HEADER_BYTES
        assert header % 256 == 0 and data % align == 0
        assert base <= header and data + capacity <= base + size, (base, size)


class Int64(int):
    """An int64 that fails the test if an operation leaves int64 (Numba's
    signed arithmetic is `nsw` there: an overflow would be undefined)."""

    def _checked(self, value):
        assert -(1 << 63) <= value < (1 << 63), f"{value} leaves int64"
        return Int64(value)

    def __mul__(self, other):
        return self._checked(int(self) * int(other))

    __rmul__ = __mul__

    def __or__(self, other):
        return self._checked(int(self) | int(other))

    def __and__(self, other):
        return self._checked(int(self) & int(other))

    def __sub__(self, other):
        return self._checked(int(self) - int(other))

    def __lshift__(self, other):
        return self._checked(int(self) << int(other))

    def __rshift__(self, other):
        return self._checked(int(self) >> int(other))


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_the_gpus_shape_count_stays_in_int64_and_counts_exactly(ndim):
    """The branch-free element count compiled for the GPU (`shape_helpers`),
    run as Python on checked int64s: exact below 2**62, 2**62 above, -1 with a
    negative dimension, and no intermediate outside int64."""
    from devalloc.allocator import shape_namespace

    count = shape_namespace(ndim, Int64)["count"]
    dims = [0, 1, 3, 7, 1 << 20, (1 << 31) - 1, 1 << 31, 1 << 32, (1 << 61) + 1, 1 << 62,
            (1 << 63) - 1, -1, -(1 << 40), -(1 << 63)]  # fmt: skip
    rng = np.random.default_rng(ndim)
    shapes = [tuple(int(d) for d in rng.choice(dims, ndim)) for _ in range(400)]
    shapes += [(1 << 31,) * ndim, ((1 << 62) - 1,) + (1,) * (ndim - 1)]
    for shape in shapes:
        got = count(tuple(Int64(d) for d in shape))
        product = int(np.prod([abs(d) for d in shape], dtype=object))
        if min(shape) < 0:
            assert got == -1, shape
        elif product < (1 << 62) * (1 - 2.0**-50):
            assert got == product, shape
        else:  # huge: 2**62, or exact just past it where the estimate rounds down
            assert got >= (1 << 62) * (1 - 2.0**-50) and got <= max(product, 1 << 62), shape
