"""Copies of the library measured side by side in one GPU run: the allocator's
figures that its hot path decides, for variants of the code.

    python benchmarks/variants.py make NAME [SRC]    # out/v_NAME: SRC's devalloc/, kernels/,
                                                     # benchmarks/ (SRC: this checkout)
    python benchmarks/variants.py run out/v_A out/v_B ...   # on the GPU; writes $OUT/variants.json

Edit a copy, then run them all in one device call (carry ``out``): each variant
is measured in a process of its own, in turns, each against the baselines in
its own process (a kernel allocating nothing against a plain one, single-shot
against preallocated, one store against packed stores; the hand-written slab as
the machine's yardstick). VARIANT_QUICK=1 keeps only the launch-shaped figures
(nothing and single-shot), VARIANT_HOT_PATH=1 only the allocation loops (an A/B
of the hot path; name a variant twice to alternate them), VARIANT_TWIN=1 only
Gallatin's one-size test shape (`device_peers.devalloc_twin`, 16 and 64 B, both
strategies; the sixteenth run's attribution of the block exit), VARIANT_FRAME=1 only
the pipeline's captured frame, devalloc-graph against static-graph (issue 9).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make(name, source=ROOT):
    target = ROOT / "out" / f"v_{name}"
    shutil.rmtree(target, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "results")
    for part in ("devalloc", "kernels", "benchmarks", "examples"):
        shutil.copytree(Path(source) / part, target / part, ignore=ignore)
    print(target)


def measure():
    """This process's figures (run inside a variant's copy)."""
    import numpy as np
    from numba import cuda

    import devalloc
    import measure as M
    from kernels import bench as K

    figures = {}
    if os.environ.get("VARIANT_HOT_PATH"):  # only the allocation loops: A/B of the hot path
        return hot_path(figures, M, reps=15)
    if os.environ.get("VARIANT_TWIN"):  # only Gallatin's test shape
        return one_each(figures, reps=5)
    if os.environ.get("VARIANT_FRAME"):  # only the captured pipeline frame
        return captured_frame(figures, M, reps=15)
    out = cuda.to_device(np.zeros(1, np.int64))
    blocks, block = M.grid(1 << 20)
    with devalloc.Arena(1 << 20) as arena:
        launches = [
            lambda: K.launch_only[blocks, block](arena, out),
            lambda: K.plain_launch[blocks, block](out),
        ]
        if hasattr(K, "launch_may_allocate"):  # the full wrapper, allocating nothing
            launches.append(lambda: K.launch_may_allocate[blocks, block](arena, out))
        figures["nothing_1M_us"] = [ms * 1e3 for ms in M.interleaved_ms(launches, reps=9)]
    for threads in (10_000, 100_000, 1 << 20):
        own, pre, *_ = M.single_shot_ms(threads, reps=9)  # (copies before 96d25fc: two)
        figures[f"single_shot_{threads}"] = [own * 1e3, pre * 1e3, own / pre]
    for threads in (100_000, 1 << 20):  # (bump takes through cursor shards from 1024 warps)
        own, pre, *_ = M.single_shot_ms(threads, reps=9, strategy="bump")
        figures[f"single_shot_bump_{threads}"] = [own * 1e3, pre * 1e3, own / pre]
    if os.environ.get("VARIANT_QUICK"):  # attribution only: the launch-shaped figures
        return figures
    hot_path(figures, M, reps=7)
    own, packed = M.with_store_ms("warp_slab", 540_000, 64, 16)
    figures["with_store_16B"] = [own, packed, own / packed]
    rate = M.allocation_rate("bump", 1 << 20, 64, 16, reps=7)
    figures["bump_16B_G_per_s"] = rate["allocs_per_s"] / 1e9
    return one_each(figures, reps=3)


def one_each(figures, reps):
    """Gallatin's one-size test, devalloc's side of it (G allocations/s)."""
    import device_peers as P

    for strategy in ("warp_slab", "bump"):
        for size in (16, 64):
            count = P.gallatin_threads(size)
            got = P.devalloc_twin(strategy, size, count, True, True, reps=reps)
            figures[f"one_each_{strategy}_{size}B_G_per_s"] = count / got["ms"] / 1e6
    return figures


def captured_frame(figures, M, reps):
    """GPU us a frame of the pipeline's two graph modes at 1080p and 4K, and of
    the same frame with its lists placed by a hand-written counter
    (`probe_graph.CounterGraph`), replayed in batches queued behind a spin
    kernel, the three taking turns; and whether their last frames' histograms
    and overlays agree."""
    from functools import partial

    import numpy as np
    from probe_graph import CounterGraph, graph_modes

    for width, height in ((1920, 1080), (3840, 2160)):
        camera, out, dev, static = graph_modes(height, width)
        counter = CounterGraph(camera, out, height, width)
        for _ in range(3):
            counter.process()
        seen = []
        for process in (dev.process, static.process, counter.process):
            out.hist.copy_to_device(np.full(out.hist.shape, -1, out.hist.dtype))  # poisoned
            out.overlay.copy_to_device(np.full(out.overlay.shape, 7, out.overlay.dtype))
            process()
            seen.append((out.hist.copy_to_host(), out.overlay.copy_to_host()))
        same = all(np.array_equal(a, b) for other in seen[1:] for a, b in zip(seen[0], other))
        graphs = [partial(static.graph.launch, 0), partial(counter.graph.launch, 0)]
        own, base, by_counter = M.interleaved_ms([dev.graph.replay, *graphs], reps)
        dev.arena.check()
        figures[f"frame_{height}p_us"] = [own * 1e3, base * 1e3, own / base, same]
        # the counter's frame: us, against static-graph; devalloc-graph against it
        ratios = [by_counter / base, own / by_counter]
        figures[f"frame_{height}p_counter_us"] = [by_counter * 1e3, *ratios]
        host_figures(figures, f"{height}p", dev, static, reps, counter)
    return figures


def host_figures(figures, size, dev, static, reps, counter=None, batch=50):
    """The host's share of a captured frame, devalloc-graph against static-graph
    (medians of `reps` batches of `batch` calls, the two taking turns):
    wall_us, a whole frame as the pipeline runs it (replay and check, launch
    and synchronize; wall_counter_us, the counter's frame so); queue_us, the
    host time of the replay or launch alone
    (the GPU still busy with earlier ones); wait_us, ``arena.check()`` or
    ``cuda.synchronize()`` with nothing left to wait for."""
    import statistics
    import time

    from numba import cuda

    pairs = {
        "wall_us": (dev.process, static.process),
        "queue_us": (dev.graph.replay, lambda: static.graph.launch(0)),
        "wait_us": (dev.arena.check, cuda.synchronize),
    }
    if counter is not None:  # the hand-written counter's frame, launch and synchronize
        pairs["wall_counter_us"] = (counter.process, static.process)
    for name, calls in pairs.items():
        seen = [[], []]
        for _ in range(reps):
            for call, times in zip(calls, seen):
                cuda.synchronize()
                start = time.perf_counter()
                for _ in range(batch):
                    call()
                times.append((time.perf_counter() - start) / batch * 1e6)
                cuda.synchronize()
        own, base = (statistics.median(times) for times in seen)
        figures[f"{name}_{size}"] = [own, base, own - base]


def hot_path(figures, M, reps):
    """The allocation loops' rates, with the hand-written slab as the yardstick."""
    for name, allocator, threads, size in (
        ("sustained_16B", "warp_slab", 1 << 20, 16),
        ("sustained_mixed", "warp_slab", 100_000, M.MIXED),
        ("hand_slab_16B", "hand_slab", 1 << 20, 16),
    ):
        rate = M.allocation_rate(allocator, threads, 64, size, reps=reps)
        figures[name + "_G_per_s"] = rate["allocs_per_s"] / 1e9
    return figures


def run(variants):
    results = {}
    for variant in variants:
        variant = Path(variant).resolve()
        env = dict(os.environ, PYTHONPATH=f"{variant}:{os.environ.get('PYTHONPATH', '')}")
        code = "import sys, json; sys.path.insert(0, 'benchmarks'); import variants; "
        code += "print('FIGURES', json.dumps(variants.measure()))"
        done = subprocess.run([sys.executable, "-c", code], cwd=variant, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        line = next((x for x in done.stdout.splitlines() if x.startswith("FIGURES ")), None)
        turn = sum(key.split(" ")[0] == variant.name for key in results) + 1
        key = variant.name if turn == 1 else f"{variant.name} (turn {turn})"  # named twice
        if line is None:
            results[key] = {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
        else:
            results[key] = json.loads(line[len("FIGURES ") :])
        print(key, json.dumps(results[key]), flush=True)
    out = Path(os.environ.get("OUT", ROOT / "out")) / "variants.json"
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("make", "run"):
        sys.exit(__doc__)
    if sys.argv[1] == "make":
        make(*sys.argv[2:4])
    else:
        run(sys.argv[2:])
