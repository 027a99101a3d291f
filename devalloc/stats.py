"""`ArenaStats`: what `Arena.stats()` returns."""

from dataclasses import dataclass

__all__ = ["ArenaStats"]


@dataclass(frozen=True)
class ArenaStats:
    """A snapshot of an arena's counters, read after its launches finished.

    Attributes
    ----------
    capacity_bytes : int
        Size of the data region.
    current_bytes : int
        Bytes the live region has taken from the arena: in kernels (with
        ``warp_slab``, whole slabs: what a warp has reserved, not only what it
        handed out) and as frame arrays (`Arena.empty`).
    peak_bytes : int
        Largest in-kernel ``current_bytes`` since the arena was made, plus
        ``peak_frame_array_bytes``: never less than the largest
        ``current_bytes``, and what the arena must hold.
    requested_bytes : int
        What the live region's successful allocations asked for, each rounded
        up to 16 bytes (to a multiple of ``align`` if at least ``align``). Size an
        arena from ``peak_bytes``; ``peak_bytes - peak_requested_bytes`` is what
        slab tails and alignment cost.
    peak_requested_bytes : int
        Largest ``requested_bytes`` since the arena was made.
    total_allocs : int
        Successful in-kernel allocations (zero-size requests not counted).
    failed_allocs : int
        Allocations that returned a zero-size array for lack of space.
    resets : int
        Times the live region was emptied (each launch outside a frame, each
        frame exit, each explicit `reset`).
    launches : int
        Kernel launches on this arena.
    device_mallocs : int
        Real device allocations (``cudaMalloc``) made for this arena: 1, and
        one more each time it was resized.
    frame_array_bytes : int
        Bytes the live frame's arrays (`Arena.empty`) hold, alignment included.
    peak_frame_array_bytes : int
        The most any frame's arrays held.
    """

    capacity_bytes: int
    current_bytes: int
    peak_bytes: int
    total_allocs: int
    failed_allocs: int
    resets: int
    launches: int
    device_mallocs: int
    requested_bytes: int = 0
    peak_requested_bytes: int = 0
    frame_array_bytes: int = 0
    peak_frame_array_bytes: int = 0
