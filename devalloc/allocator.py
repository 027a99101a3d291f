"""Device side: the allocator. Written once; Numba compiles it for the GPU, and the
simulator runs the same source as Python with the stand-ins of `simulator.warp`.

Every function takes the arena's header and its block's state as int64 arrays
(see `layout`). `group_alloc` returns a byte offset into the data region, or -1
when the request got no memory (a zero-size request also gets -1, but is no
failure).

Two policies, composed rather than interleaved:

*How a warp's requests are combined* (both strategies). The lanes that allocate
together (``activemask``) agree on one chunk with a prefix sum, and their
leader takes the chunk in one step. Inside a chunk, requests of at least
``align`` bytes come first and start on ``align`` boundaries; smaller ones
follow, packed on 16-byte granules. A chunk is granted whole or not at all; if
it is not, the lanes try again each on its own, so a request too large for what
is left never fails the others::

    chunk:  [ aligned requests | small requests ]
            ^ multiple of align

*Where a chunk comes from* (the strategy). Each warp has a slab word in shared
memory that chunks are carved from with a CAS (diverged groups of one warp stay
correct); a dry slab is refilled under a lock, so that groups which saw it dry
at once refill it once.

``warp_slab``
    Warp slabs are refilled from the block's slab (another shared word), and
    only a dry block slab takes memory from the arena's cursor: one global
    atomic per block refill, none per allocation. (A warp's first slab, if
    its request fills a whole `align` unit, comes from the cursor itself, so
    that the warps of a block do not wait for one another to start.) Slabs
    grow with demand: a refill is as large as what the warp (or block) has
    taken so far, at least the request and at most the launch's slab size (a
    block's first slab has room for each of its warps asking alike), so the
    unused rest of a last slab is never more than what was used. A slab
    replaced before it is used up is not dropped if it can be kept: its rest
    joins the fresh slab if that starts where it ends (`joined`), or else, a
    warp slab's, becomes the block's slab if that is empty (`hand_down`). At
    exit a block hands the unused tail of its slab back if nothing was taken
    after it, so a frame of many small launches fits in what it asks.
``bump``
    The warp's slab is only the tail of the `align` unit its last chunk ended
    in; a chunk that does not fit there takes whole `align` units straight from
    the cursor: one global atomic per group, and nothing lost but tails. In a
    launch of many warps the units come from a grant of the block's cursor
    shard instead (`take_spread`), so that the groups' atomics do not all queue
    on the cursor's one address.

    arena cursor -> block slab (warp_slab) -> warp slab -> chunks
                 -> [shard grant] -> warp's tail (bump) -> chunks

*The hot path* is what a CUDA engineer would write by hand, and what the
instruction count of the H200's SASS says it costs (`take_uniform_small`): a
whole warp asking alike for less than `align` checks that with one 32-bit
shuffle and a ballot; its lane 0 takes the warp's 32 chunks with a plain
shared load and store of the warp's slab word and counts them in its tally,
a per-thread local array that the compiler keeps in registers (summed over
the warp once, at its exit); one shuffle hands out the start. A lane alone
making its warp's first request (the thread that allocates for its block)
takes whole units from the cursor with one global atomic (`take_alone`).
Anything else (mixed or aligned sizes, diverged lanes, a spent arena) takes
the general path, which is compiled once for the full mask and once for any
other.

The cursor is never left past the end of the arena. The first request that
runs past it puts it back (to where it was, or to the end if it took the rest),
and requests that arrive meanwhile wait for that and try again: a request fails
only if the arena, as the successful requests left it, has no room for it.
"""

from numba import cuda, int32, int64

from . import layout as L
from .backend import (
    activemask,
    ballot_sync,
    bit_length,
    device_function,
    int32_words,
    lanemask_lt,
    leave_add,
    load_volatile,
    load_volatile_shared,
    nap,
    pause,
    reduce_add,
    shfl_sync,
    shfl_up_sync,
    store_volatile_at,
    store_volatile_shared,
    syncwarp,
)
from .layout import FULL_MASK, WARP_SIZE

LOW32 = 0xFFFFFFFF
shard_base = device_function(L.shard_base)
cursor_shard = device_function(L.cursor_shard)
REFILLING = -1  # a slab word while one group refills it (slab words are never negative)


# -- launch and block bookkeeping ------------------------------------------------------


@device_function
def fold_other_slot(hdr, slot):
    """Run by one thread at the start of a launch: fold the other slot, left by an
    earlier launch that has finished, into the totals and zero it for the next.
    Every word is read before any is written, so the reads go out together
    (one memory latency, not one per word: a read after a write to the header
    waits for the write), and a slot with nothing in it (the launches of a
    frame after its first) is left as it is. (Tried on the H200, 2026-12-01:
    the fold spread over the first warp, a few words per lane summed with
    shuffles, held two registers fewer but reached block 0's barrier 0.4 us
    later at 10 K threads.)"""
    other = (1 - slot) * L.SLOT_WORDS
    cursor = hdr[other + L.CURSOR]
    allocs = hdr[other + L.ALLOCS]
    failed = hdr[other + L.FAILED]
    requested = hdr[other + L.REQUESTED]
    for shard in range(L.COUNT_SHARDS):  # the blocks' counts, into the slot's words
        base = shard_base(1 - slot, shard)
        allocs += hdr[base + L.SHARD_ALLOCS]
        requested += hdr[base + L.SHARD_GRANULES]
    if (cursor == 0) & (allocs == 0) & (failed == 0):
        return  # (nothing allocated: nothing requested either)
    capacity = hdr[L.CAPACITY]
    peak = hdr[L.PEAK]
    peak_requested = hdr[L.PEAK_REQUESTED]
    total_allocs = hdr[L.TOTAL_ALLOCS]
    total_failed = hdr[L.TOTAL_FAILED]
    hdr[L.PEAK] = max(peak, min(cursor, capacity))
    hdr[L.PEAK_REQUESTED] = max(peak_requested, requested)
    hdr[L.TOTAL_ALLOCS] = total_allocs + allocs
    hdr[L.TOTAL_FAILED] = total_failed + failed
    for shard in range(L.COUNT_SHARDS):
        base = shard_base(1 - slot, shard)
        hdr[base + L.SHARD_ALLOCS] = 0
        hdr[base + L.SHARD_GRANULES] = 0
    for word in range(L.SLOT_WORDS):
        hdr[other + word] = 0
    for shard in range(L.CURSOR_SHARDS):
        hdr[cursor_shard(1 - slot, shard)] = 0


@device_function
def enter_block(hdr, state, tally, slot, spread):
    """Every thread at the start of the kernel: zero its tally; each warp's lane 0
    zeroes the warp's two words, the block's first thread the block's (with its
    cursor shard's grant word if `spread`, a ``bump`` launch's SPREAD bit, 0 in
    ``warp_slab``; and, in the grid's first block, folds the other slot); then
    they meet at a barrier. Returns the thread's warp within the block.
    (Straight-line stores: a loop over the block's words, strided by its size,
    cost a 64-bit division.)"""
    tally[L.TALLY_ALLOCS] = 0
    tally[L.TALLY_GRANULES] = 0
    tid = int32(  # (in 32 bits: a block has at most 1024 threads)
        cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    )
    warp = (tid >> 5) & (L.MAX_WARPS - 1)  # (masked: the compiler sees it is no negative index)
    if cuda.laneid == 0:
        state[L.WARP_SLAB + warp] = 0
        state[L.WARP_TAKEN + warp] = 0
    if tid == 0:
        state[L.BLOCK_LIVE] = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z  # (int32 half)
        state[L.BLOCK_SLAB] = 0
        state[L.BLOCK_FAILED] = 0
        state[L.BLOCK_ASKED] = L.NOTHING_ASKED
        state[L.BLOCK_TAKEN] = 0
        state[L.BLOCK_ALLOCS] = 0
        state[L.BLOCK_GRANULES] = 0
        state[L.BLOCK_SHARD] = 0
        if spread != 0:
            state[L.BLOCK_SHARD] = cursor_shard(slot, block_index() & (L.CURSOR_SHARDS - 1))
        if (cuda.blockIdx.x | cuda.blockIdx.y | cuda.blockIdx.z) == 0:
            fold_other_slot(hdr, slot)
    cuda.syncthreads()
    return warp


@device_function
def enter_views(hdr, slot):
    """`enter_block` for a kernel that cannot allocate (it only views or offsets
    arena memory; `launch.may_allocate` tells): no block state, no barrier and
    no exit, only the grid's first thread folding the other slot, so that the
    launch resets the arena and counts in its statistics as any other."""
    first = cuda.threadIdx.x | cuda.threadIdx.y | cuda.threadIdx.z
    if (first | cuda.blockIdx.x | cuda.blockIdx.y | cuda.blockIdx.z) == 0:
        fold_other_slot(hdr, slot)


@device_function
def leave_block(hdr, state, tally, slot, seq, kernel, align):
    """Every thread on its way out of the kernel. Each lane that counted (a
    group's leader counts for the group, so usually one lane a warp, and in
    most warps of a kernel that allocates by one thread a block, none) adds its
    tally to the block's counts; the block's last thread hands the unused tail
    of its slab back to the arena if nothing was taken after it, adds the
    block's counts to the slot and its allocations to its kernel's count (one
    global reduction per count, none if it allocated nothing) and reports its
    failures, if it had any.

    Each group's leader takes its lanes off the block's count of live threads
    with one int32 shared atomic of acquire-release order: its lanes' counts
    are published before, and the last one sees every group's. (A 64-bit count
    behind a fence cost 0.4 us more a launch on the H200, 2026-12-01: sm_90
    has no 64-bit shared atomic add, so it was a CAS loop.) Not a barrier: the
    threads a kernel lets return early, a common pattern before a
    `cuda.syncthreads()` among the rest, would meet the others' barrier there
    and let the block's exit run while they still allocate.

    Nothing here loops or scans: the block's counts are split words
    (`add_split`) each counting lane adds to and the last thread reads in two
    loads. (Counts kept per warp and summed by the last thread held every
    block 2 us longer on the H200, 2026-12-02: a kernel allocating nothing ran
    11.3 us at 1 M threads, 4.2 us without its exit, 4.0 us as a plain kernel.
    Several lanes that counted were once summed with two shuffle scans first,
    so that one lane added: 816-1,056 SASS instructions in every kernel
    (ptxas, sm_90) on every warp's way out. Without them the pipeline's
    captured 1080p frame is 0.5 us faster, 1.040-1.041x static-graph's GPU
    time against 1.043x, on an H100, 2026-12-07, run 44.)"""
    mask = activemask()
    words = int32_words(state)
    allocs = tally[L.TALLY_ALLOCS]
    granules = tally[L.TALLY_GRANULES]
    if (allocs != 0) | (granules != 0):  # (other lanes and groups may be adding too)
        add_split(words, L.BLOCK_ALLOCS, allocs)
        add_split(words, L.BLOCK_GRANULES, granules)
    syncwarp(mask)  # the other lanes' counts and failures, before the leader publishes them
    if cuda.laneid == cuda.ffs(mask) - 1:
        lanes = cuda.popc(mask)
        if leave_add(words, 2 * L.BLOCK_LIVE, -lanes) == lanes:
            hand_back_tail(hdr, slot, state[L.BLOCK_SLAB], align >> 4)
            allocs = read_split(words, L.BLOCK_ALLOCS)
            granules = read_split(words, L.BLOCK_GRANULES)
            if (allocs != 0) | (granules != 0):  # fire and forget: need not wait for it
                base = shard_base(slot, block_index() % L.COUNT_SHARDS)
                reduce_add(hdr, base + L.SHARD_ALLOCS, allocs)
                reduce_add(hdr, base + L.SHARD_GRANULES, granules)
                reduce_add(hdr, L.KERNEL_ALLOCS + kernel, allocs)
            failed = state[L.BLOCK_FAILED]
            if failed != 0:
                report_failures(hdr, slot, seq, kernel, failed, state[L.BLOCK_ASKED])


@device_function
def block_index():
    """The block's index in its grid, in row-major order."""
    return cuda.blockIdx.x + cuda.gridDim.x * (cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z)


@device_function
def block_warps():
    """The warps of a block (its last may be partial)."""
    return (cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z + WARP_SIZE - 1) >> 5


@device_function
def add_split(words, word, value):
    """Add a count (>= 0) to a split block word (see `layout.BLOCK_ALLOCS`): two
    native int32 shared atomics whose results nothing waits for, the second
    skipped for a count below 2**16."""
    cuda.atomic.add(words, 2 * word, int32(value & ((1 << L.COUNT_SPLIT) - 1)))
    high = value >> L.COUNT_SPLIT
    if high != 0:
        cuda.atomic.add(words, 2 * word + 1, int32(high))


@device_function
def read_split(words, word):
    """The count in a split block word, once every addition is visible."""
    low = words[2 * word]
    high = words[2 * word + 1]
    return (int64(high) << L.COUNT_SPLIT) + low


@device_function
def hand_back_tail(hdr, slot, slab, unit):
    """Give the arena back the unused end of a block's slab (from the first `unit`
    boundary in it, so the cursor stays aligned), if the slab still ends where
    the cursor is: true of the last block of a launch, and so of every launch of
    a frame of small launches run one after the other."""
    start = slab >> L.REM_BITS
    end = start + (slab & L.REM_MASK)
    keep = (start + unit - 1) & -unit
    cursor = slot * L.SLOT_WORDS + L.CURSOR
    # A plain read first: most blocks' slabs are not the last, and a CAS on the
    # cursor, which every block would make, queues behind the other blocks'.
    # (Nested: a block with no tail, or no slab at all, reads nothing.)
    if keep < end:
        if load_volatile(hdr, cursor) == end << 4:
            cuda.atomic.cas(hdr, cursor, end << 4, keep << 4)


@device_function
def report_failures(hdr, slot, seq, kernel, failed, largest):
    """Add a block's failures to the slot and to those the host has not reported
    (with its kernel's id), and tell the host, through the mapped failure record."""
    cuda.atomic.add(hdr, slot * L.SLOT_WORDS + L.FAILED, failed)
    cuda.atomic.add(hdr, L.PENDING_FAILED, failed)
    cuda.atomic.max(hdr, L.PENDING_ASKED, largest)
    cuda.atomic.cas(hdr, L.PENDING_SEQ, 0, seq + 1)
    cuda.atomic.or_(hdr, L.PENDING_KERNELS, int64(1) << kernel)
    event = cuda.atomic.add(hdr, L.FAIL_EVENTS, 1) + 1
    cuda.threadfence_system()
    store_volatile_at(hdr[L.FAIL_RECORD] + L.REC_EVENT * 8, event)


@device_function
def count_into(tally, allocs, granules):
    """Add to this thread's tally (registers: no memory traffic while allocating)."""
    tally[L.TALLY_ALLOCS] += allocs
    tally[L.TALLY_GRANULES] += granules


@device_function
def count_failures(state, mask, failed, nbytes):
    """Add the group's failures to the block's count (one shared atomic by the
    group's leader) and keep the block's largest failed request. Uses the
    group's own mask, which also keeps its lanes together on their way out."""
    lost = cuda.popc(ballot_sync(mask, failed))
    if (cuda.laneid == cuda.ffs(mask) - 1) & (lost > 0):
        cuda.atomic.add(state, L.BLOCK_FAILED, lost)
    if failed:
        cuda.atomic.max(state, L.BLOCK_ASKED, nbytes)


@device_function
def request_bytes(count, itemsize):
    """Bytes for `count` elements; negative stays negative, huge saturates at 2**62."""
    if count < 0:
        if count > -(1 << 62) // itemsize:
            return count * itemsize
        return -(1 << 62)
    if count > (1 << 62) // itemsize:
        return 1 << 62
    return count * itemsize


def shape_namespace(ndim, int64):
    """The element count and shape of an array shape tuple (`numba_arena.shape_helpers`,
    which compiles them): their Python source, run with `int64` as the int64 type
    (tests run it with a checked int: no intermediate leaves int64)."""
    count = "".join(
        f"    sign = sign | shape[{i}]\n"
        f"    huge = int64(abs(float(n) * float(shape[{i}])) >= HUGE)\n"
        f"    n = (n * (shape[{i}] & (huge - 1))) | (huge << 62)\n"
        for i in range(ndim)
    )
    dims = ", ".join(f"shape[{i}] * keep" for i in range(ndim))
    source = (
        f"def count(shape):\n    n = int64(1)\n    sign = int64(0)\n{count}"
        f"    return n | (sign >> 63)\n"
        f"def dims(shape, keep):\n    return ({dims},)\n"
    )
    namespace = {"int64": int64, "HUGE": float(1 << 62)}
    exec(compile(source, f"<devalloc shape helpers, ndim={ndim}>", "exec"), namespace)
    return namespace


# -- the arena's cursor -----------------------------------------------------------------


@device_function
def put_cursor_back(hdr, cursor, value):
    """Set the cursor to `value`, whatever requests added to it meanwhile (they all
    ran past the end and are waiting for this)."""
    seen = load_volatile(hdr, cursor)
    while True:
        old = cuda.atomic.cas(hdr, cursor, seen, value)
        if old == seen:
            return
        seen = old


@device_function
def take_from_arena(hdr, slot, capacity, want, least):
    """`want` bytes from the slot's cursor in one atomic, or at the end of the
    arena what is left, if that is at least `least`. Returns ``(start, bytes)``,
    ``(-1, 0)`` for nothing; never leaves the cursor past the end."""
    cursor = slot * L.SLOT_WORDS + L.CURSOR
    while True:
        old = cuda.atomic.add(hdr, cursor, want)
        if old + want <= capacity:
            return old, want
        if old <= capacity:  # the first request past the end: it puts the cursor back
            rest = capacity - old
            if rest >= least and rest > 0:
                put_cursor_back(hdr, cursor, capacity)
                return old, rest
            put_cursor_back(hdr, cursor, old)
            return -1, 0
        # Another request ran past the end first and is putting the cursor back.
        seen = load_volatile(hdr, cursor)
        while seen > capacity:
            pause()
            seen = load_volatile(hdr, cursor)
        if seen + least > capacity:
            return -1, 0


# -- cursor shards -------------------------------------------------------------------------
# In a ``bump`` launch of many warps, each group taking its units (and each lone
# lane its own) from the cursor, every one of those atomics queues on the one
# cursor word. Such takes go to the block's cursor shard instead: one atomic add
# on the shard's grant word (`layout.GRANT_START_SHIFT`); only a grant's refill
# takes from the cursor::
#
#    cursor -> grants of shards 0..31 (by block index) -> bump's units, lone lanes'
#
# Only ``bump`` takes from shards. In ``warp_slab`` kernels the shard code, inlined
# where a warp takes its first slab, cost registers even where it never ran: on the
# H200 (2026-12-02, A/B in one run) sustained 16 B fell from 155 to 138 G/s and
# single-shot at 1 M threads did not move (30.8 us); `bump` went from 41.8 to 87.5
# G/s at 16 B and from 29.0 to 41.1 G/s on Gallatin's one-allocation-a-thread test.
# Grants grow with demand: the first has room for a slab for each warp of the
# shard's blocks (each asking alike), each later one is twice the last, and none
# is larger than the power of two above 1/(GRANT_SHARE * CURSOR_SHARDS) of the
# room left in the arena (or above the take itself), so grants shrink as the
# arena fills. When the arena cannot give a whole grant, the
# shard is spent and its requests go to the cursor, which serves the end exactly,
# and then to the rest of the other shards' grants: a request fails only if
# neither the cursor nor any grant has room for it.


@device_function
def take_spread(hdr, state, slot, capacity, want, least, shards):
    """`take_from_arena` (`want` a multiple of 16 bytes), but with `shards` (a
    constant: ``bump``'s) through the block's cursor shard (`layout.BLOCK_SHARD`)
    in a launch of at least SHARDED_WARPS warps when `want` is small next to the
    arena."""
    if not shards:
        return take_from_arena(hdr, slot, capacity, want, least)
    granules = want >> 4
    large = granules * (L.GRANT_SERVES * L.GRANT_SHARE * L.CURSOR_SHARDS) > capacity >> 4
    word = state[L.BLOCK_SHARD]
    if large | (granules > L.GRANT_TAKE_MOST) | (capacity >= L.GRANT_CAPACITY_LIMIT):
        return take_from_arena(hdr, slot, capacity, want, least)
    if word == 0:  # (one condition with the above held 2 more registers in one_each, ptxas)
        return take_from_arena(hdr, slot, capacity, want, least)
    least = (least + L.GRANULE - 1) >> 4
    return take_from_shard(hdr, slot, capacity, granules, least, word)


@device_function
def grant_parts(word):
    """A grant word's ``(granules taken, granules it holds, whether it is spent)``
    (`layout.GRANT_START_SHIFT`; its first granule is ``word >> GRANT_START_SHIFT``)."""
    code = (word >> L.GRANT_CODE_SHIFT) & L.GRANT_CODE_MASK
    return word & L.GRANT_USED_MASK, (int64(1) << code) >> 1, code == L.GRANT_SPENT


@device_function
def take_from_shard(hdr, slot, capacity, granules, least, word):
    """`granules` from the block's shard (grant `word`): one atomic add to it, or,
    for the request that runs past the grant's end, the next grant (`take_grant`);
    the requests that run past it meanwhile wait for that and try again. Returns
    ``(start, bytes)`` as `take_from_arena` does.

    The common case, a take that fits in the grant, returns before any loop.
    ptxas puts a YIELD at a loop's head, and a lane that executes one lets the
    lanes waiting for it at the end of its branch go on without it: when the
    loop's head held this test, a warp whose lane 0 took its chunk here ran
    the rest of its allocation as two groups, its broadcast through the
    divergent path of `shfl.sync` (ncu on the H200, 2026-12-04: every warp
    of Gallatin's test shape did). Outside the loop: that test 47.0 -> 53.8 G
    allocations/s with ``bump`` at 16 B, the sustained 16 B loop 88 -> 109.5,
    single-shot at 1 M threads 19.9 -> 17.8 us. (The same for
    `take_from_arena` held ``warp_slab``'s `one_each` at 66 registers, not 64,
    and slowed it from 27.1 to 22.0.)"""
    old = cuda.atomic.add(hdr, word, granules)
    used, size, spent = grant_parts(old)
    if (not spent) & (used + granules <= size):
        return ((old >> L.GRANT_START_SHIFT) + used) << 4, granules << 4
    return past_grant(hdr, slot, capacity, granules, least, word, old)


@device_function
def past_grant(hdr, slot, capacity, granules, least, word, old):
    """`take_from_shard` for a take that did not fit in the grant it saw (`old`,
    the grant word before this take's add): spent, the first past the end, or
    one that waits for the grant to be replaced and adds again."""
    while True:
        used, size, spent = grant_parts(old)
        if spent:  # (its count put back, so that it never grows into the code)
            cuda.atomic.exch(hdr, word, L.GRANT_SPENT << L.GRANT_CODE_SHIFT)
            return take_or_steal(hdr, slot, capacity, granules, least)
        if used + granules <= size:
            return ((old >> L.GRANT_START_SHIFT) + used) << 4, granules << 4
        if used <= size:  # the first past the end: it replaces the grant
            return take_grant(hdr, slot, capacity, word, granules, least, old)
        # Another take ran past the end first: wait until it has replaced the
        # grant (the word's count is within its grant again; the replacement
        # may have the same start and size: `keep_rest`), then add again.
        while True:
            used, size, _ = grant_parts(load_volatile(hdr, word))
            if used <= size:
                break
            nap()
        old = cuda.atomic.add(hdr, word, granules)


@device_function
def take_grant(hdr, slot, capacity, word, granules, least, old):
    """Run by the request that ran past the end of its shard's grant (`old`, the
    word before its add): the shard's next grant from the cursor, with this
    request taken from its front, published in one exchange. If the arena has
    no room for a whole grant, the shard keeps the rest of the old one
    (`keep_rest`) and this request goes to the cursor."""
    _, size, _ = grant_parts(old)
    grant = 2 * size
    if size == 0:  # room for the warps of the shard's blocks, each asking alike
        blocks = int64(cuda.gridDim.x) * cuda.gridDim.y * cuda.gridDim.z
        shard_warps = ((blocks + L.CURSOR_SHARDS - 1) >> L.CURSOR_SHARDS_LOG2) * block_warps()
        grant = granules * min(shard_warps, 1 << 40)
    left = (capacity - load_volatile(hdr, slot * L.SLOT_WORDS + L.CURSOR)) >> 4
    most = left // (L.GRANT_SHARE * L.CURSOR_SHARDS)
    grant = min(grant, most, int64(1) << L.GRANT_MOST_LOG2)
    grant = int64(1) << bit_length(max(grant, granules) - 1)  # a power of two, at least the take
    start, _ = take_from_arena(hdr, slot, capacity, grant << 4, grant << 4)
    if start < 0:
        keep_rest(hdr, word, old)
        return take_or_steal(hdr, slot, capacity, granules, least)
    code = bit_length(grant)  # (1 << code) >> 1 == grant
    published = (start >> 4) << L.GRANT_START_SHIFT | code << L.GRANT_CODE_SHIFT | granules
    cuda.atomic.exch(hdr, word, published)
    return start, granules << 4


@device_function
def take_or_steal(hdr, slot, capacity, granules, least):
    """For a request its shard cannot serve (spent, or left with a rest too
    small for it): the cursor, which serves the end of the arena exactly, or,
    if it has no room, the rest of another shard's grant, so that a request
    fails only if neither the cursor nor any grant has room."""
    start, got = take_from_arena(hdr, slot, capacity, granules << 4, least << 4)
    if start >= 0:
        return start, got
    block = block_index()
    for step in range(1, L.CURSOR_SHARDS):
        word = cursor_shard(slot, (block + step) & (L.CURSOR_SHARDS - 1))
        used, size, spent = grant_parts(load_volatile(hdr, word))
        if spent | (used + granules > size):  # (add only where there looks to be room)
            continue
        old = cuda.atomic.add(hdr, word, granules)
        used, size, spent = grant_parts(old)
        if not spent:
            if used + granules <= size:
                return ((old >> L.GRANT_START_SHIFT) + used) << 4, granules << 4
            if used <= size:  # the first past its end: the arena has none to replace it
                keep_rest(hdr, word, old)
    return int64(-1), int64(0)


@device_function
def keep_rest(hdr, word, old):
    """Run by the first take past the end of a shard's grant (`old`, the word
    before its add) when the arena has no room for another grant: publish
    what the grant has left as the shard's grant, so that smaller takes still
    get it (a failed request takes nothing from any other), or mark the shard
    spent if nothing is left. The rest, ``size - used`` granules, becomes a
    grant of the power of two above it that ends where the old one ended,
    with its front counted as taken."""
    used, size, _ = grant_parts(old)
    rest = size - used
    if rest <= 0:
        cuda.atomic.exch(hdr, word, L.GRANT_SPENT << L.GRANT_CODE_SHIFT)
        return
    span = int64(1) << bit_length(rest - 1)
    start = (old >> L.GRANT_START_SHIFT) + size - span
    code = bit_length(span)  # (1 << code) >> 1 == span
    cuda.atomic.exch(
        hdr, word, start << L.GRANT_START_SHIFT | code << L.GRANT_CODE_SHIFT | (span - rest)
    )


# -- slab words in shared memory -----------------------------------------------------------


@device_function
def cut(slab, need, step, least):
    """Split a slab word: `need` granules starting on a multiple of `step` (at the
    end of the slab no fewer than `least`). Returns ``(start << 24 | granules
    taken, the slab word left)``, or ``(0, slab)`` when the slab cannot serve it.
    Small requests (`step` 1, the common case) take the front of the slab with a
    few 64-bit operations fewer, no alignment to work out."""
    if step == 1:
        room = slab & L.REM_MASK
        take = min(need, room)
        if take < least or take <= 0:
            return 0, slab
        return (slab - room) | take, slab + (take << L.REM_BITS) - take
    free_at = slab >> L.REM_BITS
    start = (free_at + step - 1) & -step
    room = (slab & L.REM_MASK) - (start - free_at)
    take = min(need, room)
    if take < least or take <= 0:
        return 0, slab
    return start << L.REM_BITS | take, (start + take) << L.REM_BITS | (room - take)


@device_function
def carve_small(state, word, granules):
    """The fast path: `granules` from the front of the slab in state[word], with
    no alignment to keep, in one CAS. Returns the first granule, or -1 when the
    slab is short, being refilled (REFILLING is negative) or changed meanwhile:
    then `carve` and the refill path take over."""
    old = load_volatile_shared(state, word)
    if (old >= 0) & ((old & L.REM_MASK) >= granules):
        if cuda.atomic.cas(state, word, old, old + (granules << L.REM_BITS) - granules) == old:
            return old >> L.REM_BITS
    return -1


@device_function
def take_owned(state, warp, granules, step):
    """The fast path of a whole warp: `granules` on a multiple of `step` from the
    front of its slab, with a plain load and store, no atomic: every lane of
    the warp is in this call, so no other group of it can touch its slab word
    meanwhile (no refill is in progress either). Returns the first granule, or
    -1 when the slab is short: then the refill path takes over."""
    old = load_volatile_shared(state, warp)
    if step == 1:  # (a constant where inlined) small requests: no alignment to keep
        if (old & L.REM_MASK) < granules:
            return -1
        store_volatile_shared(state, warp, old + (granules << L.REM_BITS) - granules)
        return old >> L.REM_BITS
    got, rest = cut(old, granules, step, granules)
    if got == 0:
        return -1
    store_volatile_shared(state, warp, rest)
    return got >> L.REM_BITS


@device_function
def carve(state, word, need, step, least):
    """`cut` the slab held in state[word], atomically. Returns ``(granules taken as
    `cut` gives them, 0)``, or ``(0, word seen)`` when the slab as seen cannot
    serve it (REFILLING while it is being refilled). A lost CAS retries with the
    word it returned, not a fresh load: groups of a block that find a block
    slab refilled all carve it at once (ncu on the H200, 2026-12-01: four CAS
    attempts per warp in the single-shot test)."""
    old = load_volatile_shared(state, word)
    while old != REFILLING:
        got, rest = cut(old, need, step, least)
        if got == 0:
            break
        seen = cuda.atomic.cas(state, word, old, rest)
        if seen == old:
            return got, 0
        old = seen
    return 0, old


# Refilling: a group that finds a slab too dry locks exactly the word it saw
# (CAS to REFILLING), so that a group which saw the slab dry before another one
# refilled it cannot refill it again; the others wait for the fresh slab. The
# refiller cuts its own request from the fresh slab before it publishes the rest:
# published whole, a smaller request could take the front of it first and leave
# the refiller a rest too small, to be dropped at its next refill (on the GPU the
# lanes that retry alone do run at once).


@device_function
def await_refill(state, word):
    """Poll a slab word until the group refilling it has published it: a loop of
    one shared load, where a retried `carve` and `lock` would run about 25
    instructions a turn (ncu on the H200, 2026-12-01: the warps of a block
    waiting for its first slab issued 38% of the single-shot test's
    instructions)."""
    while load_volatile_shared(state, word) == REFILLING:
        pause()


@device_function
def lock(state, word, seen):
    """Whether this group now holds the refill lock of the slab it saw as `seen`."""
    if seen == REFILLING:
        return False
    return cuda.atomic.cas(state, word, seen, REFILLING) == seen


@device_function
def slab_from_arena(hdr, state, slot, capacity, granules, least, spread):
    """A slab word for `granules` from the cursor (fewer, but at least `least`, at
    the end of the arena), or, with `spread`, through the block's cursor shard
    (`take_spread`); 0 for none."""
    start, got = take_spread(hdr, state, slot, capacity, granules << 4, least << 4, spread)
    if start < 0:
        return 0
    return (start >> 4) << L.REM_BITS | (got >> 4)


@device_function
def refill(state, word, seen, slab, need, step, least):
    """Run by the holder of state[word]'s lock with a fresh `slab` (0: the arena
    is spent): cut this request from it, publish the rest, release the lock.
    Returns ``(granules taken as `cut` gives them, whether to stop trying)``;
    with no fresh slab, what the slab had left (`seen`) is put back."""
    if slab == 0:
        cuda.atomic.exch(state, word, seen)
        return 0, True
    got, rest = cut(slab, need, step, least)
    cuda.atomic.exch(state, word, rest)
    return got, got != 0


@device_function
def joined(old, fresh):
    """A fresh slab word, with the rest of the `old` one in front of it if that
    ends where the fresh one starts (nothing was taken from where the fresh
    one came in between): the rest is not dropped. (Block slabs are at most
    2**21 granules, warp slabs under 2**17, so the two fit in REM_BITS.)"""
    rest = old & L.REM_MASK
    if (rest != 0) & ((old >> L.REM_BITS) + rest == fresh >> L.REM_BITS):
        return old + (fresh & L.REM_MASK)
    return fresh


@device_function
def hand_down(state, tail):
    """A warp slab's rest, replaced because it was too small for its warp's
    request, becomes the block's slab if that is empty, for any warp of the
    block to carve (the lanes served alone at the end of the arena, say);
    otherwise it is dropped, a bounded tail. (``warp_slab`` only: ``bump``
    carves no block slab.) With `joined`, four warps whose requests change
    size (16-112 B) until a 32 KiB arena refuses use all of it on the
    simulator, where dropped rests left 4.7-11.5% unused (2026-12-07,
    `test_requests_changing_size_use_nearly_all_of_the_arena`)."""
    if (tail & L.REM_MASK) != 0:
        seen = load_volatile_shared(state, L.BLOCK_SLAB)
        if (seen & L.REM_MASK) == 0:  # (REFILLING, -1, is not empty)
            cuda.atomic.cas(state, L.BLOCK_SLAB, seen, tail)


@device_function
def with_rest(state, old, fresh, direct):
    """A warp's fresh slab, with the rest of its `old` one in front if that ends
    where the fresh one starts (nothing was taken in between from the block's
    slab, or from the arena for a slab straight from it); otherwise that rest
    is handed down to the block (`hand_down`; not in ``bump``, `direct`)."""
    slab = joined(old, fresh)
    if (slab == fresh) & (not direct):
        hand_down(state, old)
    return slab


@device_function
def from_block(hdr, state, slot, capacity, need, step, least, block_granules, unit):
    """Granules from the block's slab; one warp replaces a dry slab with a fresh
    one from the arena (the one global atomic) while the others wait. Block
    slabs are whole `unit`s (``align``), so the cursor stays aligned."""
    while True:
        got, seen = carve(state, L.BLOCK_SLAB, need, step, least)
        if got != 0:
            return got
        if lock(state, L.BLOCK_SLAB, seen):
            taken = load_volatile_shared(state, L.BLOCK_TAKEN)
            want = max(need, taken)
            if taken == 0:  # the block's warps are likely to ask alike: room for each
                want = need * block_warps()
            want = min(block_granules, (want + unit - 1) & -unit)
            slab = slab_from_arena(hdr, state, slot, capacity, want, least, False)
            if slab != 0:  # under the lock: no other group writes it
                cuda.atomic.exch(state, L.BLOCK_TAKEN, taken + (slab & L.REM_MASK))
                slab = joined(seen, slab)
            # The old slab's rest, too small for this request and not just
            # before the fresh one, is a bounded tail.
            got, done = refill(state, L.BLOCK_SLAB, seen, slab, need, step, least)
            if done:
                return got
        else:
            await_refill(state, L.BLOCK_SLAB)


@device_function
def warp_refill(hdr, state, warp, slot, capacity, need, step, align, warp_g, block_g, direct):
    """A fresh slab for a warp: from the block's slab, by as much as the warp has
    taken so far (``warp_slab``), or the whole `align` units the request needs
    straight from the arena (``direct``, the ``bump`` strategy); 0 for none.
    Run by the group that holds the warp's slab word.

    A warp's first slab, when its request fills at least one unit, also comes
    straight from the arena (what is rounded up is less than what is asked):
    the warps of a block then take their first slabs side by side, each with
    its own global atomic, where through the block's slab seven of eight
    waited for one to refill it and then raced to carve it (on the H200,
    2026-12-02: single-shot at 1 M threads, 40.4 us through the block's slab,
    31.4 us straight from the arena; later refills, as common as one
    allocation in six, stay with the block's slab: all of them from the
    arena made storing kernels 1.23x slower)."""
    unit = align >> 4
    if direct:
        return slab_from_arena(hdr, state, slot, capacity, (need + unit - 1) & -unit, need, True)
    taken = load_volatile_shared(state, L.WARP_TAKEN + warp)
    if (taken == 0) & (need >= unit):
        slab = slab_from_arena(hdr, state, slot, capacity, (need + unit - 1) & -unit, need, False)
    else:
        want = min(warp_g, max(need, taken))
        slab = from_block(hdr, state, slot, capacity, want, step, need, block_g, unit)
    store_volatile_shared(state, L.WARP_TAKEN + warp, taken + (slab & L.REM_MASK))
    return slab


@device_function
def from_warp(hdr, state, warp, slot, capacity, need, step, align, warp_g, block_g, direct, owned):
    """Exactly `need` granules on a multiple of `step` from the warp's slab, or
    0. A dry slab is replaced (`warp_refill`). Diverged groups of one warp
    allocate concurrently (on the hardware, often), so they refill the slab
    under a lock; a whole warp (`owned`, after `take_owned` found the slab
    short) is alone with it and replaces it with plain stores."""
    if owned:
        slab = warp_refill(
            hdr, state, warp, slot, capacity, need, step, align, warp_g, block_g, direct
        )
        if slab == 0:  # the arena is spent: the old slab stays
            return 0
        old = load_volatile_shared(state, warp)  # (the warp's alone: still the old slab)
        got, rest = cut(with_rest(state, old, slab, direct), need, step, need)
        store_volatile_shared(state, warp, rest)
        return got
    while True:
        got, seen = carve(state, warp, need, step, need)
        if got != 0:
            return got
        if lock(state, warp, seen):
            slab = warp_refill(
                hdr, state, warp, slot, capacity, need, step, align, warp_g, block_g, direct
            )
            if slab != 0:
                slab = with_rest(state, seen, slab, direct)
            got, done = refill(state, warp, seen, slab, need, step, need)
            if done:
                return got
        else:
            await_refill(state, warp)


@device_function
def take_chunk(
    hdr, state, warp, slot, capacity, align, log2_slab, granules, aligned, direct, owned
):
    """Exactly `granules` for a group (or one lane): from the warp's slab, or from
    the block's slab if larger than a warp slab, or straight from the arena if
    larger than that. Returns the chunk's first granule, -1 for none."""
    step = 1
    if aligned:
        step = align >> 4
    if direct:  # chunks up to the largest slab go through the warp's tail
        warp_g = 1 << (L.MAX_LOG2_SLAB - 4)
        block_g = warp_g
    else:
        warp_g = 1 << (log2_slab - 4)
        block_g = warp_g * block_warps()
    got = 0
    if granules <= warp_g:
        got = from_warp(
            hdr, state, warp, slot, capacity, granules, step, align, warp_g, block_g, direct, owned
        )
    elif granules <= block_g:
        got = from_block(hdr, state, slot, capacity, granules, step, granules, block_g, align >> 4)
    else:
        # Whole `align` units keep the cursor aligned; at the end of the arena
        # the request's own bytes are enough.
        span = ((granules << 4) + align - 1) & -align
        start, _ = take_from_arena(hdr, slot, capacity, span, granules << 4)
        return start >> 4  # -1 stays -1
    if got == 0:
        return -1
    return got >> L.REM_BITS


# -- combining a warp's requests ----------------------------------------------------------


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
        rank = cuda.popc(mask & lanemask_lt())
        while step < WARP_SIZE:
            src = lane
            if rank >= step:
                src = lane_of_rank(mask, rank - step)
            below = shfl_sync(mask, total, src)
            if rank >= step:
                total += below
            step <<= 1
    return total - value, shfl_sync(mask, total, 31 - cuda.clz(mask))


@device_function
def lane_granules(nbytes, align):
    """A request's granules, rounded to whole `align` units if it is an aligned one."""
    granules = (nbytes + L.GRANULE - 1) >> 4
    if nbytes >= align:
        step = align >> 4
        granules = (granules + step - 1) & -step
    return granules


NOT_SERVED = -2  # what the fast path returns for a request it leaves to the general one


@device_function
def group_alloc(
    hdr, state, tally, warp, slot, capacity, align, log2_slab, nbytes, direct, report
):  # fmt: skip
    """Allocation for every lane that calls it together: one chunk for the group,
    then, for the lanes it could not serve, one try each; a request that gets
    no memory is counted as a failure if `report` (a constant: False for
    ``arena.try_alloc``, whose requests are reported only if invalid). A whole warp asking
    alike for less than `align` takes the fast path; otherwise (and when the
    arena cannot give its chunk) it gets a copy of the general path compiled for
    its constant mask: the warp primitives then need no check that their lanes
    have converged."""
    mask = activemask()
    if mask == FULL_MASK:
        offset = take_uniform_small(
            hdr, state, tally, warp, slot, capacity, align, log2_slab, nbytes, direct
        )
        if offset != NOT_SERVED:
            return offset
        return alloc_for(
            FULL_MASK, hdr, state, tally, warp, slot, capacity, align, log2_slab, nbytes, direct,
            report,
        )  # fmt: skip
    if mask & (mask - 1) == 0:  # one lane alone
        offset = take_alone(hdr, state, tally, warp, slot, capacity, align, nbytes, direct)
        if offset != NOT_SERVED:
            return offset
    return alloc_for(
        mask, hdr, state, tally, warp, slot, capacity, align, log2_slab, nbytes, direct, report
    )


@device_function
def take_alone(hdr, state, tally, warp, slot, capacity, align, nbytes, direct):
    """The fast path of a lane alone (the one thread that allocates for its
    block, say) making its warp's first request: whole `align` units straight
    from the arena's cursor (or the block's cursor shard), as the general path
    would take them for the warp's first slab, but with one global atomic and
    none of the shared ones of its locks, refills and publications. In
    ``warp_slab`` a request below `align` comes here too while its block has
    no slab, and the rest of its unit becomes the block's slab with one
    shared CAS (once a block has one, lone lanes of its other warps carve it
    as before); in ``bump`` it does not (its general path takes the same unit
    and keeps the rest as the warp's tail, and the path here would cost its
    kernels 8 registers: single-shot 46 -> 54, ptxas sm_90). The rest of a
    request of at least `align` is not kept. Returns the byte offset, or
    NOT_SERVED for a request of any other kind, or one the arena cannot give
    (the general path then tries again, and counts the failure). (Diverged groups of the warp,
    or other warps, may be allocating meanwhile: the CAS keeps a slab one of
    them made, dropping this rest, a tail under `align`; the warp's taken
    count is a refill size's hint, which a lost update only makes smaller.)
    On the H200 (2026-12-04) the frame pipeline's tile lists, many below
    `align`, took this path instead of the general one's block refill: its
    captured 1080p frame 0.231 -> 0.223 ms (same call, two turns each;
    static-graph 0.209-0.216)."""
    if (nbytes <= 0) | (nbytes > capacity) | (direct & (nbytes < align)):
        return NOT_SERVED
    if load_volatile_shared(state, L.WARP_TAKEN + warp) != 0:
        return NOT_SERVED
    if (not direct) & (nbytes < align):  # a block slab is there: carve it instead
        if load_volatile_shared(state, L.BLOCK_SLAB) != 0:
            return NOT_SERVED
    span = (nbytes + align - 1) & -align
    start, got = take_spread(hdr, state, slot, capacity, span, nbytes, direct)
    if start < 0:
        return NOT_SERVED
    granules = lane_granules(nbytes, align)
    store_volatile_shared(state, L.WARP_TAKEN + warp, granules)  # (the rest is a slab's)
    if (nbytes < align) & ((got >> 4) > granules):  # (at the arena's end, `got` may be less)
        rest = ((start >> 4) + granules) << L.REM_BITS | ((got >> 4) - granules)
        cuda.atomic.cas(state, L.BLOCK_SLAB, 0, rest)
    count_into(tally, 1, granules)
    return start


@device_function
def take_uniform_small(hdr, state, tally, warp, slot, capacity, align, log2_slab, nbytes, direct):
    """The fast path: a whole warp whose lanes all ask for the same `nbytes`, below
    `align`, takes 32 chunks of it packed from the front of its slab. Its lane 0
    does it with a plain shared load and store (the whole warp is here, so no
    other group of it can touch its slab word, and no refill is under way), or,
    when the slab is short, refills it (`take_chunk`), and counts it in its
    tally. Returns this lane's byte offset, or NOT_SERVED when the request is
    not of that kind or the arena cannot give the warp's chunk: the general
    path takes over, where lanes may still be served alone. (One 32-bit
    shuffle checks that the lanes agree: a request below `align` fits in 31
    bits. Refilling here, not through the general path, saved a third of
    what a refill cost: on the H200, 2026-12-01, one in six of the sustained
    benchmark's allocations refills.)"""
    low = int32(nbytes & 0x7FFFFFFF)
    other = (low != shfl_sync(FULL_MASK, low, 0)) | (nbytes <= 0) | (nbytes >= align)
    if ballot_sync(FULL_MASK, other) != 0:
        return NOT_SERVED
    granules = (nbytes + L.GRANULE - 1) >> 4
    chunk = granules << 5
    start = -1
    if cuda.laneid == 0:
        old = load_volatile_shared(state, warp)
        if (old & L.REM_MASK) >= chunk:
            store_volatile_shared(state, warp, old + (chunk << L.REM_BITS) - chunk)
            start = old >> L.REM_BITS
        elif chunk << 4 <= capacity:
            start = take_chunk(
                hdr, state, warp, slot, capacity, align, log2_slab, chunk, False, direct, True
            )
        if start >= 0:
            count_into(tally, WARP_SIZE, chunk)
    start = shfl_sync(FULL_MASK, start, 0)
    if start < 0:
        return NOT_SERVED
    return (start + cuda.laneid * granules) << 4


@device_function
def alloc_for(
    mask, hdr, state, tally, warp, slot, capacity, align, log2_slab, nbytes, direct, report
):  # fmt: skip
    """`group_alloc` for the lanes of `mask`."""
    lane = cuda.laneid
    leader = cuda.ffs(mask) - 1
    possible = (nbytes > 0) & (nbytes <= capacity)
    # This lane's part of the group's chunk: aligned requests in the high half,
    # small ones in the low half, so one scan places both. (Packed in 32 bits
    # instead, for one shuffle a step, mixed sizes ran no faster on the H200 and
    # uniform ones 6% slower: 64-bit halves cost nothing to split.)
    share = 0
    rounded = 0
    if possible & (nbytes <= L.LANE_CHUNK_MAX):
        rounded = lane_granules(nbytes, align)
        share = rounded
        if nbytes >= align:
            share <<= 32
    first = shfl_sync(mask, share, leader)
    if ballot_sync(mask, share != first) == 0:  # every lane asks the same: no scan
        below = cuda.popc(mask & lanemask_lt()) * first
        total = cuda.popc(mask) * first
        served = mask * (first > 0)  # the lanes the chunk holds
    else:
        below, total = exclusive_scan(mask, lane, share)
        served = ballot_sync(mask, share > 0)
    aligned_total = total >> 32
    chunk = aligned_total + (total & LOW32)
    # Where this lane's request lies in the chunk, in granules (-1: not in it),
    # worked out before the chunk is taken: the take is the path's register
    # peak, and only this, not the scan's halves, lives across it.
    at = -1
    if share > 0:
        at = aligned_total + (below & LOW32)
        if share > LOW32:
            at = below >> 32
    start = -1
    owned = mask == FULL_MASK  # (a constant in the full warp's copy)
    if (lane == leader) & (chunk > 0):
        if owned:
            if aligned_total == 0:
                start = take_owned(state, warp, chunk, 1)
            else:
                start = take_owned(state, warp, chunk, align >> 4)
        elif aligned_total == 0:
            start = carve_small(state, warp, chunk)
        else:
            got, _ = carve(state, warp, chunk, align >> 4, chunk)
            if got != 0:
                start = got >> L.REM_BITS
        if (start < 0) & (chunk << 4 <= capacity):
            start = take_chunk(
                hdr, state, warp, slot, capacity, align, log2_slab, chunk, aligned_total > 0,
                direct, owned,
            )  # fmt: skip
        if start >= 0:  # the leader counts the chunk's allocations
            count_into(tally, cuda.popc(served), chunk)
    start = shfl_sync(mask, start, leader)
    offset = -1
    if (at >= 0) & (start >= 0):
        offset = (start + at) << 4
    if (start < 0) | (served != mask):  # the same for the whole group
        offset = serve_the_rest(
            hdr, state, tally, warp, slot, capacity, align, log2_slab, nbytes, direct,
            mask, offset, cuda.popc(served) > 1, report,
        )  # fmt: skip
    return offset


@device_function
def serve_the_rest(
    hdr, state, tally, warp, slot, capacity, align, log2_slab, nbytes, direct, mask, offset,
    several, report,
):  # fmt: skip
    """The lanes of a group that its chunk did not serve (it was refused, or they
    were not in it) try alone, in turn (on the GPU the turns overlap: nothing
    here waits for the one before), for their bytes unrounded: a request too
    large for what is left fails alone. Counts the allocations made here and
    the group's failures. (What it needs of the request is worked out again
    from `nbytes`: kept from `alloc_for`, it would live across the chunk's take.)"""
    possible = (nbytes > 0) & (nbytes <= capacity)
    exact = (nbytes + L.GRANULE - 1) >> 4  # granules, unrounded
    was_rounded = (nbytes > L.LANE_CHUNK_MAX) | (lane_granules(nbytes, align) != exact)
    lane = cuda.laneid
    retry = ballot_sync(mask, possible & (offset < 0) & (several | was_rounded))
    while retry != 0:
        if lane == cuda.ffs(retry) - 1:
            alone = take_chunk(
                hdr, state, warp, slot, capacity, align, log2_slab, exact, nbytes >= align,
                direct, False,
            )  # fmt: skip
            if alone >= 0:
                offset = alone << 4
                count_into(tally, 1, lane_granules(nbytes, align))
        retry &= retry - 1
    failed = (offset < 0) & (nbytes != 0) & (report | (nbytes < 0))
    count_failures(state, mask, failed, nbytes)
    return offset
