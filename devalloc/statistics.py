"""`ArenaStats`, what `Arena.stats()` returns, and `ProcessStats`, what
`devalloc.stats()` returns (RMM's and PyTorch's names)."""

from dataclasses import dataclass, field

__all__ = ["ArenaStats", "ProcessStats"]


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
        handed out) and as frame arrays (`Arena.empty`). Outside a frame it
        is 0 between launches: the next launch starts with an empty arena.
    peak_bytes : int
        Largest in-kernel ``current_bytes`` since the arena was made, plus
        ``peak_frame_array_bytes``: never less than the largest
        ``current_bytes``. The two peaks may come from different frames, so
        this is an upper bound of what a frame needs (what `Arena.run` sizes
        from), and may exceed ``capacity_bytes`` with nothing failed.
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
        Times the live region was emptied: after each launch outside a frame,
        and at each frame exit or explicit `reset` that followed a launch
        (emptying an arena no launch has used since is not counted).
    launches : int
        Kernel launches on this arena.
    device_mallocs : int
        Real device allocations (``cudaMalloc``) made for this arena: 1, and
        one more each time it was resized.
    frame_array_bytes : int
        Bytes the live frame's arrays (`Arena.empty`) hold, alignment included,
        and those the arena's live graphs keep (`Graph`).
    peak_frame_array_bytes : int
        The most frame arrays held at once (the graphs' included).
    current_allocs : int
        Successful in-kernel allocations of the live region: the frame's so
        far (0 outside a frame, as ``current_bytes``; the launches' are in
        ``total_allocs``).
    frames : int
        Frames run: ``arena.frame()`` exits and replays of captured graphs.
    allocs_by_kernel : dict of str to int
        Successful in-kernel allocations of each kernel, by name, since the
        arena was made (those of a warp past 2**30 allocations in one launch
        aside). Past 31 kernels, the others are counted together as
        ``"<other kernels>"``.
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
    current_allocs: int = 0
    frames: int = 0
    allocs_by_kernel: dict = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class ProcessStats:
    """devalloc's arenas in this process, at a glance (`devalloc.stats()`).

    Attributes
    ----------
    arenas : int
        Arenas open now.
    reserved_bytes : int
        Device memory they hold (their data regions, headers and padding).
    peak_reserved_bytes : int
        The most they held at once.
    device_mallocs : int
        Device allocations (``cudaMalloc``) made for arenas, one per arena and
        per resize, since the process started.
    """

    arenas: int
    reserved_bytes: int
    peak_reserved_bytes: int
    device_mallocs: int
