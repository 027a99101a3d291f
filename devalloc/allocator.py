"""Device side: the allocator. Written once; Numba compiles it for the GPU, and the
simulator runs the same source as Python with the stand-ins of `simwarp`.

Every function takes the arena's header and its block's state as int64 arrays
(see `layout`) and returns a byte offset into the data region, or -1 when the
request got no memory (a zero-size request also gets -1, but is no failure).

Two strategies:

``bump``
    One atomic per allocation on the launch slot's cursor; every allocation
    takes whole `align` units.

``warp_slab``
    The lanes of a warp that allocate together (``activemask``) agree on one
    chunk with a prefix sum, and their leader carves the chunk out of the
    warp's slab: a per-warp word in shared memory, updated with a CAS so that
    diverged groups of one warp stay correct. A dry warp slab is refilled from
    the block's slab (another shared word), and only a dry block slab takes
    memory from the arena's cursor: one global atomic per block refill, none
    per allocation. Inside a chunk, requests of at least ``align`` bytes come
    first and start on ``align`` boundaries; smaller ones follow, packed on
    16-byte granules::

        arena cursor  -> block slab (one global atomic)  -> warp slabs -> chunks
        warp slab:  [ used | chunk: aligned requests | small requests | free ... ]
                           ^ multiple of align
"""

from numba import cuda

from . import layout as L
from .device_memory import array_at, device_function, load_uncached, reduce_add
from .warp import FULL_MASK, WARP_SIZE, activemask, ballot_sync, shfl_sync, shfl_up_sync

LOW32 = 0xFFFFFFFF
REFILLING = -1  # a slab word while one group refills it (slab words are never negative)


# -- launch and block bookkeeping ------------------------------------------------------


@device_function
def fold_other_slot(hdr, slot):
    """Run by one thread at the start of a launch: fold the other slot, left by an
    earlier launch that has finished, into the totals and zero it for the next."""
    other = (1 - slot) * L.SLOT_WORDS
    used = min(hdr[other + L.CURSOR], hdr[L.CAPACITY])
    if used > hdr[L.PEAK]:
        hdr[L.PEAK] = used
    hdr[L.TOTAL_ALLOCS] += hdr[other + L.ALLOCS]
    hdr[L.TOTAL_FAILED] += hdr[other + L.FAILED]
    for word in range(L.SLOT_WORDS):
        hdr[other + word] = 0


@device_function
def enter_block(hdr, state, slot):
    """Every thread at the start of the kernel: the block's threads zero its state
    (the first thread of the grid also folds the other slot), then meet at a
    barrier. Returns the thread's warp within the block."""
    threads = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z
    tid = cuda.threadIdx.x + cuda.blockDim.x * (
        cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z
    )
    word = tid
    while word < L.BLOCK_WORDS:
        state[word] = threads if word == L.BLOCK_LIVE else 0
        word += threads
    if tid == 0 and cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0 and cuda.blockIdx.z == 0:
        fold_other_slot(hdr, slot)
    cuda.syncthreads()
    return tid // WARP_SIZE


@device_function
def leave_block(hdr, state, slot):
    """Every thread on its way out of the kernel; the block's last one adds the
    block's allocation count to the slot (one global atomic per block)."""
    mask = activemask()
    if cuda.laneid == cuda.ffs(mask) - 1:
        lanes = cuda.popc(mask)
        cuda.threadfence_block()
        if cuda.atomic.sub(state, L.BLOCK_LIVE, lanes) == lanes:
            allocs = state[L.BLOCK_ALLOCS]
            if allocs != 0:  # fire and forget: the thread need not wait for it
                reduce_add(hdr, slot * L.SLOT_WORDS + L.ALLOCS, allocs)


@device_function
def record_failure(hdr, slot, seq, nbytes):
    """Count a failed request and tell the host, through the mapped failure record."""
    base = slot * L.SLOT_WORDS
    cuda.atomic.add(hdr, base + L.FAILED, 1)
    cuda.atomic.max(hdr, base + L.ASKED, nbytes)
    event = cuda.atomic.add(hdr, L.FAIL_EVENTS, 1) + 1
    record = array_at(hdr[L.FAIL_RECORD], L.RECORD_WORDS)
    record[L.REC_ASKED] = nbytes
    record[L.REC_SEQ] = seq
    cuda.threadfence_system()
    record[L.REC_EVENT] = event


@device_function
def request_bytes(count, itemsize):
    """Bytes for `count` elements; negative stays negative, huge saturates at 2**62."""
    if count < 0:
        return count * itemsize if count > -(1 << 62) // itemsize else -(1 << 62)
    if count > (1 << 62) // itemsize:
        return 1 << 62
    return count * itemsize


# -- strategy "bump" -------------------------------------------------------------------


@device_function
def bump_alloc(hdr, state, slot, seq, capacity, align, nbytes):
    """One atomic per allocation. Every request advances the cursor by whole
    `align` units, so each starts on an `align` boundary: simple, exact at the
    end of the arena, and the reference the warp-slab strategy is tested
    against; a small request wastes the rest of its unit. A request of at
    least `align` bytes first checks that it can fit, so one too large does not
    use up the rest of the arena."""
    if nbytes == 0:
        return -1
    cursor = slot * L.SLOT_WORDS + L.CURSOR
    start = -1
    if nbytes > 0 and nbytes <= capacity:
        if nbytes < align or load_uncached(hdr, cursor) + nbytes <= capacity:
            start = cuda.atomic.add(hdr, cursor, (nbytes + align - 1) & -align)
            if start + nbytes > capacity:
                start = -1
    count_successes(state, activemask(), start >= 0)
    if start < 0:
        record_failure(hdr, slot, seq, nbytes)
    return start


# -- strategy "warp_slab" --------------------------------------------------------------


@device_function
def count_successes(state, mask, succeeded):
    """Add the group's successful allocations to the block's count: one shared
    atomic by the group's leader, not one per lane. Uses the group's own mask,
    which also keeps its lanes together on their way out."""
    made = cuda.popc(ballot_sync(mask, succeeded))
    if made > 0 and cuda.laneid == cuda.ffs(mask) - 1:
        cuda.atomic.add(state, L.BLOCK_ALLOCS, made)


@device_function
def take_from_arena(hdr, slot, capacity, nbytes):
    """The one global atomic: `nbytes` from the slot's cursor. Returns
    ``granule << 24 | granules`` of what was got, which at the end of the arena
    may be less than asked; 0 when nothing is left."""
    old = cuda.atomic.add(hdr, slot * L.SLOT_WORDS + L.CURSOR, nbytes)
    if old >= capacity:
        return 0
    got = min(nbytes, capacity - old) >> 4
    return (old >> 4) << L.REM_BITS | got


@device_function
def carve(state, word, need, step, least):
    """Take `need` granules, starting on a multiple of `step`, from the slab held
    in state[word]; at the end of a slab settle for no fewer than `least`.
    Returns ``(start << 24 | granules taken, 0)``, or ``(0, word seen)`` when
    the slab as seen cannot serve it (REFILLING while it is being refilled)."""
    while True:
        old = state[word]
        if old == REFILLING:
            return 0, old
        free_at = old >> L.REM_BITS
        start = (free_at + step - 1) & -step
        room = (old & L.REM_MASK) - (start - free_at)
        take = min(need, room)
        if take < least or take <= 0:
            return 0, old
        new = (start + take) << L.REM_BITS | (room - take)
        if cuda.atomic.cas(state, word, old, new) == old:
            return start << L.REM_BITS | take, 0


# Refilling: a group that finds a slab too dry locks exactly the word it saw
# (CAS to REFILLING), so that a group which saw the slab dry before another one
# refilled it cannot refill it again; the others wait for the fresh slab.


@device_function
def from_block(hdr, state, slot, capacity, need, step, least, block_granules):
    """Granules from the block's slab; one warp replaces a dry slab with a fresh
    one from the arena (the one global atomic) while the others wait. When the
    arena is spent, whatever the old slab had left."""
    while True:
        got, seen = carve(state, L.BLOCK_SLAB, need, step, least)
        if got != 0:
            return got
        if seen != REFILLING and cuda.atomic.cas(state, L.BLOCK_SLAB, seen, REFILLING) == seen:
            slab = take_from_arena(hdr, slot, capacity, block_granules << 4)
            if slab == 0:  # the arena is spent: put back what was left, take from it
                cuda.atomic.exch(state, L.BLOCK_SLAB, seen)
                return carve(state, L.BLOCK_SLAB, need, step, 1)[0]
            # The old slab's rest, too small for this request, is a bounded tail.
            cuda.atomic.exch(state, L.BLOCK_SLAB, slab)


@device_function
def from_warp(hdr, state, warp, slot, capacity, need, step, align_step, warp_g, block_g):
    """Granules from the warp's slab; a dry one is replaced by a slab from the
    block's. Diverged groups of one warp allocate concurrently (on the hardware,
    often), so the warp's slab is refilled under the same lock."""
    while True:
        got, seen = carve(state, warp, need, step, need)
        if got != 0:
            return got
        if seen != REFILLING and cuda.atomic.cas(state, warp, seen, REFILLING) == seen:
            slab = from_block(hdr, state, slot, capacity, warp_g, align_step, need, block_g)
            if slab == 0:  # the arena is spent: put back what was left, take from it
                cuda.atomic.exch(state, warp, seen)
                return carve(state, warp, need, step, 1)[0]
            cuda.atomic.exch(state, warp, slab)


@device_function
def take_chunk(hdr, state, warp, slot, capacity, align, log2_slab, granules, aligned):
    """Run by a group's leader: `granules` for the whole group from the warp's
    slab, or from the block's slab if larger than a warp slab, or straight from
    the arena if larger than that. Returns ``granule << 24 | granules got``
    (fewer than asked only at the end of the arena; 0 for none)."""
    align_step = align >> 4
    step = align_step if aligned else 1
    warp_g = 1 << (log2_slab - 4)
    block_g = warp_g * ((cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z + 31) >> 5)
    if granules <= warp_g:
        return from_warp(
            hdr, state, warp, slot, capacity, granules, step, align_step, warp_g, block_g
        )
    if granules <= block_g:
        return from_block(hdr, state, slot, capacity, granules, step, granules, block_g)
    return take_from_arena(hdr, slot, capacity, ((granules << 4) + align - 1) & -align)


@device_function
def lane_of_rank(mask, rank):
    """Lane index of the `rank`-th (from 0) set bit of `mask`: a binary search."""
    bits = mask & FULL_MASK  # as int64, so shifts and masks keep one type
    lane = 0
    width = 16
    while width > 0:
        low = bits & ((1 << width) - 1)
        below = cuda.popc(low)
        if rank >= below:
            rank -= below
            bits >>= width
            lane += width
        else:
            bits = low
        width >>= 1
    return lane


@device_function
def exclusive_scan(mask, lane, value):
    """Prefix sum of `value` over the lanes of `mask`, in lane order. Returns
    (sum over the lanes below this one, sum over all)."""
    total = value
    step = 1
    if mask == FULL_MASK:
        while step < WARP_SIZE:
            below = shfl_up_sync(mask, total, step)
            if lane >= step:
                total += below
            step <<= 1
    else:
        rank = cuda.popc(mask & ((1 << lane) - 1))
        while step < WARP_SIZE:
            src = lane_of_rank(mask, rank - step) if rank >= step else lane
            below = shfl_sync(mask, total, src)
            if rank >= step:
                total += below
            step <<= 1
    return total - value, shfl_sync(mask, total, 31 - cuda.clz(mask))


@device_function
def large_alloc(hdr, slot, capacity, align, nbytes):
    """A request larger than LANE_CHUNK_MAX: its own atomic, after a check for space,
    so that one too large to fit does not use up the rest of the arena."""
    span = (nbytes + align - 1) & -align
    cursor = slot * L.SLOT_WORDS + L.CURSOR
    if load_uncached(hdr, cursor) + span > capacity:
        return -1
    start = cuda.atomic.add(hdr, cursor, span)
    return start if start + nbytes <= capacity else -1


@device_function
def slab_alloc(hdr, state, warp, slot, seq, capacity, align, log2_slab, nbytes):
    """Warp-slab allocation for every lane that calls it together."""
    mask = activemask()
    lane = cuda.laneid
    leader = cuda.ffs(mask) - 1
    # This lane's part of the group's chunk: aligned requests in the high half,
    # small ones in the low half, so one scan places both.
    share = 0
    if nbytes > 0 and nbytes <= L.LANE_CHUNK_MAX:
        share = (nbytes + L.GRANULE - 1) >> 4
        if nbytes >= align:
            step = align >> 4
            share = ((share + step - 1) & -step) << 32
    first = shfl_sync(mask, share, leader)
    if ballot_sync(mask, share != first) == 0:  # every lane asks the same: no scan
        below = cuda.popc(mask & ((1 << lane) - 1)) * first
        total = cuda.popc(mask) * first
    else:
        below, total = exclusive_scan(mask, lane, share)
    aligned_total = total >> 32
    chunk = aligned_total + (total & LOW32)
    offset = -1
    if chunk > 0:
        got = 0
        if lane == leader:
            got = take_chunk(
                hdr, state, warp, slot, capacity, align, log2_slab, chunk, aligned_total > 0
            )
        got = shfl_sync(mask, got, leader)
        if share > 0:
            at = below >> 32 if share > LOW32 else aligned_total + (below & LOW32)
            granules = share >> 32 if share > LOW32 else share
            if at + granules <= (got & L.REM_MASK):
                offset = ((got >> L.REM_BITS) + at) << 4
    if nbytes > L.LANE_CHUNK_MAX:
        offset = large_alloc(hdr, slot, capacity, align, nbytes)
    count_successes(state, mask, offset >= 0)
    if offset < 0 and nbytes != 0:
        record_failure(hdr, slot, seq, nbytes)
    return offset
