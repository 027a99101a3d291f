"""Does code a kernel never runs cost its blocks time? (issues 8 and 9)

In run 40 (2026-12-07, an H100) the captured 1080p frame's `arena_lists` ran
4.5 us faster with the allocator cut to the path it takes (8,904 SASS
instructions down to 2,112), and a kernel that allocates nothing ran 2.6 us
faster at 1 M threads without the block's exit, whose path jumps twice over
tens of KB of allocator code. Both costs grew with the number of blocks. This
probe asks the question without devalloc: a plain kernel (two of its threads
add 1 to ``out[0]``) against the same kernel with a block of code it never
runs, before its work or between two steps of it, small (~1.6 K SASS
instructions) or large (~9 K, the size of `arena_lists`), timed in turns
(`measure.interleaved_ms`) at 10 K, 100 K and 1 M threads. (ptxas, sm_90: the
large block between the steps puts the second 140 KB after the first.)

    python benchmarks/probe_icache.py [--out probe-icache.json]
    python benchmarks/probe_icache.py --sass DIR   # no GPU: each kernel's PTX, for ptxas
"""

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from numba import cuda, float32

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DEAD_CALLS = {"small": 24, "large": 136}  # math calls never run: ~1.6 K, ~9 K SASS instructions


def dead_code(calls):
    """Source lines of a block of `calls` distinct math calls on `x`."""
    names = ("sin", "exp", "log1p", "cos")
    return [f"x = math.{names[i % 4]}(x + float32({i + 1} * 0.37))" for i in range(calls)]


def make_kernel(where, calls):
    """The plain kernel (thread 0, then thread 1, adds 1 to ``out[0]``) with
    `calls` dead math calls before its work or between its two steps
    (`where`), behind a branch on the array's size that is never taken. Dead
    code between two steps is what a devalloc kernel looks like: the user's
    code, the allocator's general path, then the block's exit."""
    dead = ["if out.shape[0] == 0:", "    x = float32(t)"]
    dead += ["    " + line for line in dead_code(calls)] + ["    out[0] = int(x)"]
    first, second = ["if t == 0:", "    out[0] += 1"], ["if t == 1:", "    out[0] += 1"]
    steps = {"before": dead + first + second, "between": first + dead + second}[where]
    source = "def probe(out):\n" + "".join(f"    {line}\n" for line in ["t = cuda.grid(1)", *steps])
    namespace = {"cuda": cuda, "math": math, "float32": float32}
    exec(source, namespace)
    return namespace["probe"]


def kernels():
    """name -> Python function of each probe kernel (the plain one first)."""
    found = {"plain": make_kernel("before", 0)}
    for size, calls in DEAD_CALLS.items():
        for where in ("before", "between"):
            found[f"dead {size} {where}"] = make_kernel(where, calls)
    return found


def write_ptx(directory):
    from numba import types

    from devalloc.numba_compat import compiling_for

    Path(directory).mkdir(parents=True, exist_ok=True)
    for name, func in kernels().items():
        with compiling_for((9, 0)):
            ptx, _ = cuda.compile_ptx(func, (types.int64[:],), cc=(9, 0))
        path = Path(directory) / (name.replace(" ", "_") + ".ptx")
        path.write_text(ptx)
        print(path)


def measure(reps):
    import measure as M

    out = cuda.to_device(np.zeros(1, np.int64))
    compiled = {name: cuda.jit(func) for name, func in kernels().items()}
    rows = {}
    for threads in (10_000, 100_000, 1 << 20):
        blocks, block = M.grid(threads)
        launches = [lambda k=k, at=(blocks, block): k[at](out) for k in compiled.values()]
        times = M.interleaved_ms(launches, reps=reps)
        plain = times[0]
        rows[threads] = {name: [ms * 1e3, ms / plain] for name, ms in zip(compiled, times)}
        print(threads, json.dumps(rows[threads]), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--sass", help="write each kernel's PTX (sm_90) to this folder")
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    if args.sass:
        write_ptx(args.sass)
        return
    import measure as M

    rows = {"environment": M.environment(), "us_and_ratio_to_plain": measure(args.reps)}
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
