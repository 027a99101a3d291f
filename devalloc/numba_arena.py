"""Numba glue (GPU target): the Arena as a first-class type inside kernels.

A kernel never receives the host `Arena` object. `@devalloc.kernel` compiles a
small wrapper kernel whose first argument is one int64 *handle* (marshalled as
cheaply as any scalar); the wrapper builds an `ArenaType` value from it and
hands that to the user's function. This module defines that type, its data
model, and the methods kernels call on it: ``alloc``, ``try_alloc``, ``offset``
and ``view``.

``ArenaType`` is specialised on the strategy and the alignment, so the
allocator's branches on them fold away at compile time.
"""

from numba import cuda, types

from . import layout as L
from .allocator import group_alloc, request_bytes, shape_namespace
from .device_memory import array_at, device_function, global_pointer, numba_dtype
from .errors import DTYPE_HINT
from .numba_compat import (
    StructModel,
    TypingError,
    as_dtype,
    carray,
    cgutils,
    intrinsic,
    ir,
    keep_stores_into_arrays,
    make_attribute_wrapper,
    overload_method,
    register_model,
)

keep_stores_into_arrays()

__all__ = ["ArenaType", "arena_maker"]


class ArenaType(types.Type):
    """The Numba type of an arena inside a kernel."""

    def __init__(self, strategy, align):
        self.strategy = strategy
        self.align = align
        super().__init__(name=f"Arena(strategy={strategy!r}, align={align})")


_MEMBERS = ("header", "data", "capacity", "slot", "log2_slab", "warp")


@register_model(ArenaType)
class ArenaModel(StructModel):
    def __init__(self, dmm, fe_type):
        members = [(name, types.int64) for name in _MEMBERS]
        members.append(("state", types.CPointer(types.int64)))  # the block's, shared memory
        members.append(("tally", types.CPointer(types.int64)))  # the thread's, local (registers)
        super().__init__(dmm, fe_type, members)


for _name in (*_MEMBERS, "state", "tally"):
    make_attribute_wrapper(ArenaType, _name, "_" + _name)


def arena_maker(strategy, align):
    """An intrinsic ``make_arena(header, capacity, slot, log2_slab, warp, block_state, tally)``
    that gives the `ArenaType` value of kernels of an arena of `strategy` and `align`,
    from fields of the launch handle (`layout.unpack_handle`)."""
    arena_type = ArenaType(strategy, align)

    @intrinsic
    def make_arena(typingctx, header, capacity, slot, log2_slab, warp, state, tally):
        def codegen(context, builder, sig, args):
            arena = cgutils.create_struct_proxy(arena_type)(context, builder)
            arena.header, arena.capacity, arena.slot, arena.log2_slab, arena.warp = args[:5]
            arena.data = builder.add(arena.header, ir.IntType(64)(L.HEADER_BYTES))
            arena.state = context.make_array(sig.args[5])(context, builder, args[5]).data
            arena.tally = context.make_array(sig.args[6])(context, builder, args[6]).data
            return arena._getvalue()

        sig = arena_type(*[types.int64] * 5, state, tally)
        return sig, codegen

    return make_arena


@intrinsic
def array_address(typingctx, array):
    """The address of an array's first element, as an int64."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.ptrtoint(data, ir.IntType(64))

    return types.int64(array), codegen


# -- shapes: an int, or a tuple of ints ------------------------------------------------

_shape_helpers = {}

# The code inlined into kernels below selects with arithmetic and `if` statements,
# never with conditional expressions or `and`/`or`: on Python 3.12, Numba's
# lowering of those, feeding an array's shape, makes NVVM 13.0 hang (seen on
# the H200 with numba-cuda 0.30.4; tests/test_ptx.py guards the allocation path).


def shape_helpers(ndim):
    """(count, dims) for `ndim`-tuples: ``count(shape)`` is the element count, -1 if
    a dimension is negative, saturated at 2**62 when huge; ``dims(shape, keep)`` is
    the shape as int64s, all zeros unless `keep`.

    `count` has no branch: a view's shape is often loaded from memory (an offset
    table), and a branch on it would stall every thread at the view until the
    load returns, where arithmetic waits until the shape is used; the division
    this replaced was a call of ~100 instructions in every thread. (On the H200,
    2026-12-02, the pipeline's `arena_lists` at 4K: 62.8 -> 56.6-59.1 us.) A
    product is taken as huge when its float64 estimate reaches 2**62 in size;
    then it is 2**62 (the factor zeroed first: Numba's int64 multiply is `nsw`,
    so an overflowing one would be undefined), below that it is exact."""
    if ndim not in _shape_helpers:
        namespace = shape_namespace(ndim, types.int64)
        inline = cuda.jit(device=True, inline="always")
        _shape_helpers[ndim] = inline(namespace["count"]), inline(namespace["dims"])
    return _shape_helpers[ndim]


def _element(dtype, method):
    element = numba_dtype(dtype)
    if element is None or not isinstance(
        element, (types.Integer, types.Float, types.Complex, types.Boolean)
    ):
        raise TypingError(f"arena.{method}: {DTYPE_HINT} (got {dtype})")
    return as_dtype(element).itemsize


def _shape_kind(shape, method):
    if isinstance(shape, types.Integer):
        return 0
    if (
        isinstance(shape, types.BaseTuple)
        and len(shape) > 0
        and all(isinstance(dim, types.Integer) for dim in shape)
    ):
        return len(shape)
    raise TypingError(
        f"arena.{method}: shape must be an int or a non-empty tuple of ints (got {shape})"
    )


def _allocator(arena, report):
    align = arena.align
    direct = L.STRATEGIES[arena.strategy].direct

    def allocate(arena, nbytes):
        hdr = array_at(arena._header, L.HEADER_WORDS)
        state = carray(arena._state, L.BLOCK_WORDS)
        tally = carray(arena._tally, L.TALLY_WORDS)
        return group_alloc(
            hdr, state, tally, arena._warp, arena._slot, arena._capacity, align, arena._log2_slab,
            nbytes, direct, report,
        )  # fmt: skip

    return device_function(allocate)


_allocators = {}


def allocator_for(arena, report):
    key = (arena.strategy, arena.align, report)
    if key not in _allocators:
        _allocators[key] = _allocator(arena, report)
    return _allocators[key]


@overload_method(ArenaType, "alloc", inline="always")
def arena_alloc(arena, shape, dtype):
    """A failed allocation is a zero-size array whose offset is -1."""
    return alloc_impl(arena, shape, dtype, "alloc", report=True)


@overload_method(ArenaType, "try_alloc", inline="always")
def arena_try_alloc(arena, shape, dtype):
    """`alloc`, but a request the arena has no room for is no failure."""
    return alloc_impl(arena, shape, dtype, "try_alloc", report=False)


def alloc_impl(arena, shape, dtype, method, report):
    itemsize = _element(dtype, method)
    ndim = _shape_kind(shape, method)
    allocate = allocator_for(arena, report)
    if ndim == 0:

        def impl(arena, shape, dtype):
            offset = allocate(arena, request_bytes(shape, itemsize))
            return carray(global_pointer(arena._data + offset, dtype), shape * (offset >= 0))

        return impl

    count, dims = shape_helpers(ndim)

    def impl(arena, shape, dtype):
        nbytes = request_bytes(count(shape), itemsize)
        offset = allocate(arena, nbytes)
        keep = (offset >= 0) | (nbytes == 0)  # a zero-size request keeps its shape
        return carray(global_pointer(arena._data + offset, dtype), dims(shape, keep))

    return impl


@overload_method(ArenaType, "offset", inline="always")
def arena_offset(arena, array):
    if not isinstance(array, types.Array):
        raise TypingError(f"arena.offset(array): expected an array (got {array})")

    def impl(arena, array):
        return array_address(array) - arena._data

    return impl


@overload_method(ArenaType, "view", inline="always")
def arena_view(arena, offset, shape, dtype):
    itemsize = _element(dtype, "view")
    ndim = _shape_kind(shape, "view")
    if not isinstance(offset, types.Integer):
        raise TypingError(f"arena.view: offset must be an int (got {offset})")
    count, dims = shape_helpers(max(ndim, 1))
    if ndim == 0:

        def impl(arena, offset, shape, dtype):
            keep = fits(arena, offset, view_bytes(shape, itemsize), itemsize)
            return carray(global_pointer(view_address(arena, offset, keep), dtype), shape * keep)

        return impl

    def impl(arena, offset, shape, dtype):
        keep = fits(arena, offset, view_bytes(count(shape), itemsize), itemsize)
        return carray(global_pointer(view_address(arena, offset, keep), dtype), dims(shape, keep))

    return impl


@cuda.jit(device=True, inline="always")
def view_address(arena, offset, keep):
    """Where a view starts: at `offset`, or, refused, at offset -1 like a failed
    allocation (arithmetic, not a conditional: see the note on shapes above)."""
    return arena._data + (offset + 1) * keep - 1


@cuda.jit(device=True, inline="always")
def view_bytes(count, itemsize):
    """`allocator.request_bytes` without a branch, for views (see `shape_helpers`;
    itemsizes are powers of two, so the clamps saturate at 2**62 exactly as it
    does). Allocations keep the branches: on the H200 (2026-12-02) this form in
    the allocation path cost the 16 B hot path 4% (152 -> 147 G/s, A/B in one run)."""
    return min(max(count, -(1 << 62) // itemsize), (1 << 62) // itemsize) * itemsize


@cuda.jit(device=True, inline="always")
def fits(arena, offset, nbytes, itemsize):
    """Whether `nbytes` at `offset` lie inside the arena, aligned for the element."""
    return (
        (offset >= 0)
        & (nbytes >= 0)
        & (offset % itemsize == 0)
        & (offset <= arena._capacity - nbytes)
    )
