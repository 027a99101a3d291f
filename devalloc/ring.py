"""Host side: frames in flight on several streams (`ArenaRing`).

One arena per stream, taken in turn: frame k runs on slot k mod n, with that
slot's arena and its stream, so frames on different slots share no live
region and overlap on the GPU, and nothing waits on the host between them. A
slot is used again only in its stream's order: its next frame's launches queue
behind its last frame's on the same stream, so the arena is reset (in stream
order, as always) only after that frame's kernels are done with it::

    ring = devalloc.ArenaRing(4, 64 << 20)
    for image in images:
        with ring.frame() as slot:             # the next slot's arena and stream
            k[g, b, slot.stream](slot.arena, image, out)
    ring.close()                               # waits for every slot

A frame's overflow is reported at the slot's next launch, check or close, not
at the frame's exit: waiting there would serialize the streams.
"""

import operator
import threading
from contextlib import nullcontext
from typing import NamedTuple

from numba import cuda

from .arena import Arena, close_on_exit, join_as_note
from .errors import ArenaClosedError, DevallocTypeError, DevallocValueError

__all__ = ["ArenaRing", "RingSlot"]


_DEFAULT_STREAMS = (None, 0, 1, 2)  # none, and CUDA's handles of the legacy and per-thread ones


def _stream_key(stream):
    """What tells two streams apart: the CUDA handle (the simulator's have none)."""
    if stream is None or stream == 0:
        return None
    handle = getattr(stream, "handle", None)
    return ("simulated", id(stream)) if handle is None else int(handle)


class RingSlot(NamedTuple):
    """One slot of an `ArenaRing`: an arena and the stream its frames run on."""

    arena: Arena
    stream: object


class _RingFrame:
    """``with ring.frame() as slot:`` (see `ArenaRing.frame`)."""

    __slots__ = ("_frame", "_slot")

    def __init__(self, slot):
        self._slot = slot
        self._frame = slot.arena.frame(check=False)

    def __enter__(self):
        self._frame.__enter__()
        return self._slot

    def __exit__(self, exc_type, exc, traceback):
        return self._frame.__exit__(exc_type, exc, traceback)


class ArenaRing:
    """`n` arenas of `nbytes` each, one per stream, for frames in flight.

    Parameters
    ----------
    n : int
        Frames in flight: arenas and streams in the ring (1 to 64).
    nbytes : int
        Each arena's capacity (see `Arena`).
    streams : sequence of Numba streams, optional
        The slots' streams; by default, ``n`` new ones.
    **options
        Passed to each `Arena` (``align``, ``strategy``, ``device``, ``sizing``).
    """

    def __init__(self, n, nbytes, *, streams=None, **options):
        if isinstance(n, bool):
            raise DevallocTypeError(f"n must be an int (got bool {n!r})")
        try:
            n = operator.index(n)
        except TypeError:
            raise DevallocTypeError(f"n must be an int (got {type(n).__name__} {n!r})") from None
        if not 1 <= n <= 64:
            raise DevallocValueError(f"n must be from 1 to 64 frames in flight (got {n})")
        if streams is not None:
            try:
                streams = list(streams)
            except TypeError:
                raise DevallocTypeError(
                    f"streams must be a sequence of {n} Numba streams (got {streams!r})"
                ) from None
            if len(streams) != n:
                raise DevallocValueError(
                    f"streams must give one stream per slot: {n} (got {len(streams)})"
                )
            keys = [_stream_key(stream) for stream in streams]
            if any(key in _DEFAULT_STREAMS for key in keys):
                raise DevallocValueError(
                    "each slot needs a stream of its own, not a default stream: frames on it "
                    "would not overlap"
                )
            if len(set(keys)) != n:
                raise DevallocValueError(
                    "each slot needs a stream of its own (a stream was given twice)"
                )
        self._slots = []
        try:
            for k in range(n):
                arena = Arena(nbytes, **options)  # (first: it checks the options)
                if streams:
                    stream = streams[k]
                else:
                    device = arena.device
                    with nullcontext() if device is None else cuda.gpus[device]:
                        stream = cuda.stream()  # (a stream belongs to its device)
                arena.reset(stream=stream)  # its work, frame arrays included, goes there
                self._slots.append(RingSlot(arena, stream))
        except BaseException:
            self.close()
            raise
        self._next = 0
        self._lock = threading.Lock()
        self._closed = False

    def __len__(self):
        return len(self._slots)

    def __getitem__(self, k):
        return self._slots[k]

    def __iter__(self):
        return iter(self._slots)

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return f"<devalloc.ArenaRing {state}: {len(self._slots)} slots>"

    def frame(self):
        """The next slot's frame: ``with ring.frame() as slot:``, launches on
        ``slot.stream`` with ``slot.arena``. Frames of the slot's arena share one
        lifetime; its exit does not wait for the GPU. A slot still in a frame
        of another thread is waited for (frames belong to their thread)."""
        with self._lock:
            if self._closed:
                raise ArenaClosedError("this ring is closed")
            slot = self._slots[self._next]
            self._next = (self._next + 1) % len(self._slots)
        return _RingFrame(slot)

    def check(self):
        """Wait for every slot; raise the first unreported `ArenaOverflowError`."""
        for slot in self._slots:
            slot.arena.check()

    def stats(self):
        """Each slot's `ArenaStats`, in slot order (waits for every slot)."""
        return [slot.arena.stats() for slot in self._slots]

    def close(self):
        """Wait for every slot and release the arenas; then raise the first
        unreported overflow, the other slots' joined to it as notes (on Python
        3.10, as `ArenaOverflowWarning` s)."""
        self._closed = True
        errors = []
        for slot in self._slots:
            try:
                slot.arena.close()
            except Exception as error:  # close the others first
                errors.append(error)
        if errors:
            first = errors[0]
            for other in errors[1:]:  # an overflow is never lost
                join_as_note(first, f"another slot: {other}")
            raise first

    def __enter__(self):
        if self._closed:
            raise ArenaClosedError("this ring is closed")
        return self

    def __exit__(self, exc_type, exc, traceback):
        close_on_exit(self.close, exc, "the ring")
        return False
