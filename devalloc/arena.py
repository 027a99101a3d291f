"""Host side: the Arena's life. Reserve once, launch, reset, frame, stats, close.

The host never synchronizes to reset an arena. The device memory holds two
allocation slots (see `layout`); a launch allocates from one, and the host
resets the arena by sending the next launch to the other slot. That launch's
first thread folds the finished slot into the totals and clears it, in stream
order, so a reset costs no CUDA call at all.

A failed allocation is written by the device into a host-mapped record, which
the host reads at every launch (a plain memory read) and at every
synchronization the library makes, and turns into `ArenaOverflowError`.
"""

import math
import operator
from contextlib import contextmanager

import numpy as np

from . import layout as L
from .errors import ArenaClosedError, ArenaOverflowError, DevallocError
from .memory import Memory
from .stats import ArenaStats

__all__ = ["STRATEGIES", "Arena"]

STRATEGIES = ("warp_slab", "bump")
MIN_ALIGN = L.GRANULE
MAX_ALIGN = 1 << L.MAX_LOG2_SLAB
_NUMBER_KINDS = "biufc"


def _positive_int(value, name):
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int (got bool {value!r})")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int (got {type(value).__name__} {value!r})") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive (got {value})")
    return value


def _dims(shape):
    try:
        dims = (operator.index(shape),)
    except TypeError:
        if not isinstance(shape, tuple):
            raise TypeError(f"shape must be an int or a tuple of ints (got {shape!r})") from None
        try:
            dims = tuple(operator.index(dim) for dim in shape)
        except TypeError:
            raise TypeError(f"shape must be an int or a tuple of ints (got {shape!r})") from None
    if any(dim < 0 for dim in dims):
        raise ValueError(f"shape must not have negative dimensions (got {shape!r})")
    return dims


def _number_dtype(dtype):
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a NumPy number or bool type (got {dtype!r})") from None
    if dtype.kind not in _NUMBER_KINDS:
        raise TypeError(f"dtype must be a NumPy number or bool type (got {dtype})")
    return dtype


class Arena:
    """Device memory reserved once, handed out inside kernels.

    Parameters
    ----------
    nbytes : int
        Capacity of the data region, in bytes.
    align : int, default 256
        Power of two from 16 to 1 MiB. Allocations of at least `align` bytes
        start on a multiple of it; smaller ones on a multiple of 16.
    strategy : {"warp_slab", "bump"}
        ``warp_slab`` (default): per-warp slabs, one global atomic per slab
        refill. ``bump``: one global atomic per allocation.
    device : int, optional
        The GPU to reserve on; the current device when omitted.

    Examples
    --------
    >>> with devalloc.Arena(64 << 20) as arena:      # doctest: +SKIP
    ...     kernel[blocks, threads](arena, image, out)
    """

    def __init__(self, nbytes, *, align=256, strategy="warp_slab", device=None):
        capacity = _positive_int(nbytes, "nbytes")
        align = _positive_int(align, "align")
        if align & (align - 1) or not MIN_ALIGN <= align <= MAX_ALIGN:
            raise ValueError(
                f"align must be a power of two from {MIN_ALIGN} to {MAX_ALIGN} (got {align})"
            )
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES} (got {strategy!r})")
        if device is not None:
            device = operator.index(device)
        if capacity >= 1 << (L.REM_BITS + 40):
            raise ValueError(f"nbytes is too large for one arena (got {capacity})")

        self._capacity = capacity
        self._align = align
        self._strategy = strategy
        self._memory = Memory(capacity, align, device)
        if self._memory.header_address & ~L.ADDRESS_MASK:
            self._memory.free()
            raise DevallocError(
                f"device address {self._memory.header_address:#x} does not fit the launch handle"
            )
        header = np.zeros(L.HEADER_WORDS, np.int64)
        header[L.CAPACITY] = capacity
        header[L.FAIL_RECORD] = self._memory.record_address
        self._memory.write_header(header)

        # The failure record as plain memory: polled at every launch.
        # (A memoryview, not .view(): Numba's mapped arrays give device arrays there.)
        self._record = memoryview(self._memory.record).cast("B").cast("q")
        self._handle_base = L.pack_handle(self._memory.header_address, 0, 0, 0)
        self._kernel_key = (strategy, align)  # which compiled wrapper a kernel launches
        self._slab_bits = {}  # warps in the grid -> slab-size bits of the handle
        self._closed = False
        self._slot = 0
        self._dirty = False  # the live slot has seen a launch since it was cleared
        self._in_frame = False
        self._stream = 0
        self._seq = 0
        self._kernel_names = {}  # seq mod 2**SEQ_BITS -> kernel name, for error reports
        self._seen_event = 0
        self._reported_seq = 0
        self._launches = 0
        self._resets = 0

    # -- properties ------------------------------------------------------------------

    @property
    def capacity(self):
        """Bytes in the data region."""
        return self._capacity

    @property
    def align(self):
        return self._align

    @property
    def strategy(self):
        return self._strategy

    @property
    def device(self):
        return self._memory.device

    @property
    def closed(self):
        return self._closed

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return (
            f"<devalloc.Arena {state}: capacity={self._capacity} strategy={self._strategy!r} "
            f"align={self._align}>"
        )

    # -- launches (called by devalloc.kernel) ------------------------------------------

    def _begin_launch(self, kernel_name, warps, stream):
        """Everything a launch needs from the host, without a CUDA call in the steady
        state (this is the whole per-launch cost: keep it lean). Returns the int64
        handle the kernel receives."""
        if self._closed:
            raise ArenaClosedError(f"cannot launch {kernel_name!r} on a closed arena")
        if self._record[L.REC_EVENT] != self._seen_event:
            self._raise_new_failure()
        if stream is not self._stream and stream != self._stream:
            if self._launches:
                self._memory.order_after(self._stream, stream)
            self._stream = stream
        seq = self._seq = self._seq + 1
        residue = seq & L.SEQ_MASK
        self._kernel_names[residue] = kernel_name
        slab_bits = self._slab_bits.get(warps)
        if slab_bits is None:
            if len(self._slab_bits) > 256:
                self._slab_bits.clear()
            log2_slab = L.log2_slab_for(self._capacity, warps, self._align)
            slab_bits = self._slab_bits[warps] = log2_slab << L.SLAB_SHIFT
        return self._handle_base | self._slot | slab_bits | residue << L.SEQ_SHIFT

    def _end_launch(self):
        self._launches += 1
        if self._in_frame:
            self._dirty = True
        else:  # the next launch starts empty: it allocates from the other slot
            self._slot ^= 1
            self._resets += 1

    def _clear_live_region(self):
        # The next launch allocates from the other slot, which the launch just
        # queued (or an earlier one) has already cleared on the device.
        if self._dirty:
            self._slot ^= 1
            self._dirty = False
            self._resets += 1

    # -- failure reports ---------------------------------------------------------------

    def _raise_new_failure(self, failed=None):
        record = self._record
        event = int(record[L.REC_EVENT])
        if event == self._seen_event:
            return
        self._seen_event = event
        # The record carries the launch's sequence number mod 2**SEQ_BITS; the
        # failing launch is the latest one with that residue.
        seq = self._seq - ((self._seq - int(record[L.REC_SEQ])) & L.SEQ_MASK)
        if seq <= self._reported_seq:
            return  # a late write from a launch already reported
        self._reported_seq = seq
        name = self._kernel_names.get(seq & L.SEQ_MASK, "<unknown kernel>")
        raise ArenaOverflowError(name, self._capacity, int(record[L.REC_ASKED]), failed)

    def check(self):
        """Wait for this arena's launches; raise `ArenaOverflowError` if one of them
        ran out of space and that has not been reported yet."""
        self._require_open()
        self._memory.synchronize(self._stream)
        self._raise_new_failure()

    def _require_open(self):
        if self._closed:
            raise ArenaClosedError("this arena is closed")

    # -- resets and frames -------------------------------------------------------------

    def reset(self, stream=None):
        """Empty the arena for the launches that follow, in stream order.

        Costs no CUDA call and never waits. If `stream` is given and differs
        from the stream of the last launch, it is made to wait for that launch.
        """
        self._require_open()
        if stream is not None and stream is not self._stream and stream != self._stream:
            if self._launches:
                self._memory.order_after(self._stream, stream)
            self._stream = stream
        self._clear_live_region()

    @contextmanager
    def frame(self, *, check=True):
        """Launches inside share one lifetime: memory one kernel allocated stays
        valid in the next, until the frame exits and the arena is reset.

        With ``check=True`` (the default) the exit waits for the frame's launches
        and raises `ArenaOverflowError` if one of them ran out of space; with
        ``check=False`` it returns at once and an overflow is reported at the
        next launch or `check()`.
        """
        self._require_open()
        if self._in_frame:
            raise DevallocError("arena.frame() is already open; frames do not nest")
        self._in_frame = True
        try:
            yield self
        finally:
            self._in_frame = False
            if not self._closed:
                self._clear_live_region()
        if check and not self._closed:
            self.check()

    # -- host views and statistics ------------------------------------------------------

    def device_view(self, offset, shape, dtype):
        """A Numba device array over arena memory at byte `offset` (no copy).

        The memory is what kernels wrote there; it stays valid until a later
        launch allocates over it.
        """
        self._require_open()
        offset = operator.index(offset)
        dims = _dims(shape)
        dtype = _number_dtype(dtype)
        nbytes = math.prod(dims) * dtype.itemsize
        if offset < 0 or offset + nbytes > self._capacity:
            raise ValueError(
                f"a view of {nbytes} bytes at offset {offset} does not fit in the arena's "
                f"{self._capacity} bytes"
            )
        if offset % dtype.itemsize:
            raise ValueError(
                f"offset must be a multiple of the {dtype} item size {dtype.itemsize} "
                f"(got {offset})"
            )
        strides = tuple(dtype.itemsize * math.prod(dims[i + 1 :]) for i in range(len(dims)))
        return self._memory.device_array(offset, dims, strides, dtype)

    def stats(self):
        """Wait for this arena's launches and return an `ArenaStats` snapshot.

        Raises `ArenaOverflowError` first if a launch overflowed and that has
        not been reported yet.
        """
        self.check()
        words = np.empty(L.HEADER_WORDS, np.int64)
        self._memory.read_header(words)
        slots = [words[L.slot_base(s) : L.slot_base(s) + L.SLOT_WORDS] for s in (0, 1)]
        used = [min(int(slot[L.CURSOR]), self._capacity) for slot in slots]
        return ArenaStats(
            capacity_bytes=self._capacity,
            current_bytes=used[self._slot],
            peak_bytes=max(int(words[L.PEAK]), *used),
            total_allocs=int(words[L.TOTAL_ALLOCS]) + sum(int(s[L.ALLOCS]) for s in slots),
            failed_allocs=int(words[L.TOTAL_FAILED]) + sum(int(s[L.FAILED]) for s in slots),
            resets=self._resets,
            launches=self._launches,
            device_mallocs=1,
        )

    # -- closing -----------------------------------------------------------------------

    def close(self):
        """Wait for this arena's launches and release its memory (once no
        `device_view` of it is left). Raises `ArenaOverflowError` (after
        releasing) if a launch overflowed unreported. Closing twice is harmless;
        any other use afterwards raises `ArenaClosedError`."""
        if self._closed:
            return
        self._memory.synchronize(self._stream)
        try:
            self._raise_new_failure()
        finally:
            self._closed = True
            self._memory.free()

    def __enter__(self):
        self._require_open()
        return self

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is None:
            self.close()
        else:  # do not hide the exception that is already on its way
            try:
                self.close()
            except ArenaOverflowError:
                pass
        return False
