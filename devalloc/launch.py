"""Numba glue: ``@devalloc.kernel`` and its launches.

The user writes ``def k(arena, ...)``; devalloc compiles it as a device function
and generates a wrapper kernel around it::

    def k(handle, a, b):                       # handle: one int64 argument
        state = cuda.shared.array(...)         # the block's slab words and counters
        tally = cuda.local.array(2, int64)     # this thread's counts (registers)
        header, slot, log2_slab, seq, kernel, spread = unpack_handle(handle)
        hdr = array_at(header, ...)
        limit = hdr[LIMIT]                     # loaded before the barrier, so that its
                                               # latency is not on the first allocation's path
        warp = enter_block(hdr, state, tally, slot, spread)  # zero the block state and tally;
                                               # thread 0 folds the other slot
        user(make_arena(header, limit, slot, ...), a, b)  # the user's code, given an Arena
        leave_block(hdr, state, tally, ...)  # tallies summed; the block's last thread
                                               # flushes its counts and hands back its slab's tail

A kernel whose function can only view arena memory (``arena.view`` and
``arena.offset`` are all it does with its arena: `may_allocate` reads that off
its bytecode) gets a lean wrapper instead: no block state, no barrier, no exit;
only the grid's first thread folds the other slot (`allocator.enter_views`), so
that it costs what a plain kernel costs and resets the arena as any launch does.

A launch ``k[grid, block, stream](arena, a, b)`` asks the arena for a handle (no
CUDA call in the steady state), then launches the wrapper like any Numba
kernel. One wrapper is compiled per (strategy, align) of the arenas it meets.
The same source runs on the simulator, where `backend` gives it the simulator's
``make_arena`` and its ``jit_kernel`` (which registers each thread as a lane).
"""

import dis
import functools
import inspect
import math
import operator

import numpy as np
from numba import cuda, int64, types

from . import layout as L
from .allocator import enter_block, enter_views, leave_block
from .arena import Arena, require_stream
from .backend import SIMULATOR, arena_maker, array_at, device_function, jit_kernel
from .errors import DevallocError, DevallocTypeError, DevallocValueError
from .numba_compat import compiling_for, direct_launch

__all__ = ["Kernel", "kernel"]

unpack_handle = device_function(L.unpack_handle)

# The wrapper's own names are spelt with a prefix no parameter of the user's
# function starts with (see `_reserved_names`), so none can capture them.
_WRAPPER = """\
def {name}({handle}{params}):
    {state} = {cuda}.shared.array({BLOCK_WORDS}, {int64})
    {tally} = {cuda}.local.array({TALLY_WORDS}, {int64})
    {header}, {slot}, {log2_slab}, {seq}, {kernel}, {spread} = {unpack_handle}({handle})
    {hdr} = {array_at}({header}, {HEADER_WORDS})
    {limit} = {hdr}[{LIMIT}]
    {warp} = {enter_block}({hdr}, {state}, {tally}, {slot}, {spread_if_sharded})
    {arena} = {make_arena}({header}, {limit}, {slot}, {log2_slab}, {warp}, {state}, {tally})
    {user}({arena}{params})
    {leave_block}({hdr}, {state}, {tally}, {slot}, {seq}, {kernel}, {align})
"""

# A kernel that cannot allocate: the arena's views only (see `may_allocate`).
_VIEWS_WRAPPER = """\
def {name}({handle}{params}):
    {state} = {cuda}.shared.array(1, {int64})
    {tally} = {cuda}.local.array(1, {int64})
    {header}, {slot}, {log2_slab}, {seq}, {kernel}, {spread} = {unpack_handle}({handle})
    {hdr} = {array_at}({header}, {HEADER_WORDS})
    {enter_views}({hdr}, {slot})
    {arena} = {make_arena}({header}, {hdr}[{LIMIT}], {slot}, {log2_slab}, 0, {state}, {tally})
    {user}({arena}{params})
"""

_VIEW_METHODS = frozenset({"view", "offset"})


def may_allocate(py_func):
    """Whether a kernel's function may allocate from its arena: False only if its
    bytecode does nothing with the arena parameter but call ``.view`` or
    ``.offset`` on it. Any other use (``alloc``, the arena passed to a device
    function, stored, rebound, captured by an inner function, another
    attribute) counts as allocating: the full wrapper is always correct."""
    code = getattr(py_func, "__code__", None)
    if code is None or code.co_argcount < 1:
        return True
    name = code.co_varnames[0]
    if name in code.co_cellvars:
        return True
    instructions = list(dis.get_instructions(code))
    for at, instruction in enumerate(instructions):
        if instruction.opcode not in dis.haslocal:
            continue
        value = instruction.argval
        if value != name and not (isinstance(value, tuple) and name in value):
            continue
        if not instruction.opname.startswith("LOAD_FAST") or isinstance(value, tuple):
            return True  # stored, deleted, or loaded two at a time (3.13): not followed
        after = instructions[at + 1] if at + 1 < len(instructions) else None
        if after is None or after.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
            return True
        if after.argval not in _VIEW_METHODS:
            return True
    return False


_LOCALS = (
    "handle", "limit", "state", "tally", "header", "slot", "log2_slab", "seq", "kernel",
    "spread", "hdr", "warp", "arena",
)  # fmt: skip
_CONSTANTS = ("BLOCK_WORDS", "HEADER_WORDS", "LIMIT", "TALLY_WORDS")


def _reserved_names(params, globals_):
    """The wrapper's names for its locals and globals: a prefix that no name in
    `params` starts with, so that every valid parameter name works."""
    prefix = "_devalloc_"
    while any(name.startswith(prefix) for name in params):
        prefix = "_" + prefix
    return {name: prefix + name for name in (*_LOCALS, *globals_)}


# cuda.jit options that also shape the user's function, compiled as a device function.
_DEVICE_OPTIONS = ("debug", "lineinfo", "fastmath", "opt")
_MAX_CACHED_LAUNCHERS = 64


def _user_parameters(py_func):
    # Numba compiles a function's bytecode: a callable object, a functools.partial
    # or a builtin has none to compile.
    if not inspect.isfunction(py_func):
        raise DevallocTypeError(f"@devalloc.kernel needs a Python function (got {py_func!r})")
    try:
        signature = inspect.signature(py_func)
    except (TypeError, ValueError):
        raise DevallocTypeError(
            f"@devalloc.kernel needs a Python function (got {py_func!r})"
        ) from None
    params = list(signature.parameters.values())
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not params or any(p.kind not in plain or p.default is not p.empty for p in params):
        raise DevallocTypeError(
            f"@devalloc.kernel: {py_func.__qualname__} must take plain positional "
            "parameters, the first receiving the arena (got "
            f"{py_func.__qualname__}{signature})"
        )
    return [p.name for p in params[1:]]


def _positive_ints(value, most):
    """`value` as a tuple of 1 to `most` positive ints, or None if it is not one."""
    items = value if isinstance(value, tuple) else (value,)
    if not 1 <= len(items) <= most:
        return None
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 1 for i in items):
        return None
    return items


def _checked_machine_options(py_func, options):
    """Check `max_registers` and `launch_bounds` as the GPU would (the simulator
    ignores them, and a kernel must fail alike on both); returns the threads per
    block `launch_bounds` allows, None for any."""
    name = py_func.__qualname__
    registers = options.get("max_registers")
    if registers is not None and (_positive_ints(registers, 1) is None or registers > 255):
        raise DevallocValueError(
            f"{name}: max_registers must be an int from 1 to 255 (got {registers!r})"
        )
    bounds = options.get("launch_bounds")
    if bounds is None:
        return None
    items = _positive_ints(bounds, 3)
    if items is None:
        raise DevallocValueError(
            f"{name}: launch_bounds must be a positive int or a tuple of 1-3 of them "
            f"(max threads per block, min blocks per SM, max blocks per cluster; got {bounds!r})"
        )
    return items[0]


class Kernel:
    """A kernel whose first parameter receives an `Arena`. Made by `kernel`."""

    def __init__(self, py_func, options):
        if options.get("cache"):
            raise DevallocValueError("@devalloc.kernel does not support cache=True yet")
        if options.get("device"):
            raise DevallocTypeError(
                "@devalloc.kernel makes kernels: a device function that allocates is a "
                "@cuda.jit(device=True) function called from one, with the arena passed on"
            )
        self.py_func = py_func
        self._options = dict(options)
        self._params = _user_parameters(py_func)
        self._max_block_threads = _checked_machine_options(py_func, options)
        functools.update_wrapper(self, py_func)
        device_options = {k: v for k, v in options.items() if k in _DEVICE_OPTIONS}
        self._user = device_function(py_func, **device_options)
        self.allocates = may_allocate(py_func)  # False: the lean wrapper (`_VIEWS_WRAPPER`)
        self._dispatchers = {}  # (strategy, align) -> cuda.jit dispatcher of the wrapper
        self._launchers = {}

    def __repr__(self):
        return f"<devalloc.kernel {self.py_func.__qualname__}>"

    def __call__(self, *args, **kwargs):
        raise DevallocTypeError(
            f"launch a devalloc kernel with a configuration: "
            f"{self.__name__}[blocks, threads](arena, ...)"
        )

    def __getitem__(self, config):
        # Keyed with the types of the grid and block (and of the stream and the
        # shared memory) too: True == 1 and 1.0 == 1, so a bool or a float would
        # find a checked int's launcher.
        try:
            if len(config) == 2:
                key = (config, type(config[0]), type(config[1]))
            else:
                key = (config, type(config[0]), type(config[1]), type(config[2]), type(config[-1]))
            launcher = self._launchers.get(key)
        except (TypeError, IndexError, KeyError):  # unhashable (a list in it), or no pair
            return _Launcher(self, config)  # checked, not kept
        if launcher is None:
            if len(self._launchers) >= _MAX_CACHED_LAUNCHERS:
                self._launchers.clear()
            launcher = self._launchers[key] = _Launcher(self, config)
        return launcher

    def wrapper_source(self, strategy="warp_slab", align=256):
        """The generated wrapper kernel's Python function (for inspection and PTX)."""
        values = {
            "cuda": cuda,
            "int64": int64,
            "unpack_handle": unpack_handle,
            "array_at": array_at,
            "enter_block": enter_block,
            "enter_views": enter_views,
            "leave_block": leave_block,
            "make_arena": arena_maker(strategy, align),
            "user": self._user,
        }
        name = self.__name__ if self.__name__.isidentifier() else "devalloc_kernel"
        names = _reserved_names([*self._params, name], values)
        source = (_WRAPPER if self.allocates else _VIEWS_WRAPPER).format(
            name=name,
            params="".join(f", {param}" for param in self._params),
            align=int(align),
            # (only ``bump`` takes through cursor shards; `warp_slab` passes 0)
            spread_if_sharded=names["spread"] if L.STRATEGIES[strategy].direct else "0",
            **names,
            **{constant: getattr(L, constant) for constant in _CONSTANTS},
        )
        namespace = {names[key]: value for key, value in values.items()}
        filename = f"<devalloc kernel {self.__qualname__} {strategy} align={align}>"
        exec(compile(source, filename, "exec"), namespace)
        return namespace[name]

    def dispatcher(self, strategy, align):
        key = (strategy, align)
        dispatcher = self._dispatchers.get(key)
        if dispatcher is None:
            dispatcher = jit_kernel(**self._options)(self.wrapper_source(strategy, align))
            self._dispatchers[key] = dispatcher
        return dispatcher

    def ptx(self, *argtypes, strategy="warp_slab", align=256, cc=(9, 0)):
        """PTX of the kernel as launched (wrapper and all) for Numba `argtypes` of
        the parameters after the arena. Needs no GPU, but the real compiler:
        not under the simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
        kept = (*_DEVICE_OPTIONS, "launch_bounds")  # (max_registers is the linker's)
        options = {k: v for k, v in self._options.items() if k in kept}
        with compiling_for(cc):
            ptx, _ = cuda.compile_ptx(
                self.wrapper_source(strategy, align), (types.int64, *argtypes), cc=cc, **options
            )
        return ptx


def refuse_runtime_dtypes(args):
    """A dtype cannot be a kernel argument: ``arena.alloc`` is compiled for one.
    Nor can another arena (the GPU refuses it while typing: `Arena._numba_type_`)."""
    for arg in args:
        if isinstance(arg, Arena):
            arg._numba_type_()
        if isinstance(arg, np.dtype) or (isinstance(arg, type) and issubclass(arg, np.generic)):
            raise DevallocTypeError(
                f"a dtype cannot be a kernel argument (got {arg!r}): the GPU compiles "
                "arena.alloc for one dtype, so name it in the kernel (np.float32)"
            )


_MAX_GRID = (2**31 - 1, 65535, 65535)
_MAX_BLOCK = (1024, 1024, 64)


def _launch_dims(value, what, limits):
    """A grid or block size as a tuple of 1-3 positive ints within CUDA's limits."""
    try:
        dims = (operator.index(value),)
    except TypeError:
        try:
            dims = tuple(operator.index(d) for d in value)
        except TypeError:
            dims = ()
    if not 1 <= len(dims) <= 3 or isinstance(value, bool):
        raise DevallocTypeError(f"{what} must be an int or a tuple of 1-3 ints (got {value!r})")
    for dim, limit, axis in zip(dims, limits, "xyz"):
        if not 1 <= dim <= limit:
            raise DevallocValueError(f"{what} must be 1 to {limit} along {axis} (got {value!r})")
    return dims


class _Launcher:
    """``kernel[grid, block(, stream(, sharedmem))]``: callable with the arena first."""

    __slots__ = ("_configured", "_griddim", "_kernel", "_name", "_rest", "_stream", "_warps")

    def __init__(self, kernel, config):
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise DevallocValueError(
                "a launch configuration is [blocks, threads], [blocks, threads, stream] "
                f"or [blocks, threads, stream, sharedmem] (got {config!r})"
            )
        blocks = _launch_dims(config[0], "the number of blocks", _MAX_GRID)
        block = _launch_dims(config[1], "the threads per block", _MAX_BLOCK)
        threads = math.prod(block)
        if threads > L.MAX_BLOCK_THREADS:
            raise DevallocValueError(
                f"a block has at most {L.MAX_BLOCK_THREADS} threads (got {config[1]!r}: {threads})"
            )
        bound = kernel._max_block_threads
        if bound is not None and threads > bound:
            raise DevallocValueError(
                f"{kernel.__qualname__} was compiled with launch_bounds for at most {bound} "
                f"threads per block (got {config[1]!r}: {threads})"
            )
        self._kernel = kernel
        self._name = kernel.__qualname__
        # Numba takes ints and tuples of them, not lists or NumPy ints: the checked
        # dimensions, as tuples of ints, are what it is given.
        self._griddim = blocks
        self._rest = (block, *config[2:])
        self._stream = require_stream(config[2]) if len(config) > 2 else 0
        if len(config) > 3:
            shared = config[3]
            if isinstance(shared, bool) or not isinstance(shared, (int, np.integer)):
                raise DevallocTypeError(
                    f"the dynamic shared memory must be an int of bytes (got {shared!r})"
                )
            if shared < 0:
                raise DevallocValueError(
                    f"the dynamic shared memory must be 0 or more bytes (got {shared})"
                )
        self._warps = math.prod(blocks) * -(-threads // 32)
        self._configured = {}

    def __call__(self, arena, *args):
        try:
            launch = self._configured[arena._kernel_key]
        except (AttributeError, KeyError):
            launch = self._configure(arena)
        if SIMULATOR:  # the GPU refuses these while typing the launch
            refuse_runtime_dtypes(args)
        try:
            return arena._launch(self, launch, args)
        except BaseException:
            # On the GPU nothing was queued: say why, if a dtype argument is why
            # (the simulator refused those above).
            refuse_runtime_dtypes(args)
            raise

    def _record(self, arena, args):
        """Inside ``arena.capture()``: the launch becomes a node of the graph."""
        for arg in args:
            if isinstance(arg, np.ndarray):
                raise DevallocTypeError(
                    f"{self._name}: inside arena.capture(), pass device arrays "
                    "(cuda.to_device), not NumPy arrays: Numba would copy a host array "
                    "once, while capturing, not at each replay"
                )
        graph = arena._capture
        if self._stream and self._stream is not graph.stream:
            raise DevallocError(
                f"{self._name}: inside arena.capture(), launch devalloc kernels without a "
                "stream (or on graph.stream); they are recorded on the graph's stream"
            )
        dispatcher = self._kernel.dispatcher(*arena._kernel_key)
        block, shared = self._rest[0], (self._rest[2] if len(self._rest) > 2 else 0)

        def launch_on(stream):
            return dispatcher[self._griddim, block, stream, shared]

        graph._record(launch_on, self._warps, args, self._name)

    def _configure(self, arena):
        """The Numba launch of the wrapper compiled for this arena's type."""
        if not isinstance(arena, Arena):
            raise DevallocTypeError(
                f"{self._name}: the first argument must be a devalloc.Arena "
                f"(got {type(arena).__name__})"
            )
        dispatcher = self._kernel.dispatcher(*arena._kernel_key)
        launch = direct_launch(dispatcher[(self._griddim, *self._rest)])
        self._configured[arena._kernel_key] = launch
        return launch


def kernel(func=None, **options):
    """Make `func` a kernel whose first parameter receives an `Arena`.

    Use as ``@devalloc.kernel`` or ``@devalloc.kernel(**cuda_jit_options)``;
    launch as ``k[blocks, threads](arena, ...)`` or
    ``k[blocks, threads, stream](arena, ...)``.
    """
    if func is None:
        return lambda f: Kernel(f, options)
    if not callable(func):
        raise DevallocTypeError(
            "@devalloc.kernel takes no signature; use @devalloc.kernel or "
            f"@devalloc.kernel(**cuda_jit_options) (got {func!r})"
        )
    return Kernel(func, options)
