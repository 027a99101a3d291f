"""Simulator side: a devalloc Graph's recording (`cuda_graphs.Recording`'s twin):
the launches, as calls made in order at each replay."""

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
    """The launches recorded for a Graph, after its first node
    ``first_node[1, 1](header_address)``."""

    def __init__(self, stream, first_node, header_address):
        self.stream = stream or cuda.stream()
        self._calls = [lambda: first_node[1, 1](header_address)]
        self._finished = False  # (as on CUDA: not replayable while it records)
        if not hasattr(_here, "recording"):
            _here.recording = weakref.WeakSet()
        _here.recording.add(self)
        self._recording_here = _here.recording  # (its thread's set: close() may come from another)

    def record(self, launch_on, handle, args):
        self._calls.append(lambda: launch_on(None)(handle, *args))

    def fill_zeros(self, memory, array):
        self._calls.append(lambda: memory.fill_zeros(array, None))

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

    def launch(self, stream):  # (Arena._replay checks `replayable` first)
        for call in self._calls:
            call()

    def close(self):
        self._calls = None
        self._recording_here.discard(self)
