"""In-kernel allocation: placement, alignment, dtypes, shapes, limits (both strategies)."""

import numpy as np
import pytest
from numba import cuda

import devalloc
from helpers import NO_CALL, STRATEGIES, check_allocations, poisoned, run_requests

pytestmark = pytest.mark.parametrize("strategy", STRATEGIES)


def test_random_sizes_over_several_blocks(strategy, rng):
    requests = rng.integers(1, 700, size=(160, 3))
    requests[rng.random(requests.shape) < 0.2] = NO_CALL  # some lanes stop early
    with devalloc.Arena(1 << 20, strategy=strategy) as arena:
        offsets, lengths = run_requests(arena, requests, threads=64)
        made = check_allocations(arena, requests, offsets, lengths)
        assert made == np.count_nonzero(np.cumprod(requests != NO_CALL, axis=1))
        assert arena.stats().total_allocs == made


@pytest.mark.parametrize("align", [16, 64, 256, 4096])
def test_alignment_follows_size(strategy, align, rng):
    sizes = np.array([1, 15, 16, 17, align - 1, align, align + 1, 3 * align, 5000])
    requests = rng.choice(sizes, size=(96, 2))
    with devalloc.Arena(1 << 21, strategy=strategy, align=align) as arena:
        offsets, lengths = run_requests(arena, requests, threads=32)
        assert check_allocations(arena, requests, offsets, lengths) == requests.size


DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_round_trips(strategy, dtype):
    @devalloc.kernel
    def fill(arena, src, dst, offsets):
        t = cuda.grid(1)
        buf = arena.alloc(src.shape[1], dtype)
        for i in range(buf.size):
            buf[i] = src[t, i]
        offsets[t] = arena.offset(buf)
        for i in range(buf.size):
            dst[t, i] = buf[i]

    src = (np.arange(32 * 5).reshape(32, 5) % 7 + 1).astype(dtype)
    dst = poisoned(src.shape, dtype)
    offsets = poisoned(32, np.int64)
    with devalloc.Arena(1 << 16, strategy=strategy) as arena:
        fill[1, 32](arena, src, dst, offsets)
        np.testing.assert_array_equal(dst, src)
        itemsize = np.dtype(dtype).itemsize
        assert (offsets % max(itemsize, 16) == 0).all()
        assert len(set(offsets.tolist())) == 32


def test_shape_tuples_give_c_contiguous_nd_arrays(strategy):
    @devalloc.kernel
    def grids(arena, out):
        t = cuda.grid(1)
        tile = arena.alloc((4, 8), np.int32)
        cube = arena.alloc((2, 3, 4), np.float64)
        for i in range(4):
            for j in range(8):
                tile[i, j] = t * 100 + i * 8 + j
        for i in range(2):
            for j in range(3):
                for k in range(4):
                    cube[i, j, k] = i * 12 + j * 4 + k
        flat = arena.view(arena.offset(tile), 32, np.int32)
        out[t, 0] = tile.shape[0] * 10 + tile.shape[1]
        out[t, 1] = cube.shape[0] * 100 + cube.shape[1] * 10 + cube.shape[2]
        out[t, 2] = flat[9]  # row 1, column 1 in C order
        out[t, 3] = cube[1, 2, 3]
        out[t, 4] = tile.strides[0] * 100 + cube.strides[1]

    out = poisoned((8, 5), np.int64)
    with devalloc.Arena(1 << 16, strategy=strategy) as arena:
        grids[1, 8](arena, out)
    expected = [[48, 234, t * 100 + 9, 23, 32 * 100 + 32] for t in range(8)]
    np.testing.assert_array_equal(out, expected)


@devalloc.kernel
def one_alloc(arena, nbytes, out):
    buf = arena.alloc(nbytes[0], np.uint8)
    out[0] = buf.size
    if buf.size > 0:
        buf[buf.size - 1] = 7
        out[1] = arena.offset(buf)


def _one_alloc(arena, nbytes):
    out = poisoned(2, np.int64)
    one_alloc[1, 1](arena, np.array([nbytes], np.int64), out)
    return out


def test_exact_capacity_fits_and_one_more_byte_does_not(strategy):
    with devalloc.Arena(4096, strategy=strategy) as arena:
        assert _one_alloc(arena, 4096)[0] == 4096
        arena.check()
        assert _one_alloc(arena, 4097)[0] == 0
        with pytest.raises(devalloc.ArenaOverflowError):
            arena.check()
        # A failed request leaves the arena usable: the next launch starts empty.
        assert _one_alloc(arena, 4096)[0] == 4096
        arena.check()


@pytest.mark.parametrize("count", [1 << 40, 1 << 61, -5])
def test_huge_and_negative_requests_fail_safely(strategy, count):
    @devalloc.kernel
    def ask(arena, n, out):
        big = arena.alloc(n[0], np.float64)
        small = arena.alloc(3, np.float64)
        out[0] = big.size
        out[1] = small.size

    out = poisoned(2, np.int64)
    with devalloc.Arena(1 << 16, strategy=strategy) as arena:
        ask[1, 1](arena, np.array([count], np.int64), out)
        assert list(out) == [0, 3]
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        assert info.value.kernel == "test_huge_and_negative_requests_fail_safely.<locals>.ask"
        assert ("invalid (negative) size" in str(info.value)) == (count < 0)
        assert arena.stats().failed_allocs == 1


def test_zero_size_is_empty_not_an_overflow(strategy):
    @devalloc.kernel
    def empty(arena, out):
        a = arena.alloc(0, np.float32)
        b = arena.alloc((0, 5), np.int16)
        out[0] = a.size
        out[1] = b.shape[0] * 10 + b.shape[1]

    out = poisoned(2, np.int64)
    with devalloc.Arena(1 << 12, strategy=strategy) as arena:
        empty[1, 4](arena, out)
        arena.check()
        stats = arena.stats()
    assert list(out) == [0, 5]
    assert stats.failed_allocs == 0 and stats.total_allocs == 0


def test_view_checks_bounds_and_alignment(strategy):
    @devalloc.kernel
    def views(arena, out):
        row = arena.alloc(16, np.float32)
        for i in range(16):
            row[i] = i + 0.5
        off = arena.offset(row)
        out[0] = arena.view(off, 16, np.float32)[15]
        out[1] = arena.view(off + 4, (3, 5), np.float32)[2, 4]
        out[2] = arena.view(-16, 4, np.float32).size
        out[3] = arena.view(off + 2, 4, np.float32).size  # misaligned
        out[4] = arena.view(4096 - 8, 4, np.float32).size  # past the end
        out[5] = arena.view(4096 - 16, 4, np.float32).size  # the last 16 bytes

    out = poisoned(6, np.float64)
    with devalloc.Arena(4096, strategy=strategy) as arena:
        views[1, 1](arena, out)
    np.testing.assert_array_equal(out, [15.5, 15.5, 0, 0, 0, 4])


def test_failed_alloc_returns_empty_array_and_records_shortfall(strategy):
    requests = np.full((64, 1), 256, np.int64)  # 16 KiB asked of an 8 KiB arena
    with devalloc.Arena(8192, strategy=strategy) as arena:
        offsets, lengths = run_requests(arena, requests, threads=32)
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            arena.check()
        assert info.value.capacity == 8192 and info.value.requested == 256
        made = check_allocations(arena, requests, offsets, lengths, all_succeed=False)
        stats = arena.stats()
    assert made == 32  # the arena is used to the last byte
    assert stats.failed_allocs == 32 and stats.total_allocs == 32


def test_the_device_peers_test_gives_each_thread_a_block_of_its_own(strategy):
    # benchmarks/device_peers.py's twin of Gallatin's test, and its check: each
    # thread's block holds its id after all wrote; a block given twice is caught.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from kernels import bench as K

    n, words = 100, 2
    offsets = cuda.to_device(poisoned(128, np.int64))
    counters = cuda.to_device(np.zeros(2, np.int64))
    with devalloc.Arena(64 * 1024, strategy=strategy) as arena:
        with arena.frame():
            K.one_each[4, 32](arena, words, n, 1, offsets, counters[:1])
            K.ids_intact[4, 32](arena, n, offsets, counters[1:])
            placed = offsets.copy_to_host()[:n]
            assert list(counters.copy_to_host()) == [0, 0]
            assert len(set(placed)) == n and min(placed) >= 0
            assert all(placed % 16 == 0)  # 16 B requests on 16 B
            placed[7] = placed[3]  # plant a block given twice
            offsets.copy_to_device(np.concatenate([placed, np.full(28, -1, np.int64)]))
            K.ids_intact[4, 32](arena, n, offsets, counters[1:])
        assert list(counters.copy_to_host()) == [0, 1]
    with devalloc.Arena(1024, strategy=strategy) as arena:  # 64 blocks fit: 36 fail alone
        with pytest.raises(devalloc.ArenaOverflowError):
            with arena.frame():
                K.one_each[4, 32](arena, words, n, 0, offsets, counters[:1])
    assert counters.copy_to_host()[0] == 36
