"""Every error devalloc raises derives from `DevallocError`."""

__all__ = [
    "ArenaClosedError",
    "ArenaOverflowError",
    "ArenaOverflowWarning",
    "CudaError",
    "DevallocError",
    "DevallocTypeError",
    "DevallocValueError",
    "DeviceMemoryError",
    "MemoryManagerError",
    "NoGpuError",
    "PoolMemoryError",
]


class DevallocError(Exception):
    """Base class of all devalloc errors. They pickle (a Dask task's error, or a
    process pool's, reaches the caller whole): those whose constructor takes
    more than the message keep its arguments for that."""

    _init = None  # (args, kwargs) of the constructor, where it is not (message,)

    def __reduce__(self):
        if self._init is None:
            return super().__reduce__()
        return (_rebuild, (type(self), *self._init), self.__dict__)


def _rebuild(cls, args, kwargs):
    return cls(*args, **kwargs)


class DevallocValueError(DevallocError, ValueError):
    """Bad input: a value of the right type that devalloc cannot take (a size,
    an alignment, a launch configuration...). A `ValueError` as well."""


class DevallocTypeError(DevallocError, TypeError):
    """Bad input: an argument of a type devalloc does not take. A `TypeError`
    as well."""


class ArenaClosedError(DevallocError, RuntimeError):
    """An arena was used after `Arena.close()`."""


class DeviceMemoryError(DevallocError, MemoryError):
    """The device cannot hold the arena asked for.

    Attributes
    ----------
    requested : int
        Bytes asked for: the data region (the arena's header and failure
        record come on top).
    free : int or None
        Bytes the device had free, where known.
    """

    _what = "reserve an arena of {} bytes"  # what could not be done, in the message

    def __init__(self, requested, free, where="the device"):
        self._init = ((requested, free, where), {})
        self.requested = requested
        self.free = free
        has = "" if free is None else f"; {where} has {free} bytes free"
        super().__init__(f"cannot {self._what.format(requested)}{has}")


class NoGpuError(DevallocError, RuntimeError):
    """There is no CUDA GPU to reserve an arena on."""

    def __init__(self, cause):
        self._init = ((cause,), {})
        super().__init__(
            f"no CUDA GPU is available ({cause}). To run on Numba's CUDA simulator "
            "instead, set NUMBA_ENABLE_CUDASIM=1 before numba is imported."
        )


# What arena.alloc/view say of a dtype they refuse, on the GPU and the simulator alike.
DTYPE_HINT = "dtype must be a NumPy number or bool type such as np.float32"


def numba_number(dtype):
    """Whether NumPy `dtype` is a number or bool type Numba's CUDA target types:
    native byte order, no float128 or complex256 (`np.longdouble`)."""
    widest = 16 if dtype.kind == "c" else 8
    return dtype.kind in "biufc" and dtype.isnative and dtype.itemsize <= widest


def _asked(requested):
    if requested < 0:
        return f"an invalid (negative) size, {requested} bytes"
    return f"{requested} bytes"


class ArenaOverflowError(DevallocError, MemoryError):
    """Kernels asked an arena for more than it had left.

    The allocations themselves returned zero-size arrays on the device; this
    error is how the host learns of them, once, after the launches finished.

    Attributes
    ----------
    kernel : str
        Name of the (first) kernel whose allocation failed, or the
        ``arena.empty(...)`` call refused.
    kernels : tuple of str
        Every kernel whose allocations failed, `kernel` first (past an arena's
        first 31 kernels, the others are named ``"<other kernels>"``).
    capacity : int
        The arena's capacity in bytes.
    requested : int
        The largest failed request, in bytes (negative for an invalid size).
    failed : int
        How many allocations failed since the last report.
    not_launched : str or None
        The kernel whose launch found this report waiting and was therefore
        not made (it might read what the failed launch left incomplete); None
        when the report came at a synchronization.
    """

    def __init__(
        self, kernel, capacity, requested, failed, not_launched=None, *, free=None, kernels=None
    ):
        self._init = (
            (kernel, capacity, requested, failed, not_launched),
            {"free": free, "kernels": kernels},
        )
        self.kernel = kernel
        self.kernels = (kernel,) if not kernels else tuple(kernels)
        self.capacity = capacity
        self.requested = requested
        self.failed = failed
        self.not_launched = not_launched
        if free is not None:  # a host-side request (`Arena.empty`), refused at once
            super().__init__(
                f"arena overflow in {kernel}: it asks for {requested} bytes, and {free} "
                f"of the arena's {capacity} bytes are left for frame arrays (the rest "
                "holds this frame's arrays and what its kernels allocated). Make the "
                "arena larger or allocate less per frame."
            )
            return
        skipped = (
            ""
            if not_launched is None
            else f" The launch of {not_launched!r} that found this report was not made."
        )
        advice = (
            "Check the sizes the kernel asks for: no arena holds a negative one."
            if requested < 0
            else "Make the arena larger or allocate less per launch or frame."
        )
        where = f"kernel {kernel!r}"
        if len(self.kernels) > 1:
            where = f"kernels {', '.join(map(repr, self.kernels))} (first in {kernel!r})"
        super().__init__(
            f"arena overflow in {where}: {failed} allocation(s) failed, the largest "
            f"asking for {_asked(requested)}, and the arena's capacity is {capacity} "
            f"bytes. {advice}{skipped}"
        )


class ArenaOverflowWarning(RuntimeWarning):
    """An arena was dropped without `Arena.close()` while an overflow was unreported."""


class PoolMemoryError(DeviceMemoryError):
    """A device allocation from devalloc's memory pool (`devalloc.allocators.numba`)
    failed for lack of memory.

    Attributes
    ----------
    requested : int
        Bytes asked for.
    free : int or None
        Bytes the device had free, where known.
    """

    _what = "allocate {} bytes from the memory pool"


class CudaError(DevallocError, RuntimeError):
    """A CUDA call failed.

    Attributes
    ----------
    status : str
        The CUDA status name, such as ``"CUDA_ERROR_INVALID_VALUE"``.
    """

    def __init__(self, status, what):
        self._init = ((status, what), {})
        self.status = status
        super().__init__(f"{what} failed: {status}")


class MemoryManagerError(DevallocError, RuntimeError):
    """devalloc's Numba memory manager (`devalloc.allocators.numba`) cannot do what
    was asked: it is not the one in use, the CUDA simulator has none, or pool
    memory was asked for a legacy IPC handle."""
