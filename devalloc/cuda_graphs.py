"""CUDA graphs through the driver API (cuda.bindings, which numba-cuda's cu12/cu13
extras install): stream capture, instantiation, launch; and a devalloc Graph's
recording made of them. GPU only (the simulator's: `simulator.cuda_graphs`).

Checked against cuda-bindings 13.3 and 13.5 with numba-cuda 0.30.4: Numba's
kernel launches onto a stream in capture mode are recorded, not run.
"""

import gc
import threading
import weakref

import numpy as np
from cuda.bindings import driver as cu
from numba import cuda

from . import layout as L
from .errors import CudaError, DevallocError

__all__ = ["CUDA_SUCCESS", "Recording", "StreamCapture", "driver_call", "stream_handle"]


CUDA_SUCCESS = cu.CUresult.CUDA_SUCCESS


def driver_call(result, what):
    """The values of a cuda.bindings call's `result`; `CudaError` naming `what` and
    the CUDA status if it failed."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != CUDA_SUCCESS:
        raise CudaError(getattr(error, "name", str(error)), what)
    return values[0] if len(values) == 1 else values


# Graphs dropped while their thread was capturing: closing one then would call
# CUDA inside the capture (a stream's destruction waits for its work, which
# ends a capture in error), so they are closed when the capture ends.
_this_thread = threading.local()


def _close_when_safe(capture):
    """A dropped Graph's finalizer: close its capture now, or once this thread's
    capture has ended."""
    pending = getattr(_this_thread, "pending", None)
    if pending is not None:
        pending.append(capture)
    else:
        capture.close()


def stream_handle(stream):
    """The CUstream of a Numba stream, or of the legacy default stream for None/0."""
    return cu.CUstream(int(stream.handle) if stream else 0)


class StreamCapture:
    """Work queued on `stream` (a new stream if None) between construction and
    `finish()` becomes one CUDA graph, launched by `launch(stream)`. The capture
    is thread-local: other host threads may keep using CUDA meanwhile.

    The stream made here is a non-blocking one, so that work another thread
    queues on the legacy default stream meanwhile neither waits for nor
    invalidates the capture (a blocking capture stream takes an implicit
    dependency on such work, which CUDA refuses); work this thread queues there
    runs at once, uncaptured, as on the simulator.
    """

    def __init__(self, stream=None):
        self._own_stream = None
        if stream is None:
            self._own_stream = driver_call(
                cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                "cuStreamCreate",
            )
            stream = cuda.external_stream(int(self._own_stream))
        self.stream = stream
        self._handle = stream_handle(self.stream)
        self._exec = None
        self._graph = None
        self._launch_stream, self._launch_handle = None, stream_handle(None)  # `launch`'s last
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        # Dropped objects' finalizers must not call CUDA while capturing: garbage
        # is collected before the capture starts (as torch.cuda.graph does), and
        # Numba's batched frees of device memory are held back until it ends (a
        # cuMemFree while capturing invalidates the capture: seen on the H200 in
        # the frame pipeline).
        gc.collect()
        self._deferred = cuda.defer_cleanup()
        self._deferred.__enter__()
        try:
            driver_call(cu.cuStreamBeginCapture(self._handle, mode), "cuStreamBeginCapture")
        except BaseException:
            self._deferred.__exit__(None, None, None)
            self._destroy_stream()
            raise
        self._capturing = True
        self._outer_pending = getattr(_this_thread, "pending", None)  # (captures may nest)
        _this_thread.pending = []

    def _end(self):
        self._capturing = False
        try:
            return driver_call(cu.cuStreamEndCapture(self._handle), "cuStreamEndCapture")
        finally:
            self._deferred.__exit__(None, None, None)
            pending, _this_thread.pending = _this_thread.pending, self._outer_pending
            for capture in pending:
                _close_when_safe(capture)  # (now, or at the end of an outer capture)

    def finish(self):
        self._graph = self._end()
        self._exec = driver_call(cu.cuGraphInstantiate(self._graph, 0), "cuGraphInstantiate")

    def abandon(self):
        """End the capture and keep nothing (the capture may have been invalidated)."""
        if self._capturing:
            try:
                graph = self._end()
            except DevallocError:
                return  # the capture was invalidated: nothing was made
            cu.cuGraphDestroy(graph)

    def launch(self, stream):
        """One ``cuGraphLaunch`` on `stream`; the CUstream of the last stream given
        is kept (held, so no other stream can take its place at its address)."""
        if self._exec is None:
            raise DevallocError("this graph was closed, or its capture did not finish")
        if stream is not self._launch_stream:
            self._launch_handle = stream_handle(stream)
            self._launch_stream = stream
        (status,) = cu.cuGraphLaunch(self._exec, self._launch_handle)
        if status != CUDA_SUCCESS:
            driver_call(status, "cuGraphLaunch")  # raises

    def _destroy_stream(self):
        if self._own_stream is not None:  # the driver waits for queued work first
            cu.cuStreamDestroy(self._own_stream)
            self._own_stream = None

    def close(self):
        self.abandon()
        self._launch_stream = None  # (the user's stream is not kept alive by a closed graph)
        if self._exec is not None:
            cu.cuGraphExecDestroy(self._exec)
            self._exec = None
        if self._graph is not None:
            cu.cuGraphDestroy(self._graph)
            self._graph = None
        self._destroy_stream()


class Recording:
    """The launches recorded for a Graph: CUDA stream capture on a stream of its
    own, its first node ``first_node[1, 1](header_address)``, the reset, the
    graph's root, ahead of everything captured. (It was a branch of its own,
    which only the first devalloc launch waited for, so that it ran beside the
    plain kernels ahead of that launch; a chain was faster: on an H100,
    2026-12-06, the pipeline's captured frame 1080p 208.8 -> 208.0 us, 4K
    695.6 -> 693.9 us, two turns each; the reset alone is a 3.4 us kernel.)"""

    _warm = None  # a scratch header: the first node is loaded before any capture

    def __init__(self, stream, first_node, header_address):
        if Recording._warm is None:  # no module loading while capturing
            Recording._warm = cuda.to_device(np.zeros(L.HEADER_WORDS, np.int64))
            first_node[1, 1](Recording._warm.device_ctypes_pointer.value)
        self._capture = StreamCapture(stream)
        self.stream = self._capture.stream
        self.launch = self._capture.launch  # launch(stream): the replay, one cuGraphLaunch
        # The graph's kernels read their arguments' memory at every replay:
        # keep the arrays alive as long as the graph (Numba's launch keeps none,
        # and an array made in the launch's own line is freed when the capture
        # ends). The simulator's recording keeps them in its calls.
        self._arguments = []
        self._finalizer = weakref.finalize(self, _close_when_safe, self._capture)
        try:
            first_node[1, 1, self.stream](header_address)
        except BaseException:  # never leave a capture open behind an error
            self._capture.abandon()
            raise

    def record(self, launch_on, handle, args):
        launch_on(self.stream)(handle, *args)
        self._arguments.append(args)

    def fill_zeros(self, memory, array):
        memory.fill_zeros(array, self.stream)

    def finish(self):
        self._capture.finish()

    def abandon(self):
        self._capture.abandon()
        self._arguments = []

    @property
    def replayable(self):
        """Whether it was finished and not closed since."""
        return self._capture._exec is not None

    def close(self):
        self._finalizer()
        self._arguments = []
