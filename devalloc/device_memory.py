"""Device side (GPU): how device code reaches arena memory by address.

The allocator (`allocator.py`) is written once. It sees the arena's header and
the host failure record as int64 arrays built from addresses with `array_at`;
`backend` gives it these functions, or their simulator twins
(`simulator.device_memory`).

An address becomes a pointer into the global address space, so NVVM emits
``ld.global``/``atom.global`` rather than generic accesses.
"""

import numpy as np
from numba import cuda, int64, types

from .numba_compat import carray, cgutils, intrinsic, ir

__all__ = [
    "array_at",
    "bit_length",
    "device_function",
    "global_pointer",
    "int32_words",
    "leave_add",
    "load_volatile",
    "load_volatile_shared",
    "numba_dtype",
    "reduce_add",
    "store_volatile_at",
    "store_volatile_shared",
]


def device_function(py_func, **options):
    """`py_func` as a device function inlined into its callers (``forceinline``),
    compiled with cuda.jit's `options`."""
    return cuda.jit(device=True, forceinline=True, **options)(py_func)


def numba_dtype(dtype):
    """The Numba scalar type named by a dtype argument typed in a kernel, or None."""
    if isinstance(dtype, types.NumberClass):
        return dtype.instance_type
    if isinstance(dtype, types.DType):
        return dtype.dtype
    return None


@intrinsic
def global_pointer(typingctx, address, dtype):
    """Pointer to `dtype` at a device address, known to NVVM as global memory."""
    element = numba_dtype(dtype)
    if not isinstance(address, types.Integer) or element is None:
        return None

    def codegen(context, builder, sig, args):
        element_ir = context.get_data_type(element)
        as_global = builder.inttoptr(args[0], element_ir.as_pointer(addrspace=1))
        return builder.addrspacecast(as_global, element_ir.as_pointer())

    return types.CPointer(element)(address, dtype), codegen


@cuda.jit(device=True, inline="always")
def array_at(address, n):
    return carray(global_pointer(address, np.int64), n)


_WORDS = {types.int64: ("u64", "l", 64), types.int32: ("u32", "r", 32)}


def _word_access(array, index, value=types.int64, dtypes=tuple(_WORDS)):
    """Whether ``array[index]`` (``= value``) is an access to an int word
    (one of `dtypes`) that the intrinsics below compile."""
    return (
        isinstance(array, types.Array)
        and array.dtype in dtypes
        and isinstance(index, types.Integer)
        and isinstance(value, types.Integer)
    )


def _word_address(context, builder, sig, args, shared):
    """The address of array[index] as PTX wants it: 32 bits in the shared window."""
    pointer = _element_pointer(context, builder, sig, args)
    if not shared:
        return builder.ptrtoint(pointer, ir.IntType(64)), "l"
    element = pointer.type.pointee
    pointer = builder.addrspacecast(pointer, element.as_pointer(3))
    return builder.ptrtoint(pointer, ir.IntType(32)), "r"


def _volatile_load(shared):
    """An intrinsic ``(array, index) -> value`` that reads array[index] (int64 or
    int32) from memory every time (PTX ``ld.volatile``), in the shared window
    or not."""

    def load(typingctx, array, index):
        if not _word_access(array, index):
            return None
        suffix, letter, bits = _WORDS[array.dtype]

        def codegen(context, builder, sig, args):
            address, where = _word_address(context, builder, sig, args, shared)
            load = ir.InlineAsm(
                ir.FunctionType(ir.IntType(bits), [address.type]),
                f"ld.volatile{'.shared' if shared else ''}.{suffix} $0, [$1];",
                f"={letter},{where},~{{memory}}",
                side_effect=True,
            )
            return builder.call(load, [address])

        return array.dtype(array, index), codegen

    return intrinsic(load)


# array[index] read from memory every time, for words other threads change
# while this one waits: numba's ``cuda.ldcg`` is inline assembly without side
# effects, which the compiler may hoist out of a loop or merge with an
# earlier read. For shared memory, ``ld.volatile.shared``: through a generic
# address the load would be a system-scope ``LD``.
load_volatile = _volatile_load(shared=False)
load_volatile_shared = _volatile_load(shared=True)


@intrinsic
def store_volatile_shared(typingctx, array, index, value):
    """array[index] = value (int64 or int32) in shared memory, in program order
    with the volatile loads (PTX ``st.volatile.shared``): for a word only one
    thread writes at a time."""
    if not _word_access(array, index, value):
        return None
    suffix, letter, bits = _WORDS[array.dtype]

    def codegen(context, builder, sig, args):
        address, where = _word_address(context, builder, sig, args, shared=True)
        word = context.cast(builder, args[2], sig.args[2], array.dtype)
        store = ir.InlineAsm(
            ir.FunctionType(ir.VoidType(), [address.type, ir.IntType(bits)]),
            f"st.volatile.shared.{suffix} [$0], $1;",
            f"{where},{letter},~{{memory}}",
            side_effect=True,
        )
        builder.call(store, [address, word])
        return context.get_dummy_value()

    return types.void(array, index, value), codegen


@intrinsic
def _int32_pointer(typingctx, array):
    if not (isinstance(array, types.Array) and array.dtype == types.int64):
        return None

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.bitcast(data, ir.IntType(32).as_pointer())

    return types.CPointer(types.int32)(array), codegen


@cuda.jit(device=True, inline="always")
def bit_length(value):
    """Bits of a non-negative int64 (Python's ``int.bit_length``): one ``clz.b64``.
    (The simulator's ``cuda.clz`` counts in 32 bits.)"""
    return 64 - cuda.clz(int64(value))


@cuda.jit(device=True, inline="always")
def int32_words(array):
    """An int64 array's memory seen as twice as many int32 words."""
    return carray(_int32_pointer(array), array.size * 2)


@intrinsic
def leave_add(typingctx, array, index, value):
    """``old = array[index]; array[index] += value`` on an int32 in shared memory,
    with acquire-release order at block scope (PTX ``atom.acq_rel.cta.shared``):
    what this thread wrote before is visible to the thread that sees the sum it
    left, and that thread sees what the earlier adders wrote."""
    if not _word_access(array, index, value, (types.int32,)):
        return None

    def codegen(context, builder, sig, args):
        address, where = _word_address(context, builder, sig, args, shared=True)
        amount = context.cast(builder, args[2], sig.args[2], types.int32)
        atom = ir.InlineAsm(
            ir.FunctionType(ir.IntType(32), [address.type, ir.IntType(32)]),
            "atom.acq_rel.cta.shared.add.u32 $0, [$1], $2;",
            f"=r,{where},r,~{{memory}}",
            side_effect=True,
        )
        return builder.call(atom, [address, amount])

    return types.int32(array, index, value), codegen


@intrinsic
def store_volatile_at(typingctx, address, value):
    """Store an int64 at a device address (PTX ``st.volatile.global``), opaque
    to the optimizer. A store through a pointer loaded from memory, inlined
    after two allocation sites in the branches of an if, sends NVVM 13.0's
    optimizer into a loop it does not leave (seen 2026-11-30, CUDA 13.0 on
    the H200; CUDA 13.5's NVVM compiles it in 2 s)."""
    if not (isinstance(address, types.Integer) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        address = context.cast(builder, args[0], sig.args[0], types.int64)
        amount = context.cast(builder, args[1], sig.args[1], types.int64)
        store = ir.InlineAsm(
            ir.FunctionType(ir.VoidType(), [i64, i64]),
            "st.volatile.global.u64 [$0], $1;",
            "l,l,~{memory}",
            side_effect=True,
        )
        builder.call(store, [address, amount])
        return context.get_dummy_value()

    return types.void(address, value), codegen


def _element_pointer(context, builder, sig, args):
    aryty = sig.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    i = context.cast(builder, args[1], sig.args[1], types.intp)
    return cgutils.get_item_pointer(context, builder, aryty, ary, [i])


@intrinsic
def reduce_add(typingctx, array, index, value):
    """array[index] += value as a fire-and-forget reduction (PTX ``red.global``):
    the thread does not wait for it, unlike an atomic whose old value is asked.
    The array is in global memory (the arena's header). (With a generic
    address, plain ``red.add``, ptxas on sm_90 emitted a generic ``ATOM.E``
    that sets a predicate and branches on it, and an ``ATOMS.CAST.SPIN`` loop
    for the shared-memory window: about 30 instructions a reduction in every
    block's exit, where ``red.global`` is one ``REDG.E.ADD.64``.)"""
    if not _word_access(array, index, value, (types.int64,)):
        return None

    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig, args)
        address = builder.ptrtoint(pointer, ir.IntType(64))
        amount = context.cast(builder, args[2], sig.args[2], types.int64)
        to_global = ir.InlineAsm(
            ir.FunctionType(ir.IntType(64), [ir.IntType(64)]),
            "cvta.to.global.u64 $0, $1;",
            "=l,l",
        )
        red = ir.InlineAsm(
            ir.FunctionType(ir.VoidType(), [ir.IntType(64)] * 2),
            "red.global.add.u64 [$0], $1;",
            "l,l,~{memory}",
            side_effect=True,
        )
        builder.call(red, [builder.call(to_global, [address]), amount])
        return context.get_dummy_value()

    return types.void(array, index, value), codegen
