"""Every error devalloc raises derives from `DevallocError`."""

__all__ = ["ArenaClosedError", "ArenaOverflowError", "DevallocError"]


class DevallocError(Exception):
    """Base class of all devalloc errors."""


class ArenaClosedError(DevallocError, RuntimeError):
    """An arena was used after `Arena.close()`."""


class ArenaOverflowError(DevallocError, MemoryError):
    """A kernel asked its arena for more than it had left.

    The allocation itself returned a zero-size array on the device; this error
    is how the host learns of it.

    Attributes
    ----------
    kernel : str
        Name of the kernel whose allocation failed.
    capacity : int
        The arena's capacity in bytes.
    requested : int
        Bytes the failing allocation asked for (the largest one, where known).
    failed : int or None
        How many allocations failed, where the host has read it back.
    """

    def __init__(self, kernel, capacity, requested, failed=None):
        self.kernel = kernel
        self.capacity = capacity
        self.requested = requested
        self.failed = failed
        if requested < 0:
            asked = f"an invalid (negative) size, {requested} bytes"
        else:
            asked = f"{requested} bytes"
        count = "" if failed is None else f"; {failed} allocation(s) failed"
        super().__init__(
            f"arena overflow in kernel {kernel!r}: an allocation asked for {asked} "
            f"and the arena's capacity is {capacity} bytes{count}. "
            "Make the arena larger or allocate less per launch or frame."
        )
