"""Where everything lives: the arena's memory, the launch handle, the block state;
and the strategies.

Shared by the host side, the device side and the Numba glue, so each number is
written down once.

One arena is one device allocation::

    +---------+----------------+----------------------------------------------+
    | padding | header (16 KiB)| data region: `capacity` bytes                |
    +---------+----------------+----------------------------------------------+
              ^ header         ^ data = header + HEADER_BYTES, a multiple of `align`

The header holds two *slots*. A launch allocates from one slot's cursor; at its
start, thread 0 folds the other slot (left by an earlier, finished launch) into
the running totals and zeroes it. Resetting the arena is therefore just the
host switching slots for the next launch: no memset, no extra CUDA call.
"""

from typing import NamedTuple

HEADER_BYTES = 16384  # a power of two: the data region after it keeps any `align`
GRANULE = 16  # small allocations are packed on 16-byte granules (CUDA malloc's guarantee)
# Largest data region: slab words hold granule numbers in 63 - REM_BITS bits, and
# the cursor (int64) must not wrap however many requests run past the end at once.
MAX_CAPACITY = 1 << 42


def data_boundary(align):
    """What the data region starts on: a multiple of `align`, and never less than
    HEADER_BYTES, so that the header before it is 256-byte aligned (the launch
    handle needs it)."""
    return max(align, HEADER_BYTES)


def header_offset(base_address, align):
    """Where the header starts in an allocation at `base_address` (the padding)."""
    boundary = data_boundary(align)
    data = (base_address + HEADER_BYTES + boundary - 1) & -boundary
    return data - HEADER_BYTES - base_address


def allocation_bytes(capacity, align):
    """The device allocation an arena of `capacity` bytes needs: header, data and
    the padding before them, up to `data_boundary(align) - 1` bytes wherever the
    allocation starts (a bug fixed 2026-12-01: 256 bytes short of a boundary
    were once counted as 0, so an arena whose allocation did not start on a
    4 KiB boundary reached up to 3840 bytes past its end)."""
    return HEADER_BYTES + capacity + data_boundary(align) - 1


# -- header words (int64) ---------------------------------------------------------
SLOT_WORDS = 4
CURSOR = 0  # bytes taken from the data region by this slot (passes capacity only
#             while a request that ran past the end puts it back)
ALLOCS = 1  # successful allocations
FAILED = 2  # failed allocations
REQUESTED = 3  # granules the successful allocations asked for (rounded as `lane_granules` does)

PEAK = 8  # largest `CURSOR` of any folded slot (clamped to capacity)
TOTAL_ALLOCS = 9
TOTAL_FAILED = 10
FAIL_EVENTS = 11  # blocks that ever saw a failure; copied into the host failure record
CAPACITY = 12
FAIL_RECORD = 13  # device address of the host-mapped failure record
# Failures the host has not reported yet: it reads and clears them after a sync.
PENDING_FAILED = 14  # how many
PENDING_ASKED = 15  # the largest request among them, bytes (NOTHING_ASKED if none)
PENDING_SEQ = 16  # 1 + sequence number (mod 2**SEQ_BITS) of the first launch among them
PEAK_REQUESTED = 17  # largest `REQUESTED` of any folded slot
# (word 18: unused)
LIMIT = 19  # where in-kernel allocations stop: CAPACITY, less the frame arrays' region at
#             the top of the data region (`Arena.empty`); the host sets it in stream order
PENDING_KERNELS = 20  # bit `id` set: kernel `id` (its launch handle's) is among them
# What a block adds at its exit goes to one of COUNT_SHARDS count lines per slot
# (by block index), each a 128-byte line of its own: on the cursor's line, every
# block's two reductions queued behind its atomics (about 2 ns each on the H200).
# Four, not eight: the launch's fold reads every line's words at once, and with
# eight they held 2-6 more registers in every kernel (ptxas, sm_90, 2026-12-04).
COUNT_SHARDS = 4
SHARD_WORDS = 16  # one 128-byte line
SHARDS_AT = 32  # word of the first line (slot 0's shards, then slot 1's)
SHARD_ALLOCS = 0  # words of a shard: added to the slot's ALLOCS and REQUESTED
SHARD_GRANULES = 1
# Successful allocations of each kernel (by the id in its launch handle), since
# the arena was made: one reduction by each block that allocated.
KERNEL_ALLOCS = SHARDS_AT + 2 * COUNT_SHARDS * SHARD_WORDS
KERNEL_IDS = 32  # the last one counts every kernel past the first KERNEL_IDS - 1
# Cursor shards: in a ``bump`` launch of at least SHARDED_WARPS warps, a group
# takes its chunk's units (and a lone lane its units) from a *grant* of its block's
# shard (by block index, one 128-byte line each,
# CURSOR_SHARDS a slot), and only a grant's refill moves the slot's cursor. One
# address serializes atomics: on the H200 (2026-12-02), one atomic a warp for 1 M
# threads took 30.0 us on one address, 13.5 on 32, 12.2 on 256, against 9.5 us
# for no allocation at all; 10 K threads took 2.6-2.7 us either way, where a
# shard's first refill would add a round trip.
CURSOR_SHARDS = 32
CURSOR_SHARDS_LOG2 = CURSOR_SHARDS.bit_length() - 1
CURSORS_AT = KERNEL_ALLOCS + KERNEL_IDS  # word of the first line (slot 0's, then slot 1's)
SHARDED_WARPS = 1024
# A grant word: (first granule) << GRANT_START_SHIFT | code << GRANT_CODE_SHIFT |
# granules taken from it. It holds (1 << code) >> 1 granules (code 0: no grant
# yet); GRANT_SPENT: the arena could not give the shard a whole grant, and its
# requests go to the cursor. Taking is one atomic add of the request to the word;
# the add that runs past the grant's end takes the next one. The taken count
# never reaches the code: a grant is at most 2**GRANT_MOST_LOG2 granules, a take
# at most GRANT_TAKE_MOST, and at most ~10 K threads (those of the resident
# blocks of one shard: 2048 an SM, 132 SMs, /32) add to a grant past its end
# before its refill, one take each: 2**22 + 10 K * 2**12 < 2**26.
GRANT_START_SHIFT = 31  # granules below 2**32: arenas under GRANT_CAPACITY_LIMIT bytes
GRANT_CAPACITY_LIMIT = 1 << (63 - GRANT_START_SHIFT + 4)  # 64 GiB; larger take from the cursor
GRANT_CODE_SHIFT = 26
GRANT_CODE_MASK = 0x1F
GRANT_USED_MASK = (1 << GRANT_CODE_SHIFT) - 1
GRANT_SPENT = GRANT_CODE_MASK
GRANT_MOST_LOG2 = 22  # 64 MiB
GRANT_TAKE_MOST = 1 << 12  # granules (64 KiB)
# A take goes through a shard if the arena holds GRANT_SERVES such takes for every
# shard, GRANT_SHARE times over. A grant is under 2/(GRANT_SHARE * CURSOR_SHARDS)
# of the room left in the arena when it is taken (a power of two, from 1/ up).
GRANT_SERVES = 8
GRANT_SHARE = 8
HEADER_WORDS = HEADER_BYTES // 8


def shard_base(slot, shard):
    """First word of a slot's count line `shard`."""
    return SHARDS_AT + (slot * COUNT_SHARDS + shard) * SHARD_WORDS


def cursor_shard(slot, shard):
    """The grant word of a slot's cursor shard."""
    return CURSORS_AT + (slot * CURSOR_SHARDS + shard) * SHARD_WORDS


assert CURSORS_AT % SHARD_WORDS == 0
assert cursor_shard(2, 0) <= HEADER_WORDS

NOTHING_ASKED = -(1 << 63)


def slot_base(slot):
    return slot * SLOT_WORDS


# -- host-mapped failure record (int64), written by the device, polled by the host ---
REC_EVENT = 0  # FAIL_EVENTS after the latest failure: the host compares it with what it saw
RECORD_WORDS = 4

# -- warps ------------------------------------------------------------------------
WARP_SIZE = 32
FULL_MASK = 0xFFFFFFFF  # every lane of a warp

# -- per-block state (int64, shared memory on the GPU) -----------------------------
# Two words per warp, each kind in a row of MAX_WARPS, then the block's own words;
# a warp's lane 0 zeroes the warp's two at the start of the kernel.
MAX_WARPS = 32  # a block of up to 1024 threads
WARP_SLAB = 0  # words WARP_SLAB + w: warp w's slab, from which its chunks are carved
# Slabs are sized from demand: a slab is as large as what its holder has taken so
# far (at least the request, at most the launch's slab size), so what a block or
# a warp leaves unused in its last slab is at most what it used.
WARP_TAKEN = MAX_WARPS  # words WARP_TAKEN + w: granules warp w has taken in slabs
BLOCK_LIVE = 2 * MAX_WARPS  # threads of this block still running (an int32: the low half)
BLOCK_SLAB = BLOCK_LIVE + 1  # the block's slab, from which its warps' slabs are carved
BLOCK_FAILED = BLOCK_LIVE + 2  # failed allocations of this block, flushed at block exit
BLOCK_ASKED = BLOCK_LIVE + 3  # the largest of them, bytes
BLOCK_TAKEN = BLOCK_LIVE + 4  # granules this block has taken from the arena in slabs
# What the block's threads allocated, added as they leave the kernel (each thread
# counts its own in registers meanwhile: see `allocator.count_into`) and read by the
# block's last thread. Split counts: the low 16 bits of each addition are summed in
# the word's low int32 half, the rest in its high half, so each addition is two
# native 32-bit shared atomics that nothing waits for (sm_90 has no 64-bit shared
# add) and neither half can wrap: at most 1024 additions of < 2**16 below, and
# at most 2**38 granules (MAX_CAPACITY / GRANULE) a launch above, >> 16.
BLOCK_ALLOCS = BLOCK_LIVE + 5  # successful allocations
BLOCK_GRANULES = BLOCK_LIVE + 6  # granules they asked for (rounded as `lane_granules` does)
COUNT_SPLIT = 16
# The grant word of the block's cursor shard, set by its first thread at the
# start of a ``bump`` launch of at least SHARDED_WARPS warps (the handle's SPREAD
# bit, worked out by the host), 0 otherwise and in ``warp_slab``: a shared load
# where each warp's take once worked out the launch's shape (about 40 of its
# lane 0's instructions, 64-bit arithmetic).
BLOCK_SHARD = BLOCK_LIVE + 7
BLOCK_WORDS = BLOCK_LIVE + 8
MAX_BLOCK_THREADS = MAX_WARPS * 32

# -- per-thread tally (int64, a local array the compiler keeps in registers) --------
# What this thread's allocations made: the leader of a group that gets a chunk adds
# the group's, a lane served alone its own. Added to its warp's words at exit.
TALLY_ALLOCS = 0
TALLY_GRANULES = 1
TALLY_WORDS = 2

# A slab word (warp or block): (next free granule) << REM_BITS | (granules left).
REM_BITS = 24
REM_MASK = (1 << REM_BITS) - 1

# -- the launch handle: one int64 kernel argument ---------------------------------
#   bit  0       slot this launch allocates from
#   bits 1..5    log2(slab bytes)
#   bit  6       unused
#   bits 7..11   kernel id: where its allocations are counted (KERNEL_ALLOCS + id)
#   bits 12..47  header address (4 KiB aligned, as the data region after it is: below 2**48)
#   bits 48..61  launch sequence number mod 2**14
#   bit  62      spread: the launch has at least SHARDED_WARPS warps, so a ``bump``
#                arena's blocks take through their cursor shards
SLOT_MASK = 0x1
SLAB_SHIFT = 1
SLAB_MASK = 0x1F
KERNEL_SHIFT = 7
KERNEL_MASK = KERNEL_IDS - 1
ADDRESS_MASK = ((1 << 48) - 1) & ~0xFFF
SEQ_SHIFT = 48
SEQ_BITS = 14
SEQ_MASK = (1 << SEQ_BITS) - 1
SPREAD = 1 << 62


def pack_handle(header_address, slot, log2_slab, seq, kernel=0, warps=0):
    """The launch handle, made here only. `slot` is 0 or 1 (a launch recorded
    into a graph is packed with 0; its graph's second instance has 1, see
    `capture`); `warps`, the launch's."""
    return (
        header_address
        | slot
        | (log2_slab << SLAB_SHIFT)
        | (kernel << KERNEL_SHIFT)
        | ((seq & SEQ_MASK) << SEQ_SHIFT)
        | (SPREAD * (warps >= SHARDED_WARPS))
    )


def unpack_handle(handle):
    """The launch handle's fields, read here only (by the wrapper kernel):
    ``(header address, slot, log2 slab, sequence number, kernel id, spread)``."""
    return (
        handle & ADDRESS_MASK,
        handle & SLOT_MASK,
        (handle >> SLAB_SHIFT) & SLAB_MASK,
        (handle >> SEQ_SHIFT) & SEQ_MASK,
        (handle >> KERNEL_SHIFT) & KERNEL_MASK,
        handle & SPREAD,
    )


# -- slab sizes ----------------------------------------------------------------------
MIN_LOG2_SLAB = 8  # 256 B
MAX_LOG2_SLAB = 20  # 1 MiB
# A lane's request joins its group's chunk up to this size; a larger one gets an
# atomic of its own (after a check for space). 32 lanes' worth fits the scan fields.
LANE_CHUNK_MAX = 1 << 20
SLAB_BUDGET = 16  # a launch's slabs in flight fit 1/8 of the arena (warp and block slabs)


def log2_slab_for(capacity, warps, align):
    """Warp-slab size for a launch (a block slab holds one per warp of the block):
    large for throughput, small enough that every warp and block of the grid
    holding a partly used slab wastes at most 2/SLAB_BUDGET of the arena. Never
    below `align`, so a slab can hold an aligned allocation."""
    share = capacity // (SLAB_BUDGET * max(warps, 1))
    log2 = max(share.bit_length() - 1, MIN_LOG2_SLAB)
    log2 = min(log2, MAX_LOG2_SLAB)
    return max(log2, align.bit_length() - 1)


# -- strategies: where a group's chunk comes from (see `allocator`) ---------------


class Strategy(NamedTuple):
    direct: bool  # chunks from the arena's cursor through the warp's tail, no block slabs


STRATEGIES = {  # read by the Arena, the GPU's Arena type and the simulator's
    "warp_slab": Strategy(direct=False),  # per-warp slabs carved from per-block slabs
    "bump": Strategy(direct=True),  # one global atomic per group, exact accounting
}
