"""devalloc's errors survive pickling whole: a Dask task's or a process pool's
error reaches the caller with its message and attributes."""

import pickle

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
