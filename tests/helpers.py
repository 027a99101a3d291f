"""Kernels and checks shared by the test modules."""

import itertools

import numpy as np
from numba import cuda

import devalloc

STRATEGIES = list(devalloc.STRATEGIES)
NO_CALL = -1  # in a request table: this lane makes no more calls
GRANULE = 16


def poisoned(shape, dtype):
    """An output array filled with a value no correct kernel writes (never zero)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.kind == "c":
        value = np.nan
    elif dtype.kind == "b":
        value = True
    else:
        value = np.iinfo(dtype).min + 0x5A if dtype.kind == "i" else np.iinfo(dtype).max - 0x5A
    return np.full(shape, value, dtype)


def pattern(lane, call):
    return (lane * 7 + call * 13 + 1) & 0xFF


@devalloc.kernel
def record_allocs(arena, requests, offsets, lengths):
    """Lane t makes requests[t, j] byte allocations in turn (stopping at NO_CALL),
    fills each with a pattern, and records its offset and length."""
    t = cuda.grid(1)
    if t < requests.shape[0]:
        for j in range(requests.shape[1]):
            n = requests[t, j]
            if n == NO_CALL:
                break
            buf = arena.alloc(n, np.uint8)
            lengths[t, j] = buf.size
            offsets[t, j] = arena.offset(buf)
            for b in range(buf.size):
                buf[b] = (t * 7 + j * 13 + 1) & 0xFF


def run_requests(arena, requests, threads=64):
    """Launch `record_allocs` over a request table; returns (offsets, lengths)."""
    requests = np.ascontiguousarray(requests, dtype=np.int64)
    offsets = poisoned(requests.shape, np.int64)
    lengths = poisoned(requests.shape, np.int64)
    blocks = -(-requests.shape[0] // threads)
    d_offsets, d_lengths = cuda.to_device(offsets), cuda.to_device(lengths)
    record_allocs[blocks, threads](arena, cuda.to_device(requests), d_offsets, d_lengths)
    return d_offsets.copy_to_host(), d_lengths.copy_to_host()


def arena_bytes(arena):
    return arena.device_view(0, arena.capacity, np.uint8).copy_to_host()


def check_allocations(arena, requests, offsets, lengths, *, all_succeed=True):
    """Every allocation inside the arena, aligned, disjoint from all others, and
    holding what its lane wrote. Returns the number that succeeded."""
    align = arena.align
    memory = arena_bytes(arena)
    spans = []
    for (lane, call), n in np.ndenumerate(requests):
        if (requests[lane, : call + 1] == NO_CALL).any():
            continue  # this lane stopped calling
        got = int(lengths[lane, call])
        if n <= 0 or got == 0:
            assert got == 0, f"lane {lane} call {call}: asked {n} bytes, got {got}"
            assert not (all_succeed and n > 0), f"lane {lane} call {call}: {n} bytes failed"
            continue
        assert got == n, f"lane {lane} call {call}: asked {n} bytes, got {got}"
        start = int(offsets[lane, call])
        assert 0 <= start and start + n <= arena.capacity, (lane, call, start, n)
        need = align if n >= align else GRANULE
        assert start % need == 0, f"{n}-byte allocation at offset {start} is not {need}-aligned"
        assert (memory[start : start + n] == pattern(lane, call)).all(), (lane, call, start)
        spans.append((start, start + n))
    spans.sort()
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, f"allocations overlap: one ends at {end}, the next starts at {start}"
    return len(spans)
