"""CUDA graphs through the driver API (cuda.bindings, which numba-cuda's cu12/cu13
extras install): stream capture, instantiation (twice, the second with other
values of chosen kernels' first parameter), launch; and a devalloc Graph's
recording made of them. GPU only (the simulator's: `simulator.cuda_graphs`).

Checked against cuda-bindings 13.3 and 13.5 with numba-cuda 0.30.4: Numba's
kernel launches onto a stream in capture mode are recorded, not run. Setting a
kernel node's parameter needs `cuFuncGetParamInfo` (CUDA 12.4 drivers and
later; seen on an H100 with driver 580.159, 2026-12-07).
"""

import ctypes
import functools
import gc
import threading
import weakref

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
        self._execs = None  # the instances, once finished
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

    def last_node(self):
        """The node the last work queued on the stream became: a kernel node."""
        result = driver_call(cu.cuStreamGetCaptureInfo(self._handle), "cuStreamGetCaptureInfo")
        nodes = result[3]  # (status, id, graph, dependencies, ...): what comes next waits for
        kernel = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
        if len(nodes) != 1 or driver_call(cu.cuGraphNodeGetType(nodes[0]), "type") != kernel:
            raise DevallocError("the capture stream's last work is not one kernel launch")
        return nodes[0]

    def finish(self, second=()):
        """End the capture and instantiate the graph: instance 0 as captured and,
        if `second` names kernel nodes, instance 1 with each one's first
        parameter (8 bytes) changed from the captured value to another,
        ``[(node, captured, value), ...]``."""
        self._graph = self._end()

        def instantiate():
            return driver_call(cu.cuGraphInstantiate(self._graph, 0), "cuGraphInstantiate")

        made = []  # the instances made so far, destroyed if a later step fails
        try:
            made.append(instantiate())
            if second:
                made.append(instantiate())
                sizes = {}  # each kernel's parameter sizes, asked once however often it runs
                for node, captured, value in second:
                    _set_first_parameter(made[1], node, captured, value, sizes)
        except BaseException:
            for instance in made:
                cu.cuGraphExecDestroy(instance)
            raise
        self._execs = (made[0], made[-1])

    def abandon(self):
        """End the capture and keep nothing (the capture may have been invalidated)."""
        if self._capturing:
            try:
                graph = self._end()
            except DevallocError:
                return  # the capture was invalidated: nothing was made
            cu.cuGraphDestroy(graph)

    def launch(self, stream, instance=0):
        """One ``cuGraphLaunch`` of `instance` (0 or 1) on `stream`; the CUstream of
        the last stream given is kept (held, so no other stream can take its
        place at its address)."""
        if self._execs is None:
            raise DevallocError("this graph was closed, or its capture did not finish")
        if stream is not self._launch_stream:
            self._launch_handle = stream_handle(stream)
            self._launch_stream = stream
        (status,) = cu.cuGraphLaunch(self._execs[instance], self._launch_handle)
        if status != CUDA_SUCCESS:
            driver_call(status, "cuGraphLaunch")  # raises

    def _destroy_stream(self):
        if self._own_stream is not None:  # the driver waits for queued work first
            cu.cuStreamDestroy(self._own_stream)
            self._own_stream = None

    def close(self):
        self.abandon()
        self._launch_stream = None  # (the user's stream is not kept alive by a closed graph)
        if self._execs is not None:
            for instance in set(self._execs):
                cu.cuGraphExecDestroy(instance)
            self._execs = None
        if self._graph is not None:
            cu.cuGraphDestroy(self._graph)
            self._graph = None
        self._destroy_stream()


@functools.cache
def driver_version():
    """The CUDA version of the driver, as (major, minor): asked once a process,
    not once per kernel node set."""
    version = driver_call(cu.cuDriverGetVersion(), "cuDriverGetVersion")
    return version // 1000, version % 1000 // 10


def parameter_sizes(func):
    """The sizes of a kernel's (CUfunction's) parameters, in bytes."""
    sizes = []
    while True:  # (cuFuncGetParamInfo refuses the index past the last)
        result = cu.cuFuncGetParamInfo(func, len(sizes))
        if result[0] != CUDA_SUCCESS:
            if not sizes:
                driver_call(result, "cuFuncGetParamInfo")  # raises
            return sizes
        sizes.append(result[2])


def _set_first_parameter(instance, node, captured, value, known_sizes=None):
    """Set the first parameter (8 bytes, `captured` in the graph) of kernel node
    `node` to `value` in the instantiated graph `instance`; its other
    parameters stay as captured. The driver copies the values it is given.
    `known_sizes` keeps `parameter_sizes` by kernel for later calls (a
    graph's nodes often share a kernel)."""
    version = driver_version()
    if version < (12, 4):  # (older drivers have no cuFuncGetParamInfo)
        raise DevallocError(
            "capturing devalloc launches into a CUDA graph needs a CUDA 12.4 driver or later; "
            f"this one is CUDA {version[0]}.{version[1]}"
        )
    params = driver_call(cu.cuGraphKernelNodeGetParams(node), "cuGraphKernelNodeGetParams")
    known_sizes = {} if known_sizes is None else known_sizes
    func = int(params.func)
    if func not in known_sizes:
        known_sizes[func] = parameter_sizes(params.func)
    sizes = known_sizes[func]
    if sizes[0] != 8:
        raise DevallocError(f"the kernel's first parameter is {sizes[0]} bytes, not 8")
    pointers = (ctypes.c_void_p * len(sizes)).from_address(params.kernelParams)
    if ctypes.c_int64.from_address(pointers[0]).value != captured:
        raise DevallocError("a captured kernel node's first parameter is not its launch handle")
    pointers = (ctypes.c_void_p * len(sizes))(*pointers)
    first = ctypes.c_int64(value)
    pointers[0] = ctypes.addressof(first)
    params.kernelParams = ctypes.addressof(pointers)
    driver_call(
        cu.cuGraphExecKernelNodeSetParams(instance, node, params), "cuGraphExecKernelNodeSetParams"
    )


class Recording:
    """The launches recorded for a Graph: CUDA stream capture on a stream of its
    own. Each devalloc launch's kernel node is noted as it is captured, and
    `finish` instantiates the graph twice: instance 0 as captured (its
    launches' handles carry slot 0), instance 1 with slot 1 in each handle;
    ``launch(stream, slot)`` replays the slot's (see `capture`)."""

    def __init__(self, stream):
        self._capture = StreamCapture(stream)
        self.stream = self._capture.stream
        self.launch = self._capture.launch  # launch(stream, slot): one cuGraphLaunch
        # The graph's kernels read their arguments' memory at every replay:
        # keep the arrays alive as long as the graph (Numba's launch keeps none,
        # and an array made in the launch's own line is freed when the capture
        # ends). The simulator's recording keeps them in its calls.
        self._arguments = []
        self._handles = []  # (kernel node, handle) of each devalloc launch
        self._finalizer = weakref.finalize(self, _close_when_safe, self._capture)

    def record(self, launch_on, handle, args):
        launch_on(self.stream)(handle, *args)
        self._arguments.append(args)
        self._handles.append((self._capture.last_node(), handle))

    def fill_zeros(self, memory, array):
        memory.fill_zeros(array, self.stream)

    def finish(self):
        slot_1 = L.SLOT_MASK  # (the handles were packed with slot 0)
        self._capture.finish([(node, handle, handle | slot_1) for node, handle in self._handles])

    def abandon(self):
        self._capture.abandon()
        self._arguments = []

    @property
    def replayable(self):
        """Whether it was finished and not closed since."""
        return self._capture._execs is not None

    def close(self):
        self._finalizer()
        self._arguments = []
