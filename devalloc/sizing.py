"""Host side: an arena that sizes itself (`Arena.run`), by the rule of frame pools:
measure the first frames, settle at 1.5 times their peak, and grow (and run the
frame again) when one overflows. Every size is one device allocation, so the
number of them stays small: one to start, one to settle, one per growth, and
growth is geometric."""

import math
import operator
from dataclasses import dataclass

from .errors import ArenaOverflowError, DevallocValueError
from .layout import MAX_CAPACITY

__all__ = ["Sizing", "run_sized"]

SIZE_STEP = 64 << 10  # settled sizes are whole multiples of this
SETTLE_SLACK = 0.1  # settle only if the arena is this much (relatively) off its target


@dataclass(frozen=True)
class Sizing:
    """How `Arena.run` sizes an arena.

    Attributes
    ----------
    headroom : float, default 1.5
        The arena settles at this many times the peak of the measured frames.
    growth : float, default 2.0
        An overflowing frame runs again in an arena this many times larger.
    measure : int, default 3
        Frames measured (at the arena's size then) before it settles.
    max_nbytes : int or None
        The arena never grows past this; an overflow at it is raised.
    """

    headroom: float = 1.5
    growth: float = 2.0
    measure: int = 3
    max_nbytes: int | None = None

    def __post_init__(self):
        if not _finite(self.headroom) or not self.headroom >= 1:
            raise DevallocValueError(
                f"headroom must be a finite number, 1 or more (got {self.headroom!r})"
            )
        if not _finite(self.growth) or not self.growth > 1:
            raise DevallocValueError(
                f"growth must be a finite number, more than 1 (got {self.growth!r})"
            )
        measure = _int_or_none(self.measure)
        if measure is None or measure < 1:
            raise DevallocValueError(f"measure must be an int, 1 or more (got {self.measure!r})")
        max_nbytes = _int_or_none(self.max_nbytes)
        if self.max_nbytes is not None and (max_nbytes is None or max_nbytes <= 0):
            raise DevallocValueError(
                f"max_nbytes must be a positive int or None (got {self.max_nbytes!r})"
            )
        object.__setattr__(self, "measure", measure)  # (NumPy ints as plain ones)
        object.__setattr__(self, "max_nbytes", max_nbytes)

    def grown(self, capacity, overflow):
        """The size to run a frame again in after `overflow` (an
        `ArenaOverflowError`) in an arena of `capacity` bytes, or None when no
        larger arena would do (an invalid request, or `max_nbytes` reached)."""
        if not 0 <= overflow.requested <= MAX_CAPACITY:  # invalid, or more than any arena holds
            return None
        larger = max(math.ceil(capacity * self.growth), capacity + overflow.requested)
        larger = min(larger, MAX_CAPACITY)
        if larger <= capacity:
            return None
        if self.max_nbytes is not None:
            if capacity >= self.max_nbytes:
                return None
            larger = min(larger, self.max_nbytes)
        return larger


def _int_or_none(value):
    """`value` as an int if it is one (a NumPy int too, not a bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _finite(number):
    is_number = isinstance(number, (int, float)) and not isinstance(number, bool)
    return is_number and math.isfinite(number)


def run_sized(arena, frame, args, kwargs):
    """`Arena.run`: one frame, run again in a larger arena while it overflows."""
    while True:
        try:
            with arena.frame():
                result = frame(*args, **kwargs)
            break
        except ArenaOverflowError as overflow:
            if not arena._overflowed(overflow):  # another arena's: growing this one won't help
                raise
            larger = arena.sizing.grown(arena.capacity, overflow)
            if larger is None:
                raise
            try:
                arena.resize(larger)
            except MemoryError as error:
                raise error from overflow
            arena._measured = 0  # the peaks start again at the new size
    if not arena._settled:
        arena._measured += 1
        if arena._measured >= arena.sizing.measure:
            _settle(arena)
    return result


def _settle(arena):
    """After the measured frames: `headroom` times their peak, if that is off."""
    arena._settled = True
    sizing = arena.sizing
    target = math.ceil(arena.stats().peak_bytes * sizing.headroom / SIZE_STEP) * SIZE_STEP
    if sizing.max_nbytes is not None:
        target = min(target, sizing.max_nbytes)
    target = max(target, SIZE_STEP)
    if abs(target - arena.capacity) > SETTLE_SLACK * target:
        arena.resize(target)
