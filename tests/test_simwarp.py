"""The simulator stand-ins for warp primitives, against what the hardware does.

Each kernel records what a primitive returned per lane; the reference is worked
out from the program's control flow, as a warp would execute it.
"""

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc.backend import SIMULATOR
from helpers import poisoned

pytestmark = pytest.mark.skipif(not SIMULATOR, reason="tests the simulator's stand-ins")

if SIMULATOR:
    from devalloc.simulator.warp import WarpError, activemask, ballot_sync, shfl_sync, shfl_up_sync


def lanes_mask(lanes):
    return sum(1 << lane for lane in lanes)


def run(kernel, threads, columns=1, arena_bytes=4096):
    out = poisoned((threads, columns), np.int64)
    with devalloc.Arena(arena_bytes) as arena:
        kernel[1, threads](arena, out)
    return out


def test_converged_warp_and_partial_last_warp():
    @devalloc.kernel
    def k(arena, out):
        out[cuda.threadIdx.x, 0] = activemask()

    out = run(k, 40)
    assert (out[:32, 0] == 0xFFFFFFFF).all()
    assert (out[32:, 0] == 0xFF).all()


def test_divergent_branches_get_their_own_masks():
    @devalloc.kernel
    def k(arena, out):
        lane = cuda.threadIdx.x
        if lane % 3 == 0:
            out[lane, 0] = activemask()
        else:
            out[lane, 0] = activemask()

    out = run(k, 32)
    every_third = lanes_mask(range(0, 32, 3))
    for lane in range(32):
        assert out[lane, 0] == (every_third if lane % 3 == 0 else ~every_third & 0xFFFFFFFF)


def test_exited_lanes_and_lanes_at_a_barrier_are_not_active():
    @devalloc.kernel
    def k(arena, out):
        lane = cuda.threadIdx.x
        if lane >= 20:
            return  # exited
        if lane < 8:
            out[lane, 0] = activemask()  # lanes 8..19 wait at the barrier meanwhile
        cuda.syncthreads()
        out[lane, 0] = out[lane, 0] if lane < 8 else activemask()

    out = run(k, 32)
    assert (out[:8, 0] == 0xFF).all()
    assert (out[8:20, 0] == lanes_mask(range(8, 20))).all()
    assert (out[20:, 0] < 0).all()  # never written


def test_loops_with_different_trip_counts():
    @devalloc.kernel
    def k(arena, out):
        lane = cuda.threadIdx.x
        for i in range(lane % 4 + 1):
            out[lane, i] = activemask()

    out = run(k, 32, columns=4)
    for i in range(4):
        expected = lanes_mask(lane for lane in range(32) if lane % 4 >= i)
        assert (out[[lane for lane in range(32) if lane % 4 >= i], i] == expected).all()


def test_ballot_and_shuffles_over_a_partial_mask():
    @devalloc.kernel
    def k(arena, out):
        lane = cuda.threadIdx.x
        if lane % 2 == 1:
            mask = activemask()
            out[lane, 0] = ballot_sync(mask, lane % 4 == 1)
            out[lane, 1] = shfl_sync(mask, lane * 10, 32 - lane)  # from the mirror lane
            out[lane, 2] = shfl_sync(mask, lane * 10, 1)  # broadcast from lane 1
        else:
            out[lane, 3] = shfl_up_sync(0x55555555, lane * 10, 2)  # from lane - 2

    out = run(k, 32, columns=4)
    odd = range(1, 32, 2)
    ones_mod_4 = lanes_mask(range(1, 32, 4))
    for lane in odd:
        assert out[lane, 0] == ones_mod_4
        assert out[lane, 1] == (32 - lane) * 10
        assert out[lane, 2] == 10
    for lane in range(0, 32, 2):
        assert out[lane, 3] == ((lane - 2) * 10 if lane >= 2 else lane * 10)


@pytest.mark.parametrize(
    "body, message",
    [
        ("named_exited", "has exited"),
        ("left_out", "leaves it out"),
        ("outside_mask", "not in mask"),
    ],
)
def test_misuse_is_an_error_not_a_hang(body, message):
    @devalloc.kernel
    def k(arena, out):
        lane = cuda.threadIdx.x
        if body == "named_exited":
            if lane >= 16:
                return
            out[lane, 0] = shfl_sync(0xFFFFFFFF, lane, 0)
        elif body == "left_out":
            out[lane, 0] = ballot_sync(0x1, True)
        elif lane < 16:
            out[lane, 0] = shfl_sync(0xFFFF, lane, 20)

    with pytest.raises(WarpError, match=message):
        run(k, 32)


def test_deadlock_is_reported():
    @devalloc.kernel
    def k(arena, out):
        lane = cuda.threadIdx.x
        if lane == 0:
            out[lane, 0] = ballot_sync(0x3, True)  # lane 1 never joins this one
        elif lane == 1:
            out[lane, 0] = shfl_sync(0x3, lane, 0)

    with pytest.raises(WarpError, match="deadlocked"):
        run(k, 2)
