"""Simulator side: stand-ins for the warp primitives devalloc's allocator uses
(`warp`'s twins).

Numba's CUDA simulator runs every thread of a block as a Python thread and has
no warp intrinsics. These stand-ins give the allocator the real semantics:

* ``*_sync(mask, ...)`` wait for exactly the lanes named in ``mask`` to reach a
  collective of the same kind and mask, then all of them get the result.
  Naming a lane that has exited, or leaving oneself out of ``mask``, raises
  `WarpError` (undefined behaviour on the hardware).
* ``activemask()`` waits until the warp is *quiescent*: every lane is at an
  ``activemask`` rendezvous, waiting in a collective, blocked in
  ``syncthreads``, or finished. It returns the lanes waiting at the same call
  site (the same Python call stack, as the hardware would see one PC). The
  result is deterministic and follows divergence.

Lanes are known to the stand-ins only inside kernels launched through
`devalloc.kernel`, which registers each simulated thread on entry and marks it
finished on exit.
"""

import math
import sys
import threading
import time

from ..layout import FULL_MASK, WARP_SIZE

_POLL_SECONDS = 0.002  # lanes blocked in syncthreads change state without telling us

__all__ = [
    "WarpError",
    "activemask",
    "ballot_sync",
    "enter_lane",
    "exit_lane",
    "lanemask_lt",
    "nap",
    "pause",
    "shfl_sync",
    "shfl_up_sync",
]


class WarpError(RuntimeError):
    """A warp primitive was used in a way that is undefined on the hardware."""


class _Warp:
    def __init__(self, nlanes):
        self.nlanes = nlanes
        self.cond = threading.Condition()
        self.threads = {}  # lane -> simulator thread
        self.finished = set()
        self.waiting = {}  # lane -> (kind, key, value): key is the call site or the mask
        self.results = {}  # lane -> value handed back by a completed collective
        self.failure = None  # misuse seen by one lane; every waiting lane reports it

    def fail(self, message):
        if self.failure is None:
            self.failure = message
        self.cond.notify_all()
        raise WarpError(self.failure)

    def _running(self, lane):
        thread = self.threads.get(lane)
        if thread is None:  # not started yet
            return True
        if lane in self.finished or lane in self.waiting:
            return False
        return not getattr(thread, "syncthreads_blocked", False)

    def quiescent(self):
        return not any(self._running(lane) for lane in range(self.nlanes))

    def release(self, lanes, result_of):
        for lane in lanes:
            self.results[lane] = result_of(lane)
            del self.waiting[lane]
        self.cond.notify_all()

    def release_activemasks(self):
        groups = {}
        for lane, (kind, site, _) in self.waiting.items():
            if kind == "activemask":
                groups[site] = groups.get(site, 0) | (1 << lane)
        for mask in groups.values():
            self.release(_lanes(mask), lambda _lane, mask=mask: mask)
        return bool(groups)

    def describe(self):
        return ", ".join(
            f"lane {lane}: {kind}" + ("" if kind == "activemask" else f"(mask={key:#010x})")
            for lane, (kind, key, _) in sorted(self.waiting.items())
        )


_registry_lock = threading.Lock()


def enter_lane(warps):
    """Register the calling simulator thread as a lane; `warps` is the launch's table."""
    thread = threading.current_thread()
    threads_in_block = math.prod(thread._manager._block_dim)
    warp_index, lane = divmod(thread.thread_id, WARP_SIZE)
    key = (tuple(thread.blockIdx), warp_index)
    with _registry_lock:
        warp = warps.get(key)
        if warp is None:
            nlanes = min(WARP_SIZE, threads_in_block - warp_index * WARP_SIZE)
            warp = warps[key] = _Warp(nlanes)
    with warp.cond:
        warp.threads[lane] = thread
        warp.cond.notify_all()
    thread._devalloc_lane = (warp, lane)


def exit_lane():
    thread = threading.current_thread()
    warp, lane = thread._devalloc_lane
    with warp.cond:
        warp.finished.add(lane)
        warp.waiting.pop(lane, None)
        warp.cond.notify_all()


def _current_lane():
    thread = threading.current_thread()
    if getattr(thread, "abort", False):
        raise RuntimeError("simulated kernel aborted by another thread's exception")
    try:
        return thread._devalloc_lane
    except AttributeError:
        raise WarpError(
            "devalloc's simulated warp primitives work only in kernels launched "
            "through @devalloc.kernel"
        ) from None


def _lanes(mask):
    return [lane for lane in range(WARP_SIZE) if mask >> lane & 1]


def _call_site():
    frame = sys._getframe(2)
    site = []
    while frame is not None:
        site.append((frame.f_code, frame.f_lasti))
        frame = frame.f_back
    return tuple(site)


def _wait(warp):
    warp.cond.wait(_POLL_SECONDS)
    if warp.failure is not None:
        raise WarpError(warp.failure)
    if getattr(threading.current_thread(), "abort", False):
        raise RuntimeError("simulated kernel aborted by another thread's exception")


def _deadlocked(warp):
    """Quiescent, with nothing that can be released: the hardware would hang."""
    if not warp.quiescent() or warp.release_activemasks():
        return False
    return not any(_complete(warp, key) for kind, key, _ in list(warp.waiting.values()))


def _complete(warp, mask):
    """Release the collective on `mask` if every lane it names has arrived at it."""
    members = _lanes(mask)
    arrived = [warp.waiting.get(lane) for lane in members]
    if any(a is None or a[0] == "activemask" or a[1] != mask for a in arrived):
        return False
    kinds = {a[0] for a in arrived}
    if len(kinds) != 1:
        return False
    kind = next(iter(kinds))
    values = {lane: a[2] for lane, a in zip(members, arrived)}
    if kind == "ballot":
        ballot = sum(1 << lane for lane, pred in values.items() if pred)
        warp.release(members, lambda _lane: ballot)
    else:
        sources = {lane: value[1] for lane, value in values.items()}
        for lane, src in sources.items():
            if src not in values:
                warp.fail(
                    f"lane {lane} shuffles from lane {src}, which is not in mask {mask:#010x}"
                )
        warp.release(members, lambda lane: values[sources[lane]][0])
    return True


def _collective(kind, mask, value):
    warp, lane = _current_lane()
    mask = int(mask) & FULL_MASK
    with warp.cond:
        if not mask >> lane & 1:
            warp.fail(f"lane {lane} called {kind}_sync with mask {mask:#010x}, which leaves it out")
        warp.waiting[lane] = (kind, mask, value)
        while lane not in warp.results:
            for other in _lanes(mask):
                if other >= warp.nlanes or other in warp.finished:
                    warp.fail(
                        f"lane {lane} called {kind}_sync with mask {mask:#010x}, "
                        f"which names lane {other}, and that lane has exited"
                    )
            if not _complete(warp, mask):
                if _deadlocked(warp):
                    warp.fail(f"warp deadlocked in collectives: {warp.describe()}")
                _wait(warp)
        return warp.results.pop(lane)


def activemask():
    """The lanes of this warp converged with the caller (see the module docstring)."""
    warp, lane = _current_lane()
    site = _call_site()
    with warp.cond:
        warp.waiting[lane] = ("activemask", site, None)
        warp.cond.notify_all()
        while lane not in warp.results:
            if warp.quiescent() and not warp.release_activemasks():
                if _deadlocked(warp):
                    warp.fail(f"warp deadlocked in collectives: {warp.describe()}")
            if lane not in warp.results:
                _wait(warp)
        return warp.results.pop(lane)


def ballot_sync(mask, predicate):
    return _collective("ballot", mask, bool(predicate))


def syncwarp(mask):
    """Wait for the lanes of `mask` (a collective like the others)."""
    _collective("ballot", mask, True)


def shfl_sync(mask, value, src_lane):
    return _collective("shfl", mask, (value, int(src_lane) % WARP_SIZE))


def shfl_up_sync(mask, value, delta):
    _, lane = _current_lane()
    src = lane - int(delta)
    return _collective("shfl", mask, (value, src if src >= 0 else lane))


def lanemask_lt():
    """The lanes below the caller's, as a bit mask."""
    _, lane = _current_lane()
    return (1 << lane) - 1


def pause():
    """Let the other simulated threads run while this one waits for them."""
    _current_lane()  # stops a lane whose kernel was aborted
    time.sleep(0)


def nap():
    """`pause`: the simulator's threads sleep alike."""
    pause()
