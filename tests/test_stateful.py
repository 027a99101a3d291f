"""The whole host API against a reference model (hypothesis state machine).

Random programs of launches with random sizes (zero, negative, over-sized, huge),
frames (some left by an exception), resets, stream switches, checks, stats and
closes. After every step: live allocations are disjoint, inside the arena,
aligned as DESIGN.md says and intact; a request fails only when it cannot fit;
every overflow is reported exactly once, when and as the model says; stats
equal the model.
"""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from numba import cuda

import devalloc
from devalloc import layout as L
from helpers import poisoned


@devalloc.kernel
def program_step(arena, sizes, marks, offsets, lengths):
    """Thread t asks sizes[t, j] bytes in turn; marks the first and last byte of
    each allocation with marks[t, j] and records where it got it."""
    t = cuda.grid(1)
    if t < sizes.shape[0]:
        for j in range(sizes.shape[1]):
            buf = arena.alloc(sizes[t, j], np.uint8)
            lengths[t, j] = buf.size
            offsets[t, j] = arena.offset(buf)
            if buf.size > 0:
                buf[0] = marks[t, j]
                buf[buf.size - 1] = marks[t, j]


CAPACITIES = [512, 4096, 1 << 14]


def request_sizes(capacity):
    return st.one_of(
        st.just(0),
        st.integers(-300, -1),
        st.integers(1, 64),
        st.integers(65, 700),
        st.integers(1, capacity),
        st.integers(capacity + 1, 4 * capacity),
        st.just(1 << 40),
    )


class ArenaProgram(RuleBasedStateMachine):
    strategy = "warp_slab"

    @initialize(capacity=st.sampled_from(CAPACITIES), align=st.sampled_from([16, 64, 256]))
    def open_arena(self, capacity, align):
        self.reopen(capacity, align)

    @precondition(lambda self: self.arena.closed)
    @rule(capacity=st.sampled_from(CAPACITIES), align=st.sampled_from([16, 64, 256]))
    def reopen(self, capacity, align):
        self.capacity, self.align = capacity, align
        self.arena = devalloc.Arena(capacity, strategy=self.strategy, align=align)
        self.streams = [0, cuda.stream(), cuda.stream()]
        self.frame = None
        self.live = []  # (offset, length, mark) of the allocations alive now
        self.launches_alive = 0  # launches whose slab tails are in the live region
        self.pending = []  # sizes that failed and have not been reported
        self.launches = self.resets = self.allocs = self.failed = 0
        self.dirty = False
        self.marks = 0

    def teardown(self):
        if getattr(self, "frame", None) is not None:
            self.frame.__exit__(KeyError, KeyError("teardown"), None)
        if getattr(self, "arena", None) is not None and not self.arena.closed:
            try:
                self.arena.close()
            except devalloc.ArenaOverflowError:
                pass

    # -- the model ------------------------------------------------------------------

    def expect_report(self, action, not_launched=None):
        """Run `action`; it raises the pending report, exactly, or nothing if none."""
        if not self.pending:
            return action()
        with pytest.raises(devalloc.ArenaOverflowError) as info:
            action()
        error = info.value
        assert (error.kernel, error.capacity) == ("program_step", self.capacity)
        assert (error.failed, error.requested) == (len(self.pending), max(self.pending))
        assert error.not_launched == not_launched
        self.pending = []
        return None

    def empty_live_region(self):
        self.live, self.launches_alive = [], 0
        if self.dirty:
            self.resets += 1
            self.dirty = False

    def slack(self):
        """Bytes the allocator may hold back from the model's live bytes: each
        launch's warp and block slab tails (warp_slab) or warp tail (bump), and
        the padding of aligned requests."""
        slab = 1 << L.log2_slab_for(self.capacity, 1, self.align)
        per_launch = 4 * slab if self.strategy == "warp_slab" else 2 * self.align
        return per_launch * (self.launches_alive + 1) + self.align * (len(self.live) + 16)

    # -- rules --------------------------------------------------------------------------

    @precondition(lambda self: not self.arena.closed)
    @rule(
        data=st.data(), lanes=st.integers(1, 40), calls=st.integers(1, 3), stream=st.integers(0, 2)
    )
    def launch(self, data, lanes, calls, stream):
        sizes = np.array(
            data.draw(
                st.lists(
                    st.lists(request_sizes(self.capacity), min_size=calls, max_size=calls),
                    min_size=lanes,
                    max_size=lanes,
                )
            ),
            np.int64,
        )
        marks = (np.arange(sizes.size).reshape(sizes.shape) + self.marks) % 251 + 1
        self.marks += sizes.size
        # Device arrays: numba-cuda copies host arrays on the default stream only.
        d_offsets = cuda.to_device(poisoned(sizes.shape, np.int64))
        d_lengths = cuda.to_device(poisoned(sizes.shape, np.int64))
        threads = 32 if lanes > 16 else lanes

        def go():
            program_step[-(-lanes // threads), threads, self.streams[stream]](
                self.arena, cuda.to_device(sizes), cuda.to_device(marks), d_offsets, d_lengths
            )
            return True

        launched = self.expect_report(go, not_launched="program_step") is not None
        offsets, lengths = d_offsets.copy_to_host(), d_lengths.copy_to_host()
        if not launched:
            assert (lengths == poisoned(1, np.int64)[0]).all()
            return
        self.launches += 1
        if self.frame is None:
            self.empty_live_region()
            self.resets += 1
        else:
            self.dirty = True
        self.launches_alive += 1
        self.check_launch(sizes, marks, offsets, lengths)
        if self.frame is None:
            self.live, self.launches_alive = [], 0

    def check_launch(self, sizes, marks, offsets, lengths):
        # A failure is plausible only if what lives now, with all this launch got,
        # leaves no room for it.
        live_bytes = sum(length for _, length, _ in self.live) + int(lengths[lengths > 0].sum())
        for (t, j), n in np.ndenumerate(sizes):
            got, at = int(lengths[t, j]), int(offsets[t, j])
            if n <= 0 or n > self.capacity:
                assert (got, at) == (0, -1), (n, got, at)
                if n != 0:
                    self.pending.append(int(n))
                    self.failed += 1
                continue
            if got == 0:  # failed: only when the arena is (nearly) full
                assert at == -1
                assert live_bytes + n > self.capacity - self.slack(), (n, live_bytes)
                self.pending.append(int(n))
                self.failed += 1
                continue
            assert got == n
            assert 0 <= at and at + n <= self.capacity, (at, n)
            assert at % (self.align if n >= self.align else L.GRANULE) == 0, (at, n)
            self.live.append((at, got, int(marks[t, j])))
            self.allocs += 1
        spans = sorted((at, at + length) for at, length, _ in self.live)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, "live allocations overlap"
        memory = self.arena.device_view(0, self.capacity, np.uint8).copy_to_host()
        for at, length, mark in self.live:
            assert memory[at] == mark and memory[at + length - 1] == mark, "damaged"

    @precondition(lambda self: not self.arena.closed and self.frame is None)
    @rule(check=st.booleans())
    def open_frame(self, check):
        self.frame = self.arena.frame(check=check)
        self.frame_checks = check
        self.frame.__enter__()

    @precondition(lambda self: self.frame is not None)
    @rule(raising=st.booleans())
    def exit_frame(self, raising):
        frame, self.frame = self.frame, None
        if raising:  # an exception in the frame's body: it still resets, reports nothing
            assert frame.__exit__(KeyError, KeyError("body"), None) is False
        elif self.frame_checks:
            self.expect_report(lambda: frame.__exit__(None, None, None))
        else:
            frame.__exit__(None, None, None)
        self.empty_live_region()

    @precondition(lambda self: not self.arena.closed)
    @rule(stream=st.integers(0, 2))
    def reset(self, stream):
        self.arena.reset(self.streams[stream] if stream else None)
        self.empty_live_region()

    @precondition(lambda self: not self.arena.closed)
    @rule()
    def check(self):
        self.expect_report(self.arena.check)

    @precondition(lambda self: not self.arena.closed)
    @rule()
    def stats(self):
        self.expect_report(self.arena.check)
        stats = self.arena.stats()
        assert (stats.total_allocs, stats.failed_allocs) == (self.allocs, self.failed)
        assert (stats.launches, stats.resets, stats.device_mallocs) == (
            self.launches,
            self.resets,
            1,
        )
        live_bytes = sum(length for _, length, _ in self.live)
        assert live_bytes <= stats.current_bytes <= self.capacity
        assert stats.current_bytes <= stats.peak_bytes <= self.capacity

    @precondition(lambda self: not self.arena.closed and self.frame is None)
    @rule()
    def close(self):
        self.expect_report(self.arena.close)
        assert self.arena.closed
        with pytest.raises(devalloc.ArenaClosedError):
            self.arena.check()

    @invariant()
    def reports_wait_for_their_moment(self):
        # Between steps, a pending report is still there (it is raised once, at its
        # moment, never earlier and never dropped).
        if not self.arena.closed:
            assert self.arena._reports.waiting() == bool(self.pending)


class BumpProgram(ArenaProgram):
    strategy = "bump"


RUN = settings(
    max_examples=30,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TestWarpSlabProgram = ArenaProgram.TestCase
TestWarpSlabProgram.settings = RUN
TestBumpProgram = BumpProgram.TestCase
TestBumpProgram.settings = RUN
