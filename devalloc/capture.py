"""Host side: a frame recorded once and replayed (``arena.capture()``, ``graph.replay()``).

On the GPU the launches inside ``with arena.capture() as graph:`` are recorded
by CUDA stream capture into one CUDA graph; a replay is one ``cuGraphLaunch``.
On the simulator the launches are recorded as calls and a replay makes them in
order, with the same semantics (`backend.Recording`: `cuda_graphs.Recording`
or `simulator.cuda_graphs.Recording`).

How a replay resets the arena with no host work per launch. An eager launch
carries its slot in its handle, chosen by the host: its first thread folds and
empties the other slot, which the launch before it used, and the host flips
its slot for the next launch. A captured launch's handle is fixed in the graph,
so the graph is instantiated twice (`Recording.finish`): as captured, its
devalloc launches' handles carrying slot 0, and again with slot 1 in each.
A replay launches the instance of the slot the next eager launch would have
used and flips the host's slot after it, exactly as an eager launch does: the
replay's first devalloc launch resets the arena as any launch does, and its
statistics and failure reports are those of any launch. The graph needs no
reset node of its own. (It had one, a one-thread kernel at its root that chose
the slot on the device for launches that read it there: a 3.4 us kernel ahead
of every replay, 1.044x static-graph's GPU time for the pipeline's captured
1080p frame on an H100, 2026-12-07, where a hand-written counter baseline
costs 1.002x.)
"""

import weakref

from .arena import _capturing_streams
from .backend import Recording
from .errors import DevallocError

__all__ = ["Graph"]


class Graph:
    """A frame captured with ``arena.capture()``. ``replay(stream=None)`` runs it
    as one frame: it starts with an empty arena, memory lives across its
    kernels, an overflow is reported at the next replay, launch or check, and
    the statistics count it. Replays need no host synchronization between them.

    Inside the capture, devalloc kernels launched without a stream (or on
    ``graph.stream``) are recorded; other work (plain kernels, copies) joins the
    graph when queued on ``graph.stream``, and runs at capture time when queued
    elsewhere (``graph.stream`` does not wait for the default stream). On the
    simulator only devalloc kernels are recorded: other work runs at capture
    time.

    Frame arrays made inside the capture (`Arena.empty`) are the graph's own,
    as a PyTorch graph's private memory pool: the same memory at every
    replay, above what its kernels allocate, and kept for it until it is
    closed or dropped. No frame, launch or other graph of the arena uses it
    meanwhile, so inputs filled before a replay (in its stream's order) and
    outputs read after it stay as they are whatever runs in between; the
    arena has that much less room for other work. A graph's arrays are given
    back once it and every graph captured after it that made arrays are
    closed or dropped. A graph captured before `Arena.resize` refuses to
    replay.
    """

    def __init__(self, arena, stream=None):
        self._arena = arena
        self._names = {}  # launch sequence residue -> kernel name, for failure reports
        self._launches = 0
        self._limit = arena.capacity  # LIMIT while it replays: below its frame arrays
        self._moves = arena._moves  # the arena's resizes: one after this one moved it
        self._recording = Recording(stream)
        self.stream = self._recording.stream
        self._pin = None  # its frame arrays (`Arena._keep_graph_arrays`), if it made any

    def _keep_arrays(self, pin):
        if pin is not None:
            self._pin = pin
            weakref.finalize(self, pin.drop)

    @property
    def launches(self):
        """How many devalloc launches one replay makes."""
        return self._launches

    def _record(self, launch_on, warps, args, name):
        """Record a devalloc launch of `warps` warps: `launch_on(stream)` gives the
        launch callable."""
        handle = self._arena._handle_for(warps, 0, self._names, name)  # (slot 1: `Recording`)
        self._launches += 1
        self._recording.record(launch_on, handle, args)

    def replay(self, stream=None):
        """Run the captured frame on `stream` (the default stream if omitted),
        ordered after the arena's earlier work; no host synchronization."""
        self._arena._replay(self, stream)

    def close(self):
        """Release the CUDA graph and the stream it was captured on, if it made
        one (also done when the Graph is dropped), and give its frame arrays
        back to the arena."""
        self._recording.close()
        if self._pin is not None:
            self._arena._graph_closed(self._pin)

    def __repr__(self):
        return f"<devalloc.Graph: {self._launches} launches>"


class _Capture:
    """``with arena.capture(stream=None) as graph:``. Holds the arena's lock from
    entry to exit, as a frame does."""

    __slots__ = ("_arena", "_graph", "_stream")

    def __init__(self, arena, stream):
        self._arena = arena
        self._stream = stream
        self._graph = None

    def __enter__(self):
        arena = self._arena
        arena._lock.acquire()
        try:
            arena._require_open()
            if arena._in_frame or arena._capture is not None:
                raise DevallocError("arena.capture() cannot open inside a frame or another capture")
            self._graph = Graph(arena, self._stream)
        except BaseException:
            arena._lock.release()
            raise
        arena._give_back_graph_arrays()
        arena._capture = self._graph
        arena._limit = arena._graph_top  # (no reserve: its arrays are known before it runs)
        _capturing_streams.append(self._graph.stream)
        return self._graph

    def __exit__(self, exc_type, exc, traceback):
        arena = self._arena
        try:
            _capturing_streams.remove(self._graph.stream)
            arena._capture = None
            graph = self._graph
            graph._limit = arena._limit  # its kernels stop below its frame arrays
            try:
                if exc_type is None:
                    graph._recording.finish()
                    graph._keep_arrays(arena._keep_graph_arrays())  # (only a graph that replays)
                else:
                    graph._recording.abandon()
            finally:
                arena._release_frame_arrays(learn=False)
                arena._limit = arena._graph_top
        finally:
            arena._lock.release()
        return False
