"""Cursor shards (`allocator.take_spread`): in a ``bump`` launch of many warps,
groups take their units (and lone lanes theirs) from grants of 32 shards, and
only a grant's refill moves the arena's cursor. (``warp_slab`` takes from the
cursor: see the allocator's notes.)

On the GPU only launches of `layout.SHARDED_WARPS` warps or more use them, as
the GPU suite's ``bump`` launches of a million threads do (`test_gpu`). The
simulator cannot run such launches in a test's time, so here the threshold is
lowered to one warp and grants are let grow to a larger share of the arena (the
allocator reads both from `layout` while it runs): every launch below is
sharded. The warp-slab tests are run again the same way, as they are, at the end
of this module."""

import itertools

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import layout as L
from devalloc.backend import SIMULATOR
from helpers import NO_CALL, check_allocations, poisoned, run_requests
from kernels.bench import alloc_until_full

pytestmark = pytest.mark.skipif(
    not SIMULATOR, reason="the GPU's thresholds are compiled in: its large launches test shards"
)


@pytest.fixture(autouse=True)
def every_launch_sharded(monkeypatch):
    monkeypatch.setattr(L, "SHARDED_WARPS", 1)
    monkeypatch.setattr(L, "GRANT_SHARE", 1)


def latest_slot(arena):
    """The slot of the arena's latest launch outside a frame (the next takes the other)."""
    return arena._slot ^ 1


def grant_words(arena, slot):
    words = arena._header_words()
    return [int(words[L.cursor_shard(slot, s)]) for s in range(L.CURSOR_SHARDS)]


def granted(word):
    """(first byte, bytes) of a grant word's grant, or None for none."""
    code = (word >> L.GRANT_CODE_SHIFT) & L.GRANT_CODE_MASK
    if code in (0, L.GRANT_SPENT):
        return None
    return (word >> L.GRANT_START_SHIFT) * 16, ((1 << code) >> 1) * 16


def test_blocks_of_a_launch_take_from_grants_of_their_own_shards(rng):
    choices = np.array([NO_CALL, 0, 1, 16, 40, 255, 256, 1000, 4096])
    requests = rng.choice(choices, size=(8 * 32, 3))
    with devalloc.Arena(4 << 20, strategy="bump") as arena:
        offsets, lengths = run_requests(arena, requests, threads=32)  # 8 blocks
        made = check_allocations(arena, requests, offsets, lengths)
        stats = arena.stats()
        grants = [g for g in map(granted, grant_words(arena, latest_slot(arena))) if g]
    called = np.cumsum(requests == NO_CALL, axis=1) == 0  # a lane stops at its first NO_CALL
    assert made == np.count_nonzero(called & (requests > 0)) == stats.total_allocs
    assert len(grants) >= 2, grants  # several shards, each with its grant
    spans = sorted(grants)
    for (start, size), (next_start, _) in itertools.pairwise(spans):
        assert start + size <= next_start, spans  # grants never overlap
    assert spans[-1][0] + spans[-1][1] <= stats.peak_bytes <= arena.capacity


def test_a_grant_serves_several_slabs_with_one_move_of_the_cursor(monkeypatch):
    """One block of lanes alone, each its warp's first request: the shard's first
    grant has room for all of them, so the cursor moves once."""
    from devalloc import allocator

    moves = []
    take = allocator.take_from_arena

    @cuda.jit(device=True)
    def counted_take(hdr, slot, capacity, want, least):
        moves.append(want)
        return take(hdr, slot, capacity, want, least)

    monkeypatch.setattr(allocator, "take_from_arena", counted_take)
    requests = np.full((8 * 32, 1), NO_CALL, np.int64)
    requests[::32, 0] = 300  # lane 0 of each of the block's eight warps
    with devalloc.Arena(4 << 20, strategy="bump") as arena:
        offsets, lengths = run_requests(arena, requests, threads=256)
        assert check_allocations(arena, requests, offsets, lengths) == 8
    assert moves == [8 * 512], moves  # one grant: 8 warps x 2 units of 256 B


def test_every_launch_starts_with_empty_shards_and_a_frame_keeps_them():
    requests = np.full((4 * 32, 1), 64, np.int64)
    with devalloc.Arena(4 << 20, strategy="bump") as arena:
        run_requests(arena, requests, threads=32)
        first = latest_slot(arena)
        assert any(map(granted, grant_words(arena, first)))
        run_requests(arena, requests, threads=32)  # the next launch empties the other slot
        assert grant_words(arena, first) == [0] * L.CURSOR_SHARDS
        with arena.frame():
            launches = [run_requests(arena, requests, threads=32) for _ in range(2)]
            spans = sorted(
                (int(o), int(o) + int(n))
                for offsets, lengths in launches
                for o, n in zip(offsets.ravel(), lengths.ravel())
            )
    assert all(n == 64 for _, lengths in launches for n in lengths.ravel())
    # the frame's second launch allocated beside the first's memory, still live
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), spans


@pytest.mark.parametrize("strategy", ["bump", "warp_slab"])
def test_the_host_decides_which_launches_take_through_shards(monkeypatch, strategy):
    """The handle's SPREAD bit, set by the host for a launch of SHARDED_WARPS
    warps or more, is what sends a ``bump`` launch's blocks to their shards: a
    launch of one warp fewer moves the cursor itself, and ``warp_slab`` never
    takes through a shard."""
    monkeypatch.setattr(L, "SHARDED_WARPS", 4)
    with devalloc.Arena(4 << 20, strategy=strategy) as arena:
        for warps, sharded in ((4, strategy == "bump"), (3, False)):  # blocks of one warp
            requests = np.full((warps * 32, 1), 64, np.int64)
            _, lengths = run_requests(arena, requests, threads=32)
            grants = [g for g in map(granted, grant_words(arena, latest_slot(arena))) if g]
            assert (len(grants) > 0) == sharded, (warps, grants)
            assert (lengths == 64).all()


def test_the_spread_bit_is_packed_apart_from_the_launchs_other_fields(monkeypatch):
    """The launch handle (`layout.pack_handle`) round-trips every field at its
    largest, and the SPREAD bit marks exactly the launches of SHARDED_WARPS
    warps or more, whatever the sequence number."""
    monkeypatch.setattr(L, "SHARDED_WARPS", 1024)  # the GPU's threshold
    address = L.ADDRESS_MASK  # the highest 4 KiB-aligned address below 2**48
    for warps in (1, L.SHARDED_WARPS - 1, L.SHARDED_WARPS, 1 << 26):
        for slot in (0, 1):
            handle = L.pack_handle(address, slot, L.SLAB_MASK, L.SEQ_MASK, L.KERNEL_MASK, warps)
            assert handle > 0  # the sign bit stays clear
            header, got_slot, log2_slab, seq, kernel, spread = L.unpack_handle(handle)
            assert (header, got_slot, log2_slab, seq, kernel) == (
                address,
                slot,
                L.SLAB_MASK,
                L.SEQ_MASK,
                L.KERNEL_MASK,
            )
            assert (spread != 0) == (warps >= L.SHARDED_WARPS)
            # (a graph's second instance: its handles with the slot bit set)
            in_slot_1 = L.unpack_handle(handle | L.SLOT_MASK)
            assert in_slot_1 == (address, 1, *L.unpack_handle(handle)[2:])
        handle = L.pack_handle(address, 0, 0, L.SEQ_MASK + 1, 0, 1023)  # the arena wraps seq
        assert L.unpack_handle(handle)[3] == 0 and L.unpack_handle(handle)[5] == 0


def test_a_spent_shard_serves_the_end_of_the_arena_exactly(monkeypatch):
    """Lanes alone in blocks of one thread allocate 512 B until the arena refuses:
    a shard that cannot get a whole grant is spent and its requests go to the
    cursor, which hands out the end of the arena, then to the other shards'
    grants: the requests fail only once no grant has room left for one."""
    monkeypatch.setattr(L, "GRANT_SHARE", 4)
    capacity = 1 << 20
    counts = poisoned(64, np.int64)
    with devalloc.Arena(capacity, strategy="bump") as arena:
        alloc_until_full[64, 1](arena, 512, 1 << 20, counts)
        with pytest.raises(devalloc.ArenaOverflowError) as error:
            arena.check()
        words = grant_words(arena, latest_slot(arena))
        stats = arena.stats()
    assert error.value.failed == 64  # each thread stops at its first failure
    assert counts.sum() == stats.total_allocs
    assert stats.peak_bytes > capacity - 512  # the cursor handed out the end
    for word in words:  # no grant kept room for a request
        if granted(word):
            assert granted(word)[1] - (word & L.GRANT_USED_MASK) * 16 < 512, hex(word)
    spent = [w for w in words if (w >> L.GRANT_CODE_SHIFT) & L.GRANT_CODE_MASK == L.GRANT_SPENT]
    assert spent, [hex(w) for w in words]


@devalloc.kernel
def fill_then_steal(arena, big, out):
    """Block 0's first lane takes 256 B (its shard's first grant has room for
    its two warps: 512 B); block 1's first lane then takes the rest of the
    cursor, and its second warp asks for 256 B."""
    t = cuda.threadIdx.x
    if cuda.blockIdx.x == 0:
        if t == 0:
            first = arena.alloc(256, np.uint8)
            out[0], out[1] = arena.offset(first), first.size
    else:
        if t == 0:
            rest = arena.alloc(big, np.uint8)
            out[2], out[3] = arena.offset(rest), rest.size
        cuda.syncthreads()
        if t == 32:
            late = arena.alloc(256, np.uint8)
            out[4], out[5] = arena.offset(late), late.size


def test_a_request_the_cursor_cannot_serve_takes_the_rest_of_another_grant():
    capacity = 64 << 10
    out = poisoned(6, np.int64)
    with devalloc.Arena(capacity, strategy="bump") as arena:
        fill_then_steal[2, 64](arena, capacity - 512, out)
    assert out[:4].tolist() == [0, 256, 512, capacity - 512]
    assert out[4:].tolist() == [256, 256]  # the rest of block 0's grant


def test_requests_too_large_for_a_grant_take_from_the_cursor():
    """A 64 KiB request is more than 1/GRANT_SERVES of this arena's largest grant:
    it moves the cursor itself, beside the sharded requests of its launch."""
    requests = np.full((2 * 32, 2), 16, np.int64)
    requests[0, 1] = 64 << 10
    requests[32, 1] = 5000
    with devalloc.Arena(2 << 20, strategy="bump") as arena:
        offsets, lengths = run_requests(arena, requests, threads=32)
        assert check_allocations(arena, requests, offsets, lengths) == requests.size


def test_grants_are_powers_of_two_within_their_share_of_the_room_left():
    requests = np.full((8 * 32, 4), 48, np.int64)
    capacity = 4 << 20
    with devalloc.Arena(capacity, strategy="bump") as arena:
        offsets, lengths = run_requests(arena, requests, threads=32)
        assert check_allocations(arena, requests, offsets, lengths) == requests.size
        grants = [g for g in map(granted, grant_words(arena, latest_slot(arena))) if g]
    assert len(grants) == 8, grants  # a shard for each block
    for _, size in grants:
        assert size & (size - 1) == 0 and size <= capacity // L.CURSOR_SHARDS, grants


def grant_word(start, granules, used):
    """A grant word: `granules` (a power of two) from granule `start`, `used` taken."""
    code = granules.bit_length()  # (1 << code) >> 1 == granules
    return start << L.GRANT_START_SHIFT | code << L.GRANT_CODE_SHIFT | used


def test_a_take_behind_one_past_the_grant_waits_for_the_next_grant_and_takes_from_it():
    """Thread 0 adds to a grant another request already ran past (that request is
    taking the shard's next grant): it waits until the next grant is published
    (here by thread 1, once it sees thread 0's add) and adds again, taking its
    granules from the new grant, not the old one (`allocator.past_grant`, the
    path a take that fits does not enter)."""
    from devalloc.allocator import take_from_shard

    word = L.cursor_shard(0, 0)
    seen = grant_word(100, 16, 17)  # 17 of 16 taken: the one past the end is refilling
    hdr = np.zeros(L.HEADER_WORDS, np.int64)
    hdr[word] = seen
    out = poisoned(2, np.int64)

    @devalloc.kernel  # (the simulator's warp primitives run in its kernels)
    def take_while_refilled(arena, hdr, out):
        if cuda.threadIdx.x == 0:
            start, got = take_from_shard(hdr, 0, 1 << 30, 2, 2, word)
            out[0] = start
            out[1] = got
        else:
            while cuda.atomic.add(hdr, word, 0) == seen:  # until thread 0 has added
                pass
            cuda.atomic.exch(hdr, word, grant_word(500, 32, 3))

    with devalloc.Arena(1 << 16) as arena:
        take_while_refilled[1, 2](arena, hdr, out)
    assert out.tolist() == [(500 + 3) * 16, 2 * 16]
    assert hdr[word] == grant_word(500, 32, 5)  # the new grant, with its 2 granules taken


@devalloc.kernel
def one_lane_in_turn(arena, sizes, offsets, lengths):
    if cuda.grid(1) == 0:
        for j in range(sizes.size):
            got = arena.alloc(sizes[j], np.uint8)
            offsets[j], lengths[j] = arena.offset(got), got.size


@pytest.mark.parametrize("share", [1, 8])
def test_a_request_too_large_for_the_rest_of_a_grant_leaves_the_rest_to_smaller_ones(
    monkeypatch, share
):
    """The first take past the end of a grant, finding no room in the arena for
    another grant, marked the shard spent: the rest of the grant was lost, and
    a smaller request it had room for failed too (found by a hostile probe,
    2026-12-04). Now the shard keeps the rest (`allocator.keep_rest`). Here
    the grant is [0, 768): 512 B taken, then the cursor's rest by a request
    too large for a grant, then 512 B (fails: 256 B are left), then 256 B
    (the grant's rest), then 16 B (nothing left: fails)."""
    monkeypatch.setattr(L, "GRANT_SHARE", share)
    capacity = 1 << 20
    sizes = np.array([256, 256, capacity - 768, 512, 256, 16], np.int64)
    offsets, lengths = poisoned(sizes.size, np.int64), poisoned(sizes.size, np.int64)
    with devalloc.Arena(capacity, strategy="bump") as arena:
        one_lane_in_turn[1, 1](arena, sizes, offsets, lengths)
        with pytest.raises(devalloc.ArenaOverflowError) as error:
            arena.check()
        words = grant_words(arena, latest_slot(arena))
    assert offsets.tolist() == [0, 256, 768, -1, 512, -1]
    assert lengths.tolist() == [256, 256, capacity - 768, 0, 256, 0]
    assert (error.value.failed, error.value.requested) == (2, 512)
    assert (words[0] >> L.GRANT_CODE_SHIFT) & L.GRANT_CODE_MASK == L.GRANT_SPENT


def test_the_rest_a_shard_keeps_is_a_grant_that_ends_where_its_grant_ended():
    """`keep_rest` for rests of every size in a grant of 64 granules: a take of
    the whole rest starts where the old grant's count had reached and ends at
    its end; one granule more does not fit."""
    from devalloc.allocator import keep_rest

    word = L.cursor_shard(0, 0)
    hdr = np.zeros(L.HEADER_WORDS, np.int64)
    for used in range(0, 65):

        @devalloc.kernel
        def kept(arena, hdr, used):
            keep_rest(hdr, word, grant_word(1000, 64, used))

        with devalloc.Arena(1 << 16) as arena:
            kept[1, 1](arena, hdr, used)
        kept_word = int(hdr[word])
        if used == 64:
            assert kept_word == L.GRANT_SPENT << L.GRANT_CODE_SHIFT
            continue
        start, size = granted(kept_word)
        taken = (kept_word & L.GRANT_USED_MASK) * 16
        assert start + taken == (1000 + used) * 16, used  # the rest's first byte
        assert start + size == (1000 + 64) * 16, used  # the grant's end
        assert size & (size - 1) == 0 and size - taken == (64 - used) * 16


# The warp-slab tests, every launch sharded (the fixture above applies to them here).
from test_warp_slab import (  # noqa: E402
    test_a_lane_alone_that_finds_no_room_takes_nothing,
    test_a_lane_alones_odd_requests_fail_alone,
    test_any_subset_of_lanes_and_sizes_spanning_the_paths,
    test_branches_loops_and_exited_lanes,
    test_every_threads_tally_reaches_the_stats,
    test_lanes_alone_allocate_for_their_warps,
)

__all__ = [
    "test_a_lane_alone_that_finds_no_room_takes_nothing",
    "test_a_lane_alones_odd_requests_fail_alone",
    "test_any_subset_of_lanes_and_sizes_spanning_the_paths",
    "test_branches_loops_and_exited_lanes",
    "test_every_threads_tally_reaches_the_stats",
    "test_lanes_alone_allocate_for_their_warps",
]
