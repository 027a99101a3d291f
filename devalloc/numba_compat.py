"""Every reach into numba-cuda's internals that devalloc's GPU glue needs, in one
place, each with the version it was checked against (numba-cuda 0.30.4).

numba-cuda is in maintenance mode (NVIDIA/numba-cuda#902); moving to another
back end means revisiting this module first.
"""

from numba.cuda.core import ir, ir_utils

__all__ = ["keep_stores_into_arrays"]


def _keep(stmt, lives, lives_n_aliases, arg_aliases, alias_map, func_ir, typemap):
    lives_n_aliases.add(stmt.target.name)  # as if the array were read afterwards
    return stmt


def keep_stores_into_arrays():
    """Stop numba-cuda's dead-code elimination from dropping stores into arrays.

    Checked against numba-cuda 0.30.4: after inlining overloads it removes a
    store ``a[i] = x`` (a dynamic index) when ``a`` is not read afterwards and
    its alias analysis does not tie ``a`` to an argument. It cannot tie an
    array made by ``carray`` over an address to anything, so an
    ``arena.alloc`` array lost its last stores on the GPU: ``buf[0] = m;
    buf[buf.size - 1] = m`` compiled to the first store only, and the data a
    kernel left for the next kernel of a frame could vanish. In a kernel,
    every array is memory someone may read later.
    """
    for setitem in ir.setitem_types:
        ir_utils.remove_dead_extensions.setdefault(setitem, _keep)
