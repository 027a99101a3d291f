"""Every library and example kernel compiles for the H200 (sm_90), with no GPU; and
the allocator's fast path, read off the PTX, takes no global atomic.

These tests need the real Numba compiler, not the simulator. In a simulator run,
`test_ptx_suite` runs them in a second process."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, types

import devalloc
from devalloc.backend import SIMULATOR
from helpers import compile_all
from ptx_cfg import Cfg

ROOT = Path(__file__).resolve().parent.parent
CC = (9, 0)


def toolkit_nvvm():
    """(libnvvm path, release) of the CUDA toolkit on this machine, or None: the
    H200 compiles with its toolkit's NVVM (CUDA 13.0), and NVVM versions differ
    in what sends them into a loop, so the PTX suite runs with that one too."""
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if not root:
            continue
        libs = sorted(
            p for pattern in ("lib/libnvvm.so*", "lib64/libnvvm.so*", "nvvm/lib64/libnvvm.so*")
            for p in Path(root).glob(pattern)
        )  # fmt: skip
        nvcc = Path(root, "bin", "nvcc")
        if libs and nvcc.exists():
            banner = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
            release = banner.split("release ")[1].split(",")[0] if "release " in banner else ""
            return str(libs[-1]), release
    return None


NVVMS = {"numba's": None, "toolkit's": toolkit_nvvm()}
# Other files with ptx-marked tests, run by test_ptx_suite with these.
PTX_ELSEWHERE = [str(ROOT / "tests" / name) for name in ("test_scratch.py", "test_views_only.py")]


@pytest.mark.skipif(not SIMULATOR, reason="runs directly outside the simulator")
@pytest.mark.parametrize("nvvm", list(NVVMS))
def test_ptx_suite(nvvm):
    if nvvm == "toolkit's" and NVVMS[nvvm] is None:
        pytest.skip("no CUDA toolkit with libnvvm on this machine")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    if NVVMS[nvvm]:
        env["DEVALLOC_TEST_NVVM"], env["DEVALLOC_TEST_NVVM_RELEASE"] = NVVMS[nvvm]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "ptx", "-p", "no:cacheprovider",
         "--timeout=600", "--timeout-method=thread", __file__, *PTX_ELSEWHERE],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout.split("\n")[-2]


@pytest.mark.ptx
@pytest.mark.parametrize("module_name", ["kernels.bench", "kernels.image", "attention_scratch"])
def test_every_kernel_compiles_for_sm90(module_name):
    import importlib

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    module = importlib.import_module(module_name)
    compiled = compile_all(module, CC)
    assert len(compiled) >= len(module.PTX_SIGNATURES)
    for key, ptx in compiled.items():
        assert ".target sm_90" in ptx, key
        assert ".entry" in ptx, key


@pytest.mark.ptx
def test_library_examples_from_the_design_compile():
    @devalloc.kernel
    def smooth(arena, img, out):
        y = cuda.grid(1)
        if y < img.shape[0]:
            row = arena.alloc(img.shape[1], np.float32)
            tile = arena.alloc((4, 8), np.int32)
            if row.size == 0:
                return
            spare = arena.try_alloc((2, img.shape[1]), np.float32)  # may fail: no report
            if spare.size > 0:
                spare[0, 0] = img[y, 0]
            same = arena.view(arena.offset(row), img.shape[1], np.float32)
            for x in range(img.shape[1]):
                row[x] = img[y, x]
            out[y] = same[0] + tile.size

    for strategy in devalloc.STRATEGIES:
        for align in (16, 256, 4096):
            ptx = smooth.ptx(
                types.float32[:, :], types.float32[:], strategy=strategy, align=align, cc=CC
            )
            assert ".target sm_90" in ptx


@pytest.mark.ptx
def test_launch_bounds_reach_the_wrappers_ptx():
    """The cap a kernel asks for is the generated wrapper's (the kernel the GPU
    runs), where ptxas sizes registers for the whole allocator."""

    @devalloc.kernel(launch_bounds=(64, 2))
    def bounded(arena, out):
        out[cuda.grid(1)] = arena.alloc(3, np.int64).size

    @devalloc.kernel
    def unbounded(arena, out):
        out[cuda.grid(1)] = arena.alloc(3, np.int64).size

    ptx = bounded.ptx(types.int64[::1], cc=CC)
    assert ".maxntid 64, 1, 1" in ptx and ".minnctapersm 2" in ptx
    assert ".maxntid" not in unbounded.ptx(types.int64[::1], cc=CC)


@pytest.mark.ptx
@pytest.mark.timeout(120)
def test_two_allocation_sites_in_the_branches_of_an_if_compile():
    """NVVM 13.0 (the H200's) never finished this kernel while a failure report
    stored through a pointer loaded from the header; see `store_volatile_at`."""

    @devalloc.kernel
    def two_sites(arena, sizes, out):
        t = cuda.grid(1)
        if t % 2 == 0:
            buf = arena.alloc(sizes[t], np.uint8)
        else:
            buf = arena.alloc(sizes[t] + 300, np.uint8)
        out[t] = arena.offset(buf)

    vector = types.int64[::1]
    for strategy in devalloc.STRATEGIES:
        ptx = two_sites.ptx(vector, vector, strategy=strategy, cc=CC)
        assert ptx.count("st.volatile.global.u64") == 1  # the failure record's one store
        release = os.environ.get("DEVALLOC_TEST_NVVM_RELEASE")
        if release:  # the suite runs with the libnvvm it asked for
            assert f"release {release}," in ptx


@pytest.mark.ptx
def test_without_a_gpu_the_error_says_how_to_simulate():
    if cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(devalloc.NoGpuError, match="NUMBA_ENABLE_CUDASIM=1"):
        devalloc.Arena(1024)
    from devalloc.allocators import numba as pool  # its stats said Numba's own error

    with pytest.raises(devalloc.NoGpuError, match="NUMBA_ENABLE_CUDASIM=1"):
        pool.stats()


@pytest.mark.ptx
def test_parameters_named_like_the_wrappers_variables_compile():
    @devalloc.kernel
    def handle(arena, handle, state, hdr, slot, warp, user, cuda, int64, _devalloc_handle):
        buf = arena.alloc(2, np.int64)
        buf[0] = state[0] + hdr[0] + slot[0] + warp[0] + user[0] + cuda[0] + int64[0]
        handle[0] = buf[0] + _devalloc_handle[0]

    vector = types.int64[::1]
    for strategy in devalloc.STRATEGIES:
        assert ".entry" in handle.ptx(*[vector] * 9, strategy=strategy, cc=CC)


@pytest.mark.ptx
@pytest.mark.parametrize("dtype", [float, "f4", None], ids=["float", "f4", "None"])
def test_dtypes_the_simulator_refuses_are_refused_here_too(dtype):
    @devalloc.kernel
    def typed(arena, out):
        out[0] = arena.alloc(4, dtype).size

    with pytest.raises(Exception, match="dtype must be a NumPy number or bool type"):
        typed.ptx(types.int64[::1], cc=CC)


@pytest.mark.ptx
@pytest.mark.parametrize("strategy", devalloc.STRATEGIES)
def test_a_store_that_is_the_arrays_last_use_is_kept(strategy):
    """numba-cuda's dead-code elimination dropped ``buf[buf.size - 1] = m`` (the
    array's last use) on the H200: the data a kernel leaves in the arena must
    reach memory (devalloc.numba_compat.keep_stores_into_arrays)."""

    @devalloc.kernel
    def mark_ends(arena, sizes, marks):
        t = cuda.grid(1)
        buf = arena.alloc(sizes[t], np.uint8)
        if buf.size > 0:
            buf[0] = marks[t]
            buf[buf.size - 1] = marks[t]

    ptx = mark_ends.ptx(types.int64[::1], types.int64[::1], strategy=strategy, cc=CC)
    byte_stores = [line for line in ptx.splitlines() if line.strip().startswith("st.global.u8")]
    assert len(byte_stores) == 2, byte_stores


@pytest.mark.ptx
def test_bad_dtype_is_a_typing_error_naming_what_arrived():
    @devalloc.kernel
    def bad(arena, out):
        out[0] = arena.alloc(4, out).size

    with pytest.raises(Exception, match="dtype must be a NumPy number or bool type"):
        bad.ptx(types.float32[:], cc=CC)


@pytest.fixture(scope="module")
def one_alloc_cfg():
    @devalloc.kernel
    def one(arena, n, out):
        buf = arena.alloc(n, np.uint8)
        out[cuda.grid(1)] = arena.offset(buf)

    return Cfg(one.ptx(types.int64, types.int64[::1], cc=CC))


def _allocation(cfg):
    """Blocks of `one_alloc_cfg` where its allocation begins and where its result
    is stored (the offset the kernel writes)."""
    start = cfg.find("activemask")
    return start, cfg.find("st.global.u64", after=start)


@pytest.mark.ptx
def test_slab_hit_takes_no_global_atomic(one_alloc_cfg):
    cfg = one_alloc_cfg
    start, end = _allocation(cfg)
    # A path through a CAS on a slab word: a group that got its chunk from a slab.
    hits = cfg.path_counts(
        start, end, "atom.global", avoid=["membar.sys"], through="atom.shared.cas"
    )
    assert min(hits) == 0, hits


@pytest.mark.ptx
def test_the_fast_path_takes_no_atomic_at_all(one_alloc_cfg):
    """A whole warp asking alike: one plain shared load and store of its slab
    word, counted in registers: some path from the allocation to its result
    through that store has no atomic of any kind, shared or global."""
    cfg = one_alloc_cfg
    start, end = _allocation(cfg)
    plain = "st.volatile.shared"
    atomics = cfg.path_counts(start, end, "atom.", avoid=["membar.sys"], through=plain)
    assert min(atomics) == 0, atomics
    reductions = cfg.path_counts(start, end, "red.global", through=plain)
    assert min(reductions) == 0, reductions


# Paths that reach the end of the arena or wait for another warp: a CAS puts the
# cursor back, an exchange publishes a shard's next grant (or marks it spent), a
# sleep waits.
AWAY_FROM_THE_END = ["atom.global.cas", "atom.global.exch", "nanosleep"]


def _sharded_kernel():
    from devalloc import layout as L
    from devalloc.allocator import take_spread

    capacity, words, shard = L.CAPACITY, L.BLOCK_WORDS, L.BLOCK_SHARD

    def sharded(hdr, want, out):
        state = cuda.shared.array(words, types.int64)
        state[shard] = hdr[shard]  # (the block's shard, or 0: unknown to the compiler)
        out[0], out[1] = take_spread(hdr, state, 0, hdr[capacity], want, want, True)

    return sharded


@pytest.mark.ptx
def test_a_sharded_take_is_one_atomic_on_its_shard_or_on_the_cursor():
    """`take_spread`, away from a grant's refill and the end of the arena: one
    global atomic, whichever word it goes to (the block's shard, or the cursor for
    a small launch or a large request); the refill, two and the exchange."""
    from devalloc.numba_compat import compiling_for

    with compiling_for(CC):
        ptx, _ = cuda.compile_ptx(
            _sharded_kernel(), (types.int64[::1], types.int64, types.int64[::1]), cc=CC
        )
    cfg = Cfg(ptx)
    end = next(i for i, block in enumerate(cfg.blocks) if block and block[-1] == "ret;")
    assert cfg.path_counts(0, end, "atom.global", avoid=AWAY_FROM_THE_END) == {1}
    refills = cfg.path_counts(
        0, end, "atom.global.add", avoid=["atom.global.cas", "nanosleep"],
        through="atom.global.exch",
    )  # fmt: skip
    assert 2 in refills, refills  # the shard's add, the cursor's add, then the exchange


def _chunk_kernel(direct, owned):
    from devalloc import layout as L
    from devalloc.allocator import take_chunk

    words, capacity = L.BLOCK_WORDS, L.CAPACITY

    def chunk(hdr, granules, out):
        state = cuda.shared.array(words, types.int64)
        out[0] = take_chunk(
            hdr, state, 0, 0, hdr[capacity], 256, 12, granules, False, direct, owned
        )

    return chunk


@pytest.mark.ptx
@pytest.mark.parametrize("owned", [False, True], ids=["group", "whole-warp"])
@pytest.mark.parametrize("direct", [False, True], ids=["warp_slab", "bump"])
def test_a_chunk_takes_at_most_one_global_atomic(direct, owned):
    """One group's chunk, on its way through the slabs (without waiting for another
    warp and without the end of the arena): none from a slab, one to refill. A
    whole warp, which refills its slab without the lock, too."""
    from devalloc.numba_compat import compiling_for

    chunk = _chunk_kernel(direct, owned)
    with compiling_for(CC):
        ptx, _ = cuda.compile_ptx(chunk, (types.int64[::1], types.int64, types.int64[::1]), cc=CC)
    cfg = Cfg(ptx)
    end = next(i for i, block in enumerate(cfg.blocks) if block and block[-1] == "ret;")
    # (Away from a shard's grant refill and a spent shard, which exchange its word.)
    counts = cfg.path_counts(0, end, "atom.global", avoid=AWAY_FROM_THE_END)
    # (bump's whole warp always refills: its slab is a tail the warp has looked at)
    assert counts == ({1} if direct and owned else {0, 1}), counts


@pytest.mark.ptx
@pytest.mark.parametrize("direct", [False, True], ids=["warp_slab", "bump"])
def test_a_lane_alone_takes_one_global_atomic_and_at_most_one_shared_cas(direct):
    """`take_alone` (a lane alone, its warp's first request): away from the end
    of the arena, one atomic on the cursor, or none where it leaves the request
    to the general path; in shared memory, at most the CAS that makes a small
    request's unit's rest the block's slab (``warp_slab`` only), none of the
    general path's locks."""
    from devalloc import layout as L
    from devalloc.allocator import take_alone
    from devalloc.numba_compat import compiling_for

    words, capacity, tally_words = L.BLOCK_WORDS, L.CAPACITY, L.TALLY_WORDS

    def alone(hdr, nbytes, out):
        state = cuda.shared.array(words, types.int64)
        tally = cuda.local.array(tally_words, types.int64)
        tally[0] = tally[1] = 0
        out[0] = take_alone(hdr, state, tally, 0, 0, hdr[capacity], 256, nbytes, direct)
        out[1] = tally[0] + tally[1]

    with compiling_for(CC):
        ptx, _ = cuda.compile_ptx(alone, (types.int64[::1], types.int64, types.int64[::1]), cc=CC)
    cfg = Cfg(ptx)
    end = next(i for i, block in enumerate(cfg.blocks) if block and block[-1] == "ret;")
    counts = cfg.path_counts(0, end, "atom.global", avoid=AWAY_FROM_THE_END)
    assert counts == {0, 1}, counts
    shared = {0} if direct else {0, 1}
    assert cfg.path_counts(0, end, "atom.shared") == shared
    assert cfg.path_counts(0, end, "atom.shared.cas") == shared


@pytest.mark.ptx
def test_global_atomics_outside_failure_reports_only_move_the_cursor(one_alloc_cfg):
    cfg = one_alloc_cfg
    found = {
        line.split()[0]
        for i, block in enumerate(cfg.blocks)
        if not cfg.count(i, "membar.sys")  # the block's failure report, at its exit
        for line in block
        if line.startswith(("atom.global", "red."))
    }
    # The cursor: taken from, put back after running past the end; the block's
    # allocation count, flushed at its exit. (`warp_slab` has no cursor shards,
    # whose grant words `bump` also exchanges: see the sharded test above.)
    assert found == {"atom.global.add.u64", "atom.global.cas.b64", "red.global.add.u64"}, found


@pytest.mark.ptx
def test_the_ballot_is_a_non_negative_mask_as_in_the_simulator():
    """Numba types `cuda.ballot_sync` as int32, so a ballot holding lane 31 is
    negative; mixed into int64 arithmetic it sign-extends, and its popcount is
    32 too many (seen on the H200: every allocation of a partial warp holding
    lane 31 counted 32 more). devalloc's ballot is the simulator's: 0 to 2**32-1."""
    from devalloc.layout import FULL_MASK
    from devalloc.numba_compat import compiling_for
    from devalloc.warp import ballot_sync

    def lanes(out):
        out[0] = ballot_sync(FULL_MASK, cuda.laneid == 31)

    with compiling_for(CC):
        cuda.compile_ptx(lanes, (types.int64[::1],), cc=CC)
    for signature in ballot_sync.nopython_signatures:  # this one, and any compiled before
        returned = signature.return_type
        assert isinstance(returned, types.Integer)
        assert returned.bitwidth == 64 or not returned.signed, signature
