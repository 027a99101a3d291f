"""Simulator side: a devalloc Graph's recording (`cuda_graphs.Recording`'s twin):
the launches, as calls made in order at each replay, each devalloc launch's
handle carrying the replay's slot (as the CUDA graph's two instances do)."""

import threading
import weakref

from numba import cuda

from ..numba_compat import refuse_device_allocations

__all__ = ["Recording"]

_here = threading.local()  # .recording: this thread's recordings still recording (weakly)


def _this_thread_records():
    return len(getattr(_here, "recording", ())) > 0


refuse_device_allocations(_this_thread_records)  # (as CUDA refuses cuMemAlloc while capturing)


class Recording:
    """The launches recorded for a Graph; ``launch(stream, slot)`` makes them."""

    def __init__(self, stream):
        self.stream = stream or cuda.stream()
        self._calls = []  # call(slot), in order
        self._finished = False  # (as on CUDA: not replayable while it records)
        if not hasattr(_here, "recording"):
            _here.recording = weakref.WeakSet()
        _here.recording.add(self)
        self._recording_here = _here.recording  # (its thread's set: close() may come from another)

    def record(self, launch_on, handle, args):
        self._calls.append(lambda slot: launch_on(None)(handle | slot, *args))  # (packed with 0)

    def fill_zeros(self, memory, array):
        self._calls.append(lambda slot: memory.fill_zeros(array, None))

    def finish(self):
        self._finished = True
        self._recording_here.discard(self)

    def abandon(self):
        self._calls = None
        self._recording_here.discard(self)

    @property
    def replayable(self):
        """Whether it was finished and not closed since."""
        return self._finished and self._calls is not None

    def launch(self, stream, slot):  # (Arena._replay checks `replayable` first)
        for call in self._calls:
            call(slot)

    def close(self):
        self._calls = None
        self._recording_here.discard(self)
