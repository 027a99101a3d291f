"""`ArenaRing`: frames in flight on several streams, one arena each."""

import itertools
import threading

import numpy as np
import pytest
from numba import cuda

import devalloc
from helpers import poisoned


@devalloc.kernel
def stamp(arena, value, frame_array, out):
    """Each thread keeps value + t in a scratch allocation and in a frame array
    the host made; out[t] is their sum, read back after both were written."""
    t = cuda.grid(1)
    scratch = arena.alloc(1, np.int64)
    if t < out.size and scratch.size == 1:
        scratch[0] = value[0] + t
        frame_array[t] = value[0] + t
        out[t] = scratch[0] + frame_array[t]


@devalloc.kernel
def take(arena, nbytes, out):
    out[cuda.grid(1)] = arena.alloc(nbytes[0], np.uint8).size


def test_frames_take_the_slots_in_turn_each_its_own_arena_and_stream():
    with devalloc.ArenaRing(3, 1 << 16) as ring:
        seen = []
        for _ in range(7):
            with ring.frame() as slot:
                seen.append(slot)
        assert [ring[:].index(s) for s in seen] == [0, 1, 2, 0, 1, 2, 0]
        assert len({id(s.arena) for s in ring}) == 3 == len({id(s.stream) for s in ring})
        assert all(s.stream is not None for s in ring)
        assert [s.frames for s in ring.stats()] == [3, 2, 2]


def test_the_slots_live_regions_are_disjoint():
    with devalloc.ArenaRing(4, 1 << 12) as ring:
        spans = []
        for slot in ring:
            view = slot.arena.device_view(0, 1, np.uint8)
            interface = getattr(view, "__cuda_array_interface__", None)
            start = (interface or view.__array_interface__)["data"][0]
            spans.append((start, start + slot.arena.capacity))
        spans.sort()
        assert all(end <= begin for (_, end), (begin, _) in itertools.pairwise(spans))


def test_each_frame_keeps_its_memory_until_its_slot_comes_round_again():
    frames, threads = 8, 32
    outs = [cuda.to_device(poisoned(threads, np.int64)) for _ in range(frames)]
    with devalloc.ArenaRing(3, 1 << 16) as ring:
        for k in range(frames):
            with ring.frame() as slot:
                value = cuda.to_device(np.array([1000 * (k + 1)]), stream=slot.stream)
                array = slot.arena.empty(threads, np.int64)
                stamp[1, threads, slot.stream](slot.arena, value, array, outs[k])
        ring.check()
        for k, out in enumerate(outs):
            np.testing.assert_array_equal(
                out.copy_to_host(), 2 * (1000 * (k + 1) + np.arange(threads))
            )


def test_a_frames_overflow_is_reported_at_its_slots_next_launch_not_at_its_exit():
    out = cuda.to_device(poisoned(32, np.int64))
    too_much = cuda.to_device(np.array([1 << 20]))
    fits = cuda.to_device(np.array([16]))
    with devalloc.ArenaRing(2, 1 << 12) as ring:
        with ring.frame() as first:  # exits without waiting, and so without raising
            take[1, 32, first.stream](first.arena, too_much, out)
        with ring.frame() as second:  # another slot: nothing to report there
            take[1, 32, second.stream](second.arena, fits, out)
        with pytest.raises(devalloc.ArenaOverflowError) as error, ring.frame() as again:
            assert again is first
            take[1, 32, again.stream](again.arena, fits, out)
        assert error.value.kernel == "take" and error.value.not_launched == "take"
        ring.check()  # reported once


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((0, 1024), {}, ValueError, "1 to 64"),
        ((65, 1024), {}, ValueError, "1 to 64"),
        ((True, 1024), {}, TypeError, "bool"),
        (("4", 1024), {}, TypeError, "must be an int"),
        ((2, 0), {}, ValueError, "positive"),
        ((2, 1024), {"streams": [None, None]}, ValueError, "default stream"),
        ((2, 1024), {"streams": [0, 0]}, ValueError, "default stream"),
        ((3, 1024), {"streams": [object(), object()]}, ValueError, "one stream per slot"),
        ((2, 1024), {"strategy": "nope"}, ValueError, "strategy"),
        ((3, 1024), {"streams": 3}, TypeError, "sequence of 3 Numba streams"),
        ((2, 1024), {"streams": [object(), object()]}, TypeError, "must be a Numba stream"),
    ],
)
def test_bad_rings_are_refused(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        devalloc.ArenaRing(*args, **kwargs)


def test_a_stream_given_twice_is_refused_and_given_ones_are_used():
    stream = cuda.stream()
    with pytest.raises(ValueError, match="given twice"):
        devalloc.ArenaRing(2, 1024, streams=[stream, stream])
    mine = [cuda.stream(), cuda.stream()]
    with devalloc.ArenaRing(2, 1024, streams=mine) as ring:
        assert [slot.stream for slot in ring] == mine


def test_a_closed_ring_refuses_frames_and_closes_every_arena():
    ring = devalloc.ArenaRing(2, 1024)
    ring.close()
    assert all(slot.arena.closed for slot in ring)
    with pytest.raises(devalloc.ArenaClosedError):
        ring.frame()
    ring.close()  # twice is harmless


def test_closing_a_ring_reports_every_slots_overflow():
    # Only the first slot's was raised; the others' were lost.
    ring = devalloc.ArenaRing(3, 1024)
    # (Device arrays: numba-cuda 0.30.4 refuses a NumPy argument of a launch on a
    # stream, "NumPy only supports stream=None", devalloc's launches as its own.)
    nbytes, out = cuda.to_device(np.array([4096])), cuda.to_device(poisoned(4, np.int64))
    for _ in range(3):
        with ring.frame() as slot:
            take[1, 4, slot.stream](slot.arena, nbytes, out)
    with pytest.raises(devalloc.ArenaOverflowError) as raised:
        ring.close()
    notes = getattr(raised.value, "__notes__", [])
    assert len(notes) == 2 and all("another slot" in note for note in notes), notes
    ring.close()  # reported once: closing again says nothing
    with pytest.raises(devalloc.ArenaClosedError), ring:
        pass


def test_threads_taking_frames_get_different_slots():
    with devalloc.ArenaRing(4, 1 << 12) as ring:
        got, ready = [], threading.Barrier(4)

        def worker():
            ready.wait()
            with ring.frame() as slot:
                got.append(slot)

        workers = [threading.Thread(target=worker) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        assert len(got) == 4 and len({id(slot) for slot in got}) == 4
