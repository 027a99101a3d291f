"""CUDA graphs through the driver API (cuda.bindings, which numba-cuda's cu12/cu13
extras install): stream capture, instantiation, launch. GPU only.

Checked against cuda-bindings 13.3 and 13.5 with numba-cuda 0.30.4: Numba's
kernel launches onto a stream in capture mode are recorded, not run.
"""

from cuda.bindings import driver as cu
from numba import cuda

from .errors import DevallocError

__all__ = ["StreamCapture"]


def _check(result, what):
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != cu.CUresult.CUDA_SUCCESS:
        raise DevallocError(f"{what} failed: {error.name if hasattr(error, 'name') else error}")
    return values[0] if len(values) == 1 else values


def stream_handle(stream):
    """The CUstream of a Numba stream, or of the legacy default stream for None/0."""
    return cu.CUstream(int(stream.handle) if stream else 0)


class StreamCapture:
    """Work queued on `stream` (a new stream if None) between construction and
    `finish()` becomes one CUDA graph, launched by `launch(stream)`. The capture
    is thread-local: other host threads may keep using CUDA meanwhile."""

    def __init__(self, stream=None):
        self.stream = stream or cuda.stream()
        self._handle = stream_handle(self.stream)
        self._exec = None
        self._graph = None
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        # Numba frees device memory of dropped arrays in batches, whenever a batch
        # fills: a cuMemFree while capturing invalidates the capture (seen on the
        # H200 in the frame pipeline). Numba's own switch holds frees back.
        self._deferred = cuda.defer_cleanup()
        self._deferred.__enter__()
        try:
            _check(cu.cuStreamBeginCapture(self._handle, mode), "cuStreamBeginCapture")
        except BaseException:
            self._deferred.__exit__(None, None, None)
            raise
        self._capturing = True

    def _end(self):
        self._capturing = False
        try:
            return _check(cu.cuStreamEndCapture(self._handle), "cuStreamEndCapture")
        finally:
            self._deferred.__exit__(None, None, None)

    def finish(self):
        self._graph = self._end()
        self._exec = _check(cu.cuGraphInstantiate(self._graph, 0), "cuGraphInstantiate")

    def abandon(self):
        if self._capturing:
            try:
                graph = self._end()
            except DevallocError:
                return  # the capture was invalidated: nothing was made
            cu.cuGraphDestroy(graph)

    def launch(self, stream):
        if self._exec is None:
            raise DevallocError("this graph was closed, or its capture did not finish")
        _check(cu.cuGraphLaunch(self._exec, stream_handle(stream)), "cuGraphLaunch")

    def close(self):
        if self._exec is not None:
            cu.cuGraphExecDestroy(self._exec)
            self._exec = None
        if self._graph is not None:
            cu.cuGraphDestroy(self._graph)
            self._graph = None
