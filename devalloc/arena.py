"""Host side: the Arena's life. Reserve once, launch, reset, frame, stats, close.

The host never synchronizes to reset an arena. The device memory holds two
allocation slots (see `layout`); a launch allocates from one, and the host
resets the arena by sending the next launch to the other slot. That launch's
first thread folds the finished slot into the totals and clears it, in stream
order, so a reset costs no CUDA call at all.

A block whose allocations failed counts them in the arena's header and bumps a
host-mapped record, which the host reads at every launch (a plain memory read)
and at every synchronization the library makes. On a change it waits for the
arena's launches, reads the counts, clears them and raises `ArenaOverflowError`
once. An arena dropped without `close()` says so as an `ArenaOverflowWarning`.

Frame arrays (`Arena.empty`) are taken by the host from the top of the data
region, down, while kernels allocate from the bottom, up to the header's LIMIT
word, which the host sets in stream order (one stream write, only when it
changes) to where the frame arrays begin::

    data: [ in-kernel allocations ->   ...free...   | <- frame arrays ]
          0                                         ^ LIMIT            capacity

Once a frame's kernels have been launched, they may have allocated up to its
LIMIT, so the frame arrays asked for after that must fit above it: a frame sets
aside at its start as much as any earlier frame's arrays took, of the frames
that asked for arrays after a launch (arrays asked for before a frame's first
launch need nothing set aside: an arena whose frames take their arrays first
gives its kernels all the rest). A frame that asks for more than that waits for
its launches to see how far they went (once: the next frames set aside enough).
A capture needs no reserve: nothing it records runs before its arrays are known.

One lock per arena orders its host threads: a launch takes it for as long as
its handle is made and queued; a frame holds it from entry to exit, so the
frame belongs to its thread and the others' launches, resets and frames wait.
"""

import atexit
import itertools
import math
import operator
import threading
import warnings
import weakref

import numpy as np

from . import layout as L
from .backend import SIMULATOR, Memory
from .errors import (
    ArenaClosedError,
    ArenaOverflowError,
    ArenaOverflowWarning,
    DevallocError,
    DevallocTypeError,
    DevallocValueError,
    numba_number,
)
from .numba_compat import numpy_dtype_of
from .sizing import Sizing, run_sized
from .statistics import ArenaStats, ProcessStats

__all__ = ["STRATEGIES", "Arena", "stats"]

STRATEGIES = tuple(L.STRATEGIES)  # the names; what each is: layout.STRATEGIES
MIN_ALIGN = L.GRANULE
MAX_ALIGN = 1 << L.MAX_LOG2_SLAB


def _int(value, name):
    if isinstance(value, bool):
        raise DevallocTypeError(f"{name} must be an int (got bool {value!r})")
    try:
        return operator.index(value)
    except TypeError:
        raise DevallocTypeError(
            f"{name} must be an int (got {type(value).__name__} {value!r})"
        ) from None


def _positive_int(value, name):
    value = _int(value, name)
    if value <= 0:
        raise DevallocValueError(f"{name} must be positive (got {value})")
    return value


def _dims(shape):
    try:
        dims = (_int(shape, "shape"),)
    except TypeError:
        if not isinstance(shape, tuple):
            raise DevallocTypeError(
                f"shape must be an int or a tuple of ints (got {shape!r})"
            ) from None
        try:
            dims = tuple(_int(dim, "shape") for dim in shape)
        except TypeError:
            raise DevallocTypeError(
                f"shape must be an int or a tuple of ints (got {shape!r})"
            ) from None
    if any(dim < 0 for dim in dims):
        raise DevallocValueError(f"shape must not have negative dimensions (got {shape!r})")
    return dims


def require_stream(stream):
    """`stream` if it is one (a Numba stream, a CUDA stream object, 0 or None):
    anything else is refused before the arena changes (the GPU refused it half
    way through a launch, the simulator not at all)."""
    if stream is None or (type(stream) is int and stream == 0):
        return stream
    if any(hasattr(stream, name) for name in ("handle", "synchronize", "__cuda_stream__")):
        return stream
    raise DevallocTypeError(
        f"stream must be a Numba stream (cuda.stream()), 0 or None (got {stream!r})"
    )


def _number_dtype(dtype):
    if dtype is None:  # (NumPy would take it for float64)
        raise DevallocTypeError("dtype must be a NumPy number or bool type (got None)")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        try:  # a Numba scalar type (numba.float32): off the common path
            dtype = np.dtype(numpy_dtype_of(dtype))
        except TypeError:
            raise DevallocTypeError(
                f"dtype must be a NumPy number or bool type (got {dtype!r})"
            ) from None
    if not numba_number(dtype):
        raise DevallocTypeError(f"dtype must be a NumPy number or bool type (got {dtype})")
    return dtype


# Read at every launch: module constants are one lookup, layout's attributes two.
_EVENT = L.REC_EVENT
_SEQ_MASK = L.SEQ_MASK
_SEQ_SHIFT = L.SEQ_SHIFT
_KERNEL_SHIFT = L.KERNEL_SHIFT
OTHER_KERNELS = "<other kernels>"  # allocs_by_kernel's name for those past the first 31


class _Pin:
    """A live graph's frame arrays: from `start` up to the previous pin's start
    (or the top of the data region). A dropped graph's finalizer only marks it
    dead (`drop`); the arena frees it at its next frame, capture or replay."""

    __slots__ = ("live", "start")

    def __init__(self, start):
        self.start = start
        self.live = True

    def drop(self):
        self.live = False


class _Reports:
    """What reporting an arena's failures needs, apart from the Arena itself, so
    that the finalizer of a dropped arena can still report them."""

    __slots__ = (
        "arena_id", "capacity", "kernels", "memory", "names", "record", "seen", "stream",
    )  # fmt: skip

    def __init__(self, memory, capacity, arena_id):
        self.memory = memory
        self.capacity = capacity
        self.arena_id = arena_id  # marks its errors as this arena's (`_overflowed`)
        # The failure record as plain memory: polled at every launch.
        # (A memoryview, not .view(): Numba's mapped arrays give device arrays there.)
        self.record = memoryview(memory.record).cast("B").cast("q")
        self.seen = 0  # the record's event count when last reported
        self.names = {}  # launch sequence number mod 2**SEQ_BITS -> kernel name
        self.kernels = []  # kernel id -> name (`Arena._kernel_names`)
        self.stream = 0  # where the arena's latest launch was queued

    def waiting(self):
        return self.record[L.REC_EVENT] != self.seen

    def take(self, not_launched=None):
        """The failures not reported yet, as an error, and clear them. Call only
        after the arena's launches have finished."""
        event = int(self.record[L.REC_EVENT])
        if event == self.seen:
            return None
        self.seen = event
        words = np.empty(L.HEADER_WORDS, np.int64)
        self.memory.read_header(words)
        failed = int(words[L.PENDING_FAILED])
        if failed == 0:
            return None
        cleared = np.array([0, L.NOTHING_ASKED, 0], np.int64)
        self.memory.write_header(cleared, first=L.PENDING_FAILED)
        self.memory.write_header(np.zeros(1, np.int64), first=L.PENDING_KERNELS)
        name = self.names.get(int(words[L.PENDING_SEQ]) - 1, "<unknown kernel>")
        ids = int(words[L.PENDING_KERNELS])
        others = [kernel for i, kernel in enumerate(self.kernels) if ids >> i & 1]
        error = ArenaOverflowError(
            name, self.capacity, int(words[L.PENDING_ASKED]), failed, not_launched,
            kernels=(name, *(kernel for kernel in others if kernel != name)),
        )  # fmt: skip
        error._arena_id = self.arena_id
        return error

    def release(self):
        """Wait for the arena's launches, free its memory, and return the failures
        nobody was told about (an error, or None)."""
        try:
            self.memory.synchronize(self.stream)
            return self.take()
        finally:
            self.memory.free()


# Arenas dropped without close(). Their finalizers only queue them here: a
# finalizer runs inside whatever the garbage collector interrupted, possibly a
# CUDA call, so the memory is freed and the overflow reported at the next safe
# point: an arena made, checked or closed, or the interpreter's exit.
_dropped = []
_open_arenas = weakref.WeakSet()
# Held while _open_arenas or _process is read or changed: arenas are made and
# closed from any thread, and a WeakSet changed while another thread iterates
# over it raises (seen making arenas from four threads at once).
_registry_lock = threading.Lock()
_arena_ids = itertools.count()
# The streams arena.capture() records on, while it does (see `Arena._launch`).
_capturing_streams = []
_exit_registered = []
_process = {"device_mallocs": 0, "peak_reserved_bytes": 0}  # for `stats`


def stats():
    """The devalloc arenas of this process: a `ProcessStats`."""
    with _registry_lock:
        arenas = list(_open_arenas)
        return ProcessStats(
            arenas=len(arenas),
            reserved_bytes=sum(arena._reserved_bytes for arena in arenas),
            peak_reserved_bytes=_process["peak_reserved_bytes"],
            device_mallocs=_process["device_mallocs"],
        )


def close_on_exit(close, exc, what):
    """``close()`` at the exit of a with statement: if exception `exc` is already on
    its way, an overflow `close` raises joins it as a note instead of hiding it."""
    if exc is None:
        close()
        return
    try:
        close()
    except ArenaOverflowError as overflow:
        join_as_note(exc, f"while closing {what}: {overflow}")


def join_as_note(error, note):
    """Add `note` (an overflow's report) to `error` on its way up, so that it is
    not lost; on Python 3.10, which has no notes, warn it (`ArenaOverflowWarning`)."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        warnings.warn(note, ArenaOverflowWarning, stacklevel=3)


def _queue_dropped(reports):
    _dropped.append(reports)


def release_dropped():
    """Free the memory of arenas dropped without close(); warn of their unreported
    overflows (`ArenaOverflowWarning`)."""
    while _dropped:
        reports = _dropped.pop()
        try:
            error = reports.release()
        except Exception:  # at interpreter exit the CUDA context may be gone
            continue
        if error is not None:
            warnings.warn(
                f"an arena dropped without close() had an unreported overflow: {error}",
                ArenaOverflowWarning,
                stacklevel=2,
            )


def _at_exit():
    with _registry_lock:
        still_open = list(_open_arenas)
    for arena in still_open:  # still open at exit: dropped now
        arena._release()
    release_dropped()


def _register_exit():
    # Registered once CUDA is up, so that it runs before Numba's own shutdown.
    if not _exit_registered:
        atexit.register(_at_exit)
        _exit_registered.append(True)


class _Frame:
    """``with arena.frame():`` (see `Arena.frame`). Holds the arena's lock from
    entry to exit."""

    __slots__ = ("_arena", "_check", "_thread")

    def __init__(self, arena, check):
        self._arena = arena
        self._check = check
        self._thread = None  # the thread that opened it

    def __enter__(self):
        arena = self._arena
        arena._lock.acquire()
        try:
            arena._require_open()
            if arena._in_frame:
                raise DevallocError("arena.frame() is already open; frames do not nest")
            if arena._capture is not None:
                raise DevallocError("arena.frame() cannot open inside arena.capture()")
        except BaseException:
            arena._lock.release()
            raise
        arena._give_back_graph_arrays()
        arena._in_frame = True
        arena._late_arrays = False
        arena._limit = max(arena._graph_top - arena._reserve, 0)
        self._thread = threading.get_ident()
        return arena

    def __exit__(self, exc_type, exc, traceback):
        arena = self._arena
        if self._thread != threading.get_ident():  # (it holds the arena's lock: leave it be)
            raise DevallocError(
                "a frame is exited by the thread that opened it, and only once "
                "(`with arena.frame():` does both)"
            )
        self._thread = None
        try:
            arena._in_frame = False
            arena._frames += 1
            if not arena._closed:
                arena._clear_live_region()
                arena._limit = arena._graph_top
                if self._check and exc_type is None:
                    arena._report_failures()
        finally:
            arena._lock.release()
        return False


def checked_arena_options(nbytes, align=256, strategy="warp_slab", device=None, sizing=None):
    """`Arena`'s arguments checked (no memory reserved): ``(nbytes, align)`` as ints."""
    nbytes = _positive_int(nbytes, "nbytes")
    align = _positive_int(align, "align")
    if align & (align - 1) or not MIN_ALIGN <= align <= MAX_ALIGN:
        raise DevallocValueError(
            f"align must be a power of two from {MIN_ALIGN} to {MAX_ALIGN} (got {align})"
        )
    if strategy not in STRATEGIES:
        raise DevallocValueError(f"strategy must be one of {STRATEGIES} (got {strategy!r})")
    if device is not None and _int(device, "device") < 0:
        raise DevallocValueError(f"device must be a GPU number, 0 or more (got {device})")
    if nbytes > L.MAX_CAPACITY:
        raise DevallocValueError(
            f"nbytes must be at most {L.MAX_CAPACITY} (4 TiB) for one arena (got {nbytes})"
        )
    if sizing is not None:
        _checked_sizing(sizing)
    return nbytes, align


def _checked_sizing(sizing):
    if not isinstance(sizing, Sizing):
        raise DevallocTypeError(f"sizing must be a devalloc.Sizing (got {type(sizing).__name__})")
    return sizing


class Arena:
    """Device memory reserved once, handed out inside kernels.

    Parameters
    ----------
    nbytes : int
        Capacity of the data region, in bytes (rounded up to a multiple of 16,
        at most 4 TiB).
    align : int, default 256
        Power of two from 16 to 1 MiB. Allocations of at least `align` bytes
        start on a multiple of it; smaller ones on a multiple of 16.
    strategy : {"warp_slab", "bump"}
        ``warp_slab`` (default): per-warp slabs, one global atomic per slab
        refill. ``bump``: one global atomic per group of lanes allocating
        together, exact accounting.
    device : int, optional
        The GPU to reserve on; the current device when omitted.
    sizing : Sizing, optional
        How `run` sizes the arena (default: ``Sizing()``, 1.5 times the peak of
        the first 3 frames, doubled when a frame overflows).

    Raises
    ------
    DeviceMemoryError
        The device cannot hold the arena (a `MemoryError`).

    Notes
    -----
    An arena may be used from any number of host threads; a frame belongs to
    the thread that opened it, and the other threads' launches, resets and
    frames on the arena wait until it exits. For concurrency, give each stream
    or thread its own arena.

    Examples
    --------
    >>> with devalloc.Arena(64 << 20) as arena:      # doctest: +SKIP
    ...     kernel[blocks, threads](arena, image, out)
    """

    def __init__(self, nbytes, *, align=256, strategy="warp_slab", device=None, sizing=None):
        nbytes, align = checked_arena_options(nbytes, align, strategy, device, sizing)
        capacity = (nbytes + L.GRANULE - 1) & -L.GRANULE
        release_dropped()  # before reserving: their memory may be what this one needs

        self._align = align
        self._strategy = strategy
        self._kernel_key = (strategy, align)  # which compiled wrapper a kernel launches
        self._lock = threading.RLock()
        self._id = next(_arena_ids)
        self._closed = False
        self._in_frame = False
        self._capture = None  # the Graph being recorded, while arena.capture() is open
        self._seq = 0
        self._launches = 0
        self._resets = 0
        self._device_mallocs = 0
        self._frames = 0
        self._kernel_ids = {}  # kernel name -> where its allocations are counted
        self._kernel_names = []  # the reverse: id -> name (OTHER_KERNELS for the last)
        self._moves = 0  # resizes: a Graph captured before one refuses to replay
        self._sizing = Sizing()
        if sizing is not None:
            self.sizing = sizing
        self._measured = 0  # frames `run` measured at this size, before it settles
        self._settled = False
        # The most a frame's arrays took, of the frames that asked for one after
        # a launch (arrays asked for before need nothing set aside): set aside
        # at a frame's start.
        self._reserve = 0
        self._late_arrays = False  # this frame asked for an array after a launch
        self._peak_arrays = 0  # the most a frame's or a capture's arrays took
        self._array_specs = {}  # (shape, dtype) -> (dims, strides, dtype, bytes)
        self._occupy(capacity, device, stream=0)  # DeviceMemoryError if it cannot
        with _registry_lock:
            _open_arenas.add(self)
        _register_exit()

    def _occupy(self, capacity, device, stream, totals=(0, 0), kernel_allocs=None):
        """Reserve an arena of `capacity` bytes and start it empty, its total
        allocation and failure counts `totals` (and, per kernel id, `kernel_allocs`)."""
        memory = Memory(capacity, self._align, device)
        if memory.header_address & ~L.ADDRESS_MASK:
            memory.free()
            raise DevallocError(
                f"device address {memory.header_address:#x} does not fit the launch handle"
            )
        header = np.zeros(L.HEADER_WORDS, np.int64)
        header[L.CAPACITY] = capacity
        header[L.LIMIT] = capacity
        header[L.FAIL_RECORD] = memory.record_address
        header[L.PENDING_ASKED] = L.NOTHING_ASKED
        header[L.TOTAL_ALLOCS], header[L.TOTAL_FAILED] = totals
        if kernel_allocs is not None:
            header[L.KERNEL_ALLOCS : L.KERNEL_ALLOCS + L.KERNEL_IDS] = kernel_allocs
        memory.write_header(header)

        self._memory = memory
        self._capacity = capacity
        self._device_mallocs += 1
        moving = getattr(self, "_reserved_bytes", 0)  # (a resize frees the old memory after)
        self._reserved_bytes = L.allocation_bytes(capacity, self._align)
        with _registry_lock:
            _process["device_mallocs"] += 1
            others = sum(arena._reserved_bytes for arena in _open_arenas if arena is not self)
            _process["peak_reserved_bytes"] = max(
                _process["peak_reserved_bytes"], others + moving + self._reserved_bytes
            )
        self._reports = _Reports(memory, capacity, self._id)
        self._reports.stream = stream
        self._reports.kernels = self._kernel_names
        self._release = weakref.finalize(self, _queue_dropped, self._reports)
        self._release.atexit = False  # _at_exit takes care of it
        self._header_address = memory.header_address
        # slot (0 or 1) -> warps in the grid -> the launch handle, but its
        # sequence number (see _handle_for)
        self._handles = {0: {}, 1: {}}
        self._slot = 0
        self._dirty = False  # the live slot has seen a launch since it was cleared
        # Frame arrays: the top of the data region, from `_top` up (see the module's notes).
        self._top = capacity
        # The live graphs' frame arrays, at the top, each from its _Pin's start
        # up to the one before's (the lowest last); frames start below them.
        self._pins = []
        self._graph_top = capacity
        self._limit = capacity  # LIMIT for the next launch
        self._limit_set = capacity  # LIMIT on the device, in stream order

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

    # -- what belongs inside kernels -------------------------------------------------

    @property
    def _numba_type_(self):
        # Numba asks this of every kernel argument: say what to do instead.
        raise DevallocTypeError(
            "a devalloc.Arena can only be passed to a kernel decorated with "
            "@devalloc.kernel, as its first argument: not to a plain @cuda.jit kernel, "
            "nor as another argument (a kernel allocates from one arena)"
        )

    def _in_kernels_only(self, method):
        raise DevallocTypeError(
            f"arena.{method}() works inside kernels decorated with @devalloc.kernel, on "
            "the arena passed as their first argument; on the host, use "
            "arena.device_view(offset, shape, dtype)"
        )

    def alloc(self, shape, dtype):
        self._in_kernels_only("alloc")

    def offset(self, array):
        self._in_kernels_only("offset")

    def view(self, offset, shape, dtype):
        self._in_kernels_only("view")

    # -- launches (called by devalloc.kernel, holding self._lock) ---------------------

    def _launch(self, launcher, launch, args):
        """Queue ``launch(handle, *args)`` for `launcher` (a ``kernel[grid, block]``),
        with everything it needs from the host and no CUDA call in the steady
        state; inside ``arena.capture()``, record it instead. This is the whole
        per-launch cost of devalloc on the host, measured against a plain launch
        by benchmarks/run.py's launch suite: keep it lean (one call deep, as
        few attribute reads as it can)."""
        lock = self._lock  # (acquire and release: half the cost of a with statement)
        lock.acquire()
        try:
            if self._capture is not None:
                return launcher._record(self, args)
            if self._closed:
                raise ArenaClosedError(f"cannot launch {launcher._name!r} on a closed arena")
            reports = self._reports
            if reports.record[_EVENT] != reports.seen:
                self._report_failures(not_launched=launcher._name)
            if self._memory.check_context:
                self._require_context(launcher._name)
            stream = launcher._stream
            if _capturing_streams and stream:
                self._refuse_joining_a_capture(stream, launcher._name)
            if stream is not reports.stream and stream != reports.stream:
                self._move_to(stream)
            if self._limit != self._limit_set:
                self._set_limit(self._limit, stream)
            handle = self._handle_for(launcher._warps, self._slot, reports.names, launcher._name)
            try:
                launch(handle, *args)
            except BaseException:
                if SIMULATOR:  # the kernel ran, up to the exception: its memory is used
                    self._end_launch()
                raise
            # `_end_launch`, inlined: 40-50 ns of a hot path whose cost is a target.
            self._launches += 1
            if self._in_frame:
                self._dirty = True
            else:  # the next launch starts empty: it allocates from the other slot
                self._slot ^= 1
                self._resets += 1
        finally:
            lock.release()

    def _refuse_joining_a_capture(self, stream, name):
        """A devalloc launch on another arena's capture stream would be recorded
        in its graph with this arena's handle of now: its replays would neither
        reset this arena nor report to it."""
        if any(stream is capturing for capturing in _capturing_streams):
            raise DevallocError(
                f"{name}: this arena is not the one capturing on that stream; capture "
                "each arena's launches with its own arena.capture(), as graphs of their own"
            )

    def _require_context(self, what):
        """Refuse, before anything is queued, to launch in another GPU's context:
        the kernel would run there against this arena's memory (an illegal
        address, and a dead context, seen on two H200s)."""
        wrong = self._memory.wrong_context()
        if wrong is not None:
            raise DevallocError(f"{what}: {wrong}")

    def _handle_for(self, warps, slot, names, kernel_name):
        """The handle of a launch of `warps` warps from `slot` (`layout.pack_handle`)
        with a new sequence number, under which `names` keeps `kernel_name` for
        failure reports. The rest of the handle is packed once per (slot,
        warps): its sequence field is zero there, so the number is or-ed in."""
        seq = self._seq = (self._seq + 1) & _SEQ_MASK
        names[seq] = kernel_name
        handle = self._handles[slot].get(warps)
        if handle is None:
            handle = self._new_handle(warps, slot)
        kernel = self._kernel_ids.get(kernel_name)
        if kernel is None:
            kernel = self._kernel_ids[kernel_name] = min(len(self._kernel_ids), L.KERNEL_MASK)
            if len(self._kernel_names) == kernel:
                self._kernel_names.append(kernel_name if kernel < L.KERNEL_MASK else OTHER_KERNELS)
        return handle | seq << _SEQ_SHIFT | kernel << _KERNEL_SHIFT

    def _new_handle(self, warps, slot):
        handles = self._handles[slot]
        if len(handles) > 256:
            handles.clear()
        log2_slab = L.log2_slab_for(self._capacity, warps, self._align)
        handles[warps] = L.pack_handle(self._header_address, slot, log2_slab, 0, warps=warps)
        return handles[warps]

    def _move_to(self, stream):
        """The arena's next work goes to `stream`: ordered after what it queued
        on the stream before (one event; no CUDA call if the stream is the same)."""
        reports = self._reports
        if stream != reports.stream:
            if self._launches:
                self._memory.order_after(reports.stream, stream)
            reports.stream = stream

    def _end_launch(self, launches=1):
        """The launch (or a replay's `launches`) was queued (or, on the simulator,
        ran, even if it raised)."""
        self._launches += launches
        if self._in_frame:
            self._dirty = True
        else:  # the next launch starts empty: it allocates from the other slot
            self._slot ^= 1
            self._resets += 1

    def _replay(self, graph, stream):
        """`Graph.replay`: the captured launches as one frame of their own. Its host
        time is what a replay costs above a bare ``cuGraphLaunch`` (the captured
        pipeline frame's host share, benchmarks/variants.py): as `_launch`, one
        check for all the refusals, the rest only where something changed."""
        if stream is None:
            stream = 0  # (the default stream, as a launch's: no ordering between them)
        else:
            require_stream(stream)
        lock = self._lock
        lock.acquire()
        try:
            recording = graph._recording
            if (
                self._closed
                or self._in_frame
                or self._capture is not None
                or graph._moves != self._moves
                or not recording.replayable
            ):
                self._refuse_replay(graph)
            reports = self._reports
            if reports.record[_EVENT] != reports.seen:
                self._report_failures(not_launched=f"a replay of {graph!r}")
            if stream is not reports.stream and stream != reports.stream:
                self._move_to(stream)
            if self._memory.check_context:
                self._require_context(f"a replay of {graph!r}")
            self._give_back_graph_arrays()
            limit = min(graph._limit, self._graph_top)  # (below the graphs captured after it)
            if limit != self._limit_set:
                self._set_limit(limit, stream)
            reports.names.update(graph._names)
            launched = False
            try:
                recording.launch(stream, self._slot)  # the graph's instance for the slot
                launched = True
            finally:
                # (On the simulator, a replay that raised ran its launches up to
                # the exception: it counts as well.) Outside a frame, as a replay
                # always is, the next launch takes the other slot, as after an
                # eager launch; a graph without devalloc launches used no slot.
                if launched or SIMULATOR:
                    if graph._launches:  # (a replay without any empties nothing: no reset)
                        self._end_launch(graph._launches)
                    self._frames += 1
        finally:
            lock.release()

    def _refuse_replay(self, graph):
        if self._closed:
            raise ArenaClosedError("cannot replay a graph of a closed arena")
        if self._in_frame or self._capture is not None:
            raise DevallocError(
                "a replay is a frame of its own: replay outside arena.frame() and arena.capture()"
            )
        if not graph._recording.replayable:
            raise DevallocError("this graph was closed, or its capture did not finish")
        raise DevallocError(
            "this graph was captured before arena.resize() moved the arena: its "
            "launches would use the old memory. Capture the frame again."
        )

    def _set_limit(self, limit, stream):
        self._memory.set_limit(limit, stream)
        self._limit_set = limit

    def _clear_live_region(self, keep_arrays=False):
        # The next launch allocates from the other slot, which the launch just
        # queued (or an earlier one) has already cleared on the device.
        if self._dirty:
            self._slot ^= 1
            self._dirty = False
            self._resets += 1
        if not keep_arrays:
            self._release_frame_arrays()

    def _release_frame_arrays(self, learn=True):
        taken = self._graph_top - self._top
        if taken:
            self._peak_arrays = max(self._peak_arrays, self._capacity - self._top)
            if learn and self._late_arrays:
                self._reserve = max(self._reserve, taken)
            self._top = self._graph_top

    def _keep_graph_arrays(self):
        """At the end of a capture: its frame arrays stay the graph's, above
        what later frames and captures take, until it is closed or dropped.
        Returns their `_Pin`, or None if it made none."""
        if self._top == self._graph_top:
            return None
        pin = _Pin(self._top)
        self._pins.append(pin)
        self._graph_top = self._top
        return pin

    def _give_back_graph_arrays(self):
        """Free the frame arrays of the closed or dropped graphs at the bottom of
        the graphs' region (outside frames and captures: their arrays start
        below it). A graph's are freed once those of the graphs captured after
        it are."""
        pins = self._pins
        if not pins or pins[-1].live:
            return
        while pins and not pins[-1].live:
            pins.pop()
        self._graph_top = self._top = pins[-1].start if pins else self._capacity
        self._limit = self._graph_top

    def _graph_closed(self, pin):
        """`Graph.close`: its frame arrays are free (now, if no frame or capture
        is open and none captured after it holds arrays)."""
        with self._lock:
            pin.live = False
            if not self._in_frame and self._capture is None and not self._closed:
                self._give_back_graph_arrays()

    # -- failure reports ---------------------------------------------------------------

    def _report_failures(self, not_launched=None):
        """Wait for the arena's launches; raise what failed and was not reported."""
        if self._capture is not None:  # waiting would end the CUDA capture in error
            raise DevallocError(
                "arena.check(), stats() and close() wait for the GPU: call them after "
                "arena.capture() closes"
            )
        self._memory.synchronize(self._reports.stream)
        error = self._reports.take(not_launched)
        if error is not None:
            raise error

    def check(self):
        """Wait for this arena's launches; raise `ArenaOverflowError` if one of them
        ran out of space and that has not been reported yet."""
        release_dropped()
        with self._lock:
            self._require_open()
            self._report_failures()

    def _require_open(self):
        if self._closed:
            raise ArenaClosedError("this arena is closed")

    # -- resets and frames -------------------------------------------------------------

    def reset(self, stream=None):
        """Empty the arena for the launches that follow, in stream order.

        Costs no CUDA call and never waits. If `stream` is given and differs
        from the stream of the last launch, it is made to wait for that launch.
        Inside a frame, what its kernels allocated is emptied; its arrays
        (`empty`) stay until it exits. Not inside ``arena.capture()``: a replay
        is one frame, and a reset would not be recorded in it.
        """
        require_stream(stream)
        with self._lock:
            self._require_open()
            if self._capture is not None:
                raise DevallocError(
                    "arena.reset() cannot be recorded in arena.capture(): a replay is one "
                    "frame. Capture the launches before and after the reset as two graphs."
                )
            if stream is not None and stream is not self._reports.stream:
                self._move_to(stream)
            self._clear_live_region(keep_arrays=self._in_frame)

    def capture(self, stream=None):
        """Record the launches inside as one CUDA graph, not run:
        ``with arena.capture() as graph: ...``, then ``graph.replay()`` runs
        them as one frame, as often as wanted (see `devalloc.Graph`).

        devalloc kernels launched inside are recorded; other work joins the
        graph when queued on ``graph.stream`` (`stream`, if given: a Numba
        stream to capture on; otherwise one of the graph's own). Like a frame,
        the capture holds the arena: other threads wait until it closes.
        """
        from .capture import _Capture

        return _Capture(self, require_stream(stream))

    def frame(self, *, check=True):
        """Launches inside share one lifetime: memory one kernel allocated stays
        valid in the next, until the frame exits and the arena is reset.

        The frame belongs to the thread that opened it: other threads' launches,
        resets and frames on this arena wait until it exits. With ``check=True``
        (the default) the exit waits for the frame's launches and raises
        `ArenaOverflowError` if one of them ran out of space; with
        ``check=False`` it returns at once and an overflow is reported at the
        next launch or `check()`.
        """
        return _Frame(self, check)

    # -- host views and statistics ------------------------------------------------------

    def device_view(self, offset, shape, dtype):
        """A Numba device array over arena memory at byte `offset` (no copy).

        The memory is what kernels wrote there; it stays valid until a later
        launch allocates over it. A view of nothing at offset -1 (where a
        kernel's ``arena.alloc(0, ...)`` or failed request lies) is an empty
        array, so that kernels' results of any length gather alike.
        """
        offset = _int(offset, "offset")
        dims = _dims(shape)
        dtype = _number_dtype(dtype)
        nbytes = math.prod(dims) * dtype.itemsize
        if offset == -1 and nbytes == 0:
            offset = 0
        if offset < 0 or offset + nbytes > self._capacity:
            raise DevallocValueError(
                f"a view of {nbytes} bytes at offset {offset} does not fit in the arena's "
                f"{self._capacity} bytes"
            )
        if offset % dtype.itemsize:
            raise DevallocValueError(
                f"offset must be a multiple of the {dtype} item size {dtype.itemsize} "
                f"(got {offset})"
            )
        strides = tuple(dtype.itemsize * math.prod(dims[i + 1 :]) for i in range(len(dims)))
        with self._lock:
            self._require_open()
            return self._memory.device_array(offset, dims, strides, dtype)

    def empty(self, shape, dtype, *, stream=None):
        """A device array from the arena, for the rest of the frame: no CUDA call.

        Inside ``arena.frame()`` (or ``arena.capture()``) only; valid until the
        frame exits (for a capture: the graph's own, the same memory at every
        replay, until the graph is closed or dropped; see `Graph`). Aligned
        as in-kernel allocations are (to `align` if at least `align` bytes,
        else to 16), never overlapping them. The array is bound to the arena's
        stream (`stream`, if given, after the arena's earlier work): any Numba
        kernel takes it, and CuPy and PyTorch read it without a copy through
        ``__cuda_array_interface__``. Inside a capture it is bound to the
        arena's stream (or `stream`): the stream the replays are expected on.

        Raises
        ------
        ArenaOverflowError
            The arena has no room left for it (nothing is taken).
        """
        # The specs seen before, for shapes of ints only: 2.0 == 2 would find
        # 2's spec, and NumPy refuses a float shape.
        plain = type(shape) is int or isinstance(shape, np.integer)
        if type(shape) is tuple:
            plain = True
            for dim in shape:
                if type(dim) is not int and not isinstance(dim, np.integer):
                    plain = False
                    break
        spec = None
        if plain:
            try:
                spec = self._array_specs.get((shape, dtype))
            except TypeError:  # an unhashable dtype: refused below
                pass
        if spec is None:
            spec = self._array_spec(shape, dtype)
        dims, strides, dtype, nbytes = spec
        lock = self._lock  # (acquire and release: half the cost of a with statement)
        lock.acquire()
        try:
            if self._closed:
                raise ArenaClosedError("this arena is closed")
            if not self._in_frame and self._capture is None:
                raise DevallocError(
                    "arena.empty() gives memory for the rest of a frame: call it inside "
                    "`with arena.frame():` or `with arena.capture():`"
                )
            reports = self._reports
            if stream is None:
                stream = reports.stream
            elif require_stream(stream) is not reports.stream and self._capture is None:
                self._move_to(stream)
            # (Inside a capture, not graph.stream: a non-blocking stream, which the
            # replays' stream would not wait for when the user fills the array.)
            start = self._top
            if nbytes:
                if self._dirty:  # (after a launch: what the next frames set aside)
                    self._late_arrays = True
                start = (start - nbytes) & -(self._align if nbytes >= self._align else L.GRANULE)
                if start < self._limit:
                    self._lower_limit(start, shape, dtype, nbytes)
                self._top = start
            return self._memory.frame_array(start, dims, strides, dtype, stream)
        finally:
            lock.release()

    def zeros(self, shape, dtype, *, stream=None):
        """`empty`, filled with zeros in stream order (one memset; inside a
        capture, a node of the graph: zeros at every replay)."""
        array = self.empty(shape, dtype, stream=stream)
        with self._lock:
            if self._capture is not None:
                self._capture._recording.fill_zeros(self._memory, array)
            else:
                self._memory.fill_zeros(array, self._reports.stream)
        return array

    def _array_spec(self, shape, dtype):
        dims = _dims(shape)
        spec_dtype = _number_dtype(dtype)
        itemsize = spec_dtype.itemsize
        strides = tuple(itemsize * math.prod(dims[i + 1 :]) for i in range(len(dims)))
        spec = (dims, strides, spec_dtype, math.prod(dims) * itemsize)
        if len(self._array_specs) < 1024:
            try:
                self._array_specs[shape, dtype] = spec
            except TypeError:  # unhashable: a 0-d NumPy array as a dimension, as NumPy takes
                pass
        return spec

    def _lower_limit(self, start, shape, dtype, nbytes):
        """Make room for a frame array at `start`, below the LIMIT the frame's
        launches would have, or raise `ArenaOverflowError`."""
        if not self._dirty:  # no launch of this frame yet: nothing to collide with
            if start >= 0:
                self._limit = start
                return
            free = self._top
        else:
            free = self._top - self._limit
        if start >= 0 and self._capture is None:
            # The frame's launches may have allocated up to the LIMIT: see how far.
            self._memory.synchronize(self._reports.stream)
            words = self._header_words()
            used = int(words[L.slot_base(self._slot) + L.CURSOR])
            if start >= min(used, self._capacity):
                self._limit = start
                return
            free = self._top - used
        name = f"arena.empty({shape!r}, {np.dtype(dtype)})"
        error = ArenaOverflowError(name, self._capacity, nbytes, 1, free=max(free, 0))
        error._arena_id = self._id
        raise error

    def _overflowed(self, error):
        """Whether `error` (an `ArenaOverflowError`) reports this arena."""
        return getattr(error, "_arena_id", None) == self._id

    def stats(self):
        """Wait for this arena's launches and return an `ArenaStats` snapshot.

        Raises `ArenaOverflowError` first if a launch overflowed and that has
        not been reported yet.
        """
        with self._lock:
            self.check()
            return self._stats_of(self._header_words())

    def _header_words(self):
        """The header as the device left it (int64 words): a copy to the host."""
        words = np.empty(L.HEADER_WORDS, np.int64)
        self._memory.read_header(words)
        return words

    def _stats_of(self, words):
        """`stats` from the header's `words`, read after the launches finished."""
        slots = [words[L.slot_base(s) : L.slot_base(s) + L.SLOT_WORDS] for s in (0, 1)]
        used = [min(int(slot[L.CURSOR]), self._capacity) for slot in slots]
        # A slot's counts: its own words and what its blocks left in its count lines.
        shards = [[L.shard_base(s, k) for k in range(L.COUNT_SHARDS)] for s in (0, 1)]
        allocs = [
            int(slot[L.ALLOCS]) + sum(int(words[b + L.SHARD_ALLOCS]) for b in bases)
            for slot, bases in zip(slots, shards)
        ]
        requested = [
            (int(slot[L.REQUESTED]) + sum(int(words[b + L.SHARD_GRANULES]) for b in bases)) << 4
            for slot, bases in zip(slots, shards)
        ]
        arrays = self._capacity - self._top
        by_kernel = {}
        for name, kernel in self._kernel_ids.items():
            name = OTHER_KERNELS if kernel == L.KERNEL_MASK else name
            by_kernel[name] = int(words[L.KERNEL_ALLOCS + kernel])
        return ArenaStats(
            capacity_bytes=self._capacity,
            current_bytes=used[self._slot] + arrays,
            peak_bytes=max(int(words[L.PEAK]), *used) + max(self._peak_arrays, arrays),
            total_allocs=int(words[L.TOTAL_ALLOCS]) + sum(allocs),
            failed_allocs=int(words[L.TOTAL_FAILED]) + sum(int(s[L.FAILED]) for s in slots),
            resets=self._resets,
            launches=self._launches,
            device_mallocs=self._device_mallocs,
            requested_bytes=requested[self._slot],
            peak_requested_bytes=max(int(words[L.PEAK_REQUESTED]) << 4, *requested),
            frame_array_bytes=arrays,
            peak_frame_array_bytes=max(self._peak_arrays, arrays),
            current_allocs=allocs[self._slot],
            frames=self._frames,
            allocs_by_kernel=by_kernel,
        )

    # -- sizing ------------------------------------------------------------------------

    @property
    def sizing(self):
        """How `run` sizes the arena: a `Sizing` (settable)."""
        return self._sizing

    @sizing.setter
    def sizing(self, sizing):
        self._sizing = _checked_sizing(sizing)

    def run(self, frame, /, *args, **kwargs):
        """Run ``frame(*args, **kwargs)`` as one frame of an arena that sizes itself,
        and return what it returns.

        The first frames (``sizing.measure`` of them) are measured, and the
        arena then settles at ``sizing.headroom`` times their peak (frame
        arrays and in-kernel allocations). A frame that overflows the arena is
        run again in one ``sizing.growth`` times larger (and at least as large
        as its largest failed request needs), up to ``sizing.max_nbytes``: so
        `frame` must be safe to run twice (its inputs intact, its outputs
        written again). Each move is one `resize`, counted in
        ``stats().device_mallocs``.
        """
        return run_sized(self, frame, args, kwargs)

    def resize(self, nbytes):
        """Move the arena to a new device allocation of `nbytes` bytes (rounded up
        to 16), empty, and free the old one.

        Waits for the arena's launches first, and raises a pending
        `ArenaOverflowError` instead if there is one (nothing changes then).
        Counts carry over (`total_allocs`, `failed_allocs`, `allocs_by_kernel`,
        `launches`, `resets`, `frames`); peaks start again. Views and frame
        arrays of the old memory keep it alive but are no longer the arena's:
        kernels allocate over none of it, and none of it is what kernels
        allocate. A `Graph` captured before refuses
        to replay: capture the frame again. Outside frames and captures only.
        """
        nbytes = _positive_int(nbytes, "nbytes")
        if nbytes > L.MAX_CAPACITY:
            raise DevallocValueError(
                f"nbytes must be at most {L.MAX_CAPACITY} (4 TiB) for one arena (got {nbytes})"
            )
        with self._lock:
            self._require_open()
            if self._in_frame or self._capture is not None:
                raise DevallocError("resize the arena outside arena.frame() and arena.capture()")
            self.check()  # waits; raises a pending overflow
            words = self._header_words()
            stats = self._stats_of(words)
            old_reports, old_release = self._reports, self._release
            release_dropped()
            self._occupy(
                (nbytes + L.GRANULE - 1) & -L.GRANULE,
                self._memory.device,
                old_reports.stream,
                (stats.total_allocs, stats.failed_allocs),
                words[L.KERNEL_ALLOCS : L.KERNEL_ALLOCS + L.KERNEL_IDS],
            )
            self._moves += 1
            old_release.detach()
            old_reports.release()

    # -- closing -----------------------------------------------------------------------

    def close(self):
        """Wait for this arena's launches and release its memory (once no
        `device_view` of it is left). Raises `ArenaOverflowError` (after
        releasing) if a launch overflowed unreported. Closing twice is harmless;
        any other use afterwards raises `ArenaClosedError`."""
        release_dropped()
        with self._lock:
            if self._closed:
                return
            if self._capture is not None:
                self._report_failures()  # refuses, saying why
            self._closed = True
            self._release.detach()
            with _registry_lock:
                _open_arenas.discard(self)
            error = self._reports.release()
        if error is not None:
            raise error

    def __enter__(self):
        self._require_open()
        return self

    def __exit__(self, exc_type, exc, traceback):
        close_on_exit(self.close, exc, "the arena")
        return False

    def __reduce__(self):
        # A copy would share the device memory and free it when either closes.
        raise DevallocTypeError(
            "an Arena owns its device memory and cannot be copied or pickled: pass the "
            "arena itself (in Dask, `devalloc.dask.worker_arena` gives each worker one)"
        )

    def __copy__(self):
        self.__reduce__()

    def __deepcopy__(self, memo):
        self.__reduce__()
