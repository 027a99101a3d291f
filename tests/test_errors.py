"""devalloc's errors survive pickling whole: a Dask task's or a process pool's
error reaches the caller with its message and attributes."""

import pickle

import numpy as np
import pytest

import devalloc

ERRORS = [
    devalloc.ArenaOverflowError("stamp", 4096, 8192, 3, "next_kernel"),
    devalloc.ArenaOverflowError("stamp", 4096, 8192, 3, kernels=("stamp", "blur")),
    devalloc.ArenaOverflowError("arena.empty((4, 4), float32)", 4096, 64, 1, free=16),
    devalloc.DeviceMemoryError(1 << 40, 1 << 30, "GPU 1"),
    devalloc.PoolMemoryError(1 << 40, None),
    devalloc.CudaError("CUDA_ERROR_INVALID_VALUE", "cuStreamWriteValue64"),
    devalloc.NoGpuError("no driver"),
    devalloc.ArenaClosedError("this arena is closed"),
    devalloc.MemoryManagerError("not in use"),
    devalloc.DevallocError("anything"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_pickles_whole(error):
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error) and again.args == error.args
    assert vars(again) == vars(error)  # .kernel, .capacity, .requested, .status, ...


@devalloc.kernel
def takes_nothing(arena):
    pass


BAD_INPUT = {
    "Arena(-1)": lambda arena: devalloc.Arena(-1),
    "Arena('64')": lambda arena: devalloc.Arena("64"),
    "align=3": lambda arena: devalloc.Arena(4096, align=3),
    "strategy": lambda arena: devalloc.Arena(4096, strategy="slab"),
    "Sizing": lambda arena: devalloc.Sizing(headroom=0.5),
    "ArenaRing(0)": lambda arena: devalloc.ArenaRing(0, 4096),
    "kernel(1)": lambda arena: devalloc.kernel(1),
    "launch config": lambda arena: takes_nothing[0, 32](arena),
    "not an arena": lambda arena: takes_nothing[1, 32](42),
    "device_view": lambda arena: arena.device_view(3, 4, np.float32),
    "reset(stream)": lambda arena: arena.reset(stream="s"),
    "empty dtype": lambda arena: arena.empty(4, None),
}


@pytest.mark.parametrize("call", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_a_builtin_error_and_a_devalloc_error(arena, call):
    """`except ValueError` (or `TypeError`) and `except devalloc.DevallocError`
    both catch what a bad argument raises, whichever module refuses it."""
    with arena.frame(), pytest.raises((ValueError, TypeError)) as info:
        call(arena)
    assert isinstance(info.value, devalloc.DevallocError), type(info.value)
    assert isinstance(info.value, (devalloc.DevallocValueError, devalloc.DevallocTypeError))
