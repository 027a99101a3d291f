"""Where the pipeline's devalloc-graph frame loses to static-graph (issue 9):
host time of a replay against a bare graph launch, GPU time of each graph
queued behind a spin kernel, and the kernels that differ, timed alone.

    python benchmarks/probe_graph.py [--size 1920x1080] [--out probe.json]
"""

import argparse
import cProfile
import io
import itertools
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import frame_pipeline as P  # noqa: E402
import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import devalloc  # noqa: E402
import measure as M  # noqa: E402
from kernels import bench as KB  # noqa: E402
from kernels import image as K  # noqa: E402


def tolerant(measure):
    """`measure`, returning None where it fails: a probe's one failed figure
    must not lose the others."""

    def measured(call):
        try:
            return measure(call)
        except Exception as error:
            print("failed:", repr(error))
            return None

    return measured


@tolerant
def host_us(call, n=400):
    """Median host time of `call`, the GPU idle before each (unlike
    `measure.host_us_per_launch`, which times batches)."""
    cuda.synchronize()
    times = []
    for _ in range(n):
        begin = time.perf_counter()
        call()
        times.append(time.perf_counter() - begin)
        cuda.synchronize()
    return statistics.median(times) * 1e6


@tolerant
def queued_gpu_us(call):
    return M.device_ms(call, reps=31, warmup=3, queued=True) * 1e3


def graph_modes(height, width):
    """The pipeline's two graph modes on one camera frame and one set of outputs,
    each frame captured (and run three times): (camera, out, dev, static)."""
    camera, out = P.Camera(height, width), P.Outputs(height, width)
    camera.frame(0)
    dev = P.DevallocGraph(camera, out, height, width)
    static = P.StaticGraph(camera, out, height, width)
    for _ in range(3):
        dev.process()
        static.process()
    return camera, out, dev, static


class CounterGraph(P.StaticGraph):
    """static-graph with its list stage written by hand for lists sized at run
    time, with no allocator: `counter_lists` places each tile's list with one
    atomic on a counter that a memset node zeroes at the frame's start. What
    dynamic sizing costs in this frame, for devalloc-graph to be read against.
    GPU only (the memset is a driver call)."""

    name = "counter-graph"

    def __init__(self, camera, out, height, width):
        super().__init__(camera, out, height, width)
        self.used = cuda.device_array(1, np.int64)

    def stages(self, stream=0):
        from cuda.bindings import driver as cu

        from devalloc.cuda_graphs import driver_call, stream_handle

        used = cu.CUdeviceptr(self.used.device_ctypes_pointer.value)
        driver_call(cu.cuMemsetD8Async(used, 0, 8, stream_handle(stream)), "cuMemsetD8Async")
        edges = P.edges_of(self.camera, self.buf, stream)
        buf = self.buf
        K.counter_lists[self.out.tiles, P.TILE_BLOCK, stream](
            edges, buf["blur"], self.used, self.points, buf["starts"], buf["counts"]
        )
        P.consume_lists(self.camera, self.out, buf, self.points, stream)
        return edges


def frame_sized_arena(dev):
    """An arena of the captured frame's size and strategy: the graph keeps its
    frame arrays in `dev.arena`, which leaves no room there for another frame's."""
    return devalloc.Arena(dev.arena.capacity, strategy=dev.arena.strategy)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1920x1080")
    parser.add_argument("--out")
    parser.add_argument("--kernels", action="store_true", help="only the kernels that differ")
    parser.add_argument("--once", action="store_true", help="each differing kernel once (ncu)")
    parser.add_argument("--parts", action="store_true", help="graphs of parts of the frame too")
    args = parser.parse_args()
    width, height = map(int, args.size.split("x"))
    camera, out, dev, static = graph_modes(height, width)
    rows = {}
    if args.once:  # for ncu: the differing kernels once eagerly, then each graph once
        kernel_figures(rows, dev, static, camera, out, once=True)
        dev.graph.replay()
        cuda.synchronize()
        static.graph.launch(0)
        cuda.synchronize()
        return
    if not args.kernels:
        graph_figures(rows, dev, static)
    kernel_figures(rows, dev, static, camera, out)
    if args.parts:
        part_figures(rows, dev, static, camera, out)
    print(json.dumps({k: v for k, v in rows.items() if k != "replay_profile"}, indent=1))
    print(rows.get("replay_profile", ""))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


def graph_figures(rows, dev, static):
    # The bare launches alternate the graph's two instances from the host's slot,
    # as replays do (an even count of them leaves the arena's slot as it was).
    instances = itertools.cycle((dev.arena._slot, 1 - dev.arena._slot))
    rows["host_us"] = {
        "devalloc replay": host_us(lambda: dev.graph.replay()),
        "devalloc bare cuGraphLaunch": host_us(
            lambda: dev.graph._recording.launch(0, next(instances))
        ),
        "static cuGraphLaunch": host_us(lambda: static.graph.launch(0)),
        "devalloc arena.check": host_us(lambda: dev.arena.check()),
    }
    rows["gpu_us_queued"] = {
        "devalloc graph": queued_gpu_us(lambda: dev.graph.replay()),
        "static graph": queued_gpu_us(lambda: static.graph.launch(0)),
    }
    profile = cProfile.Profile()
    cuda.synchronize()
    profile.enable()
    for _ in range(300):
        dev.graph.replay()
    profile.disable()
    cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
    rows["replay_profile"] = text.getvalue()


def part_figures(rows, dev, static, camera, out):
    """GPU time of graphs of parts of the frame, queued: the edge stages alone
    on frame arrays or on the static buffers, captured by `arena.capture()`
    (with its reset) or as a plain stream capture; and the devalloc frame with
    its edge stages on the static buffers. Each devalloc part in an arena of
    its own (`frame_sized_arena`): a graph keeps its frame arrays."""
    from devalloc.cuda_graphs import StreamCapture

    buf_s = static.buf
    at = (out.tiles, P.TILE_BLOCK)

    def devalloc_part(frame_arrays, lists):
        arena = frame_sized_arena(dev)
        with arena.capture() as graph:
            buf = P.allocate(dev.buffers, arena.empty)
            source = buf if frame_arrays else buf_s  # the edge stages' buffers
            edges = P.edges_of(camera, source, graph.stream)
            if lists:
                K.arena_lists[at](arena, edges, source["blur"], buf["table"])
                K.arena_consume[at](arena, buf["table"], camera.rgb, out.palette, out.hist,
                                    out.overlay)  # fmt: skip
        return graph.replay

    def static_part(lists):
        graph = StreamCapture()
        edges = P.edges_of(camera, buf_s, graph.stream)
        if lists:
            P.lists_at_starts(camera, out, buf_s, edges, static.points, graph.stream)
        graph.finish()
        return lambda: graph.launch(0)

    parts = {
        "edges, frame arrays, arena.capture": lambda: devalloc_part(True, False),
        "edges, static buffers, arena.capture": lambda: devalloc_part(False, False),
        "edges, static buffers, stream capture": lambda: static_part(False),
        "whole frame, frame arrays": lambda: devalloc_part(True, True),
        "whole frame, edges on static buffers": lambda: devalloc_part(False, True),
        "whole static frame": lambda: static_part(True),
    }
    rows["part_gpu_us_queued"] = figures = {}
    for name, make in parts.items():
        try:
            launch = make()
        except Exception as error:
            print(f"{name}: failed to capture: {error!r}")
            continue
        figures[name] = queued_gpu_us(launch)
    cuda.synchronize()


def kernel_figures(rows, dev, static, camera, out, once=False):
    """The kernels that differ, launched eagerly inside a frame / on the static buffers,
    in an arena of their own (`frame_sized_arena`)."""
    arena = frame_sized_arena(dev)
    buf_s = static.buf
    edges_s = P.edges_of(camera, buf_s)
    at = (out.tiles, P.TILE_BLOCK)
    first = {}  # the table of the latest devalloc frame, for its consumer alone

    def devalloc_consume(table):
        K.arena_consume[at](arena, table, camera.rgb, out.palette, out.hist, out.overlay)

    def static_consume():
        K.consume_tiles[at](static.points, buf_s["starts"], buf_s["counts"], camera.rgb,
                            out.palette, out.hist, out.overlay)  # fmt: skip

    def devalloc_lists(consume=False):
        with arena.frame(check=False):
            buf = P.allocate(dev.buffers, arena.empty)
            K.arena_lists[at](arena, edges_s, buf_s["blur"], buf["table"])
            first["table"] = buf["table"]
            if consume:
                devalloc_consume(buf["table"])

    def devalloc_both():
        devalloc_lists(consume=True)

    def static_lists():
        K.fill_tiles[at](edges_s, buf_s["blur"], buf_s["starts"], buf_s["counts"], static.points)

    def static_both():
        static_lists()
        static_consume()

    if once:
        for launch in (devalloc_lists, static_lists, devalloc_both, static_both):
            launch()
            cuda.synchronize()
        return
    rows["kernel_gpu_us_queued"] = {
        "arena_lists": queued_gpu_us(devalloc_lists),
        "fill_tiles": queued_gpu_us(static_lists),
        "arena_lists+arena_consume": queued_gpu_us(devalloc_both),
        "fill_tiles+consume_tiles": queued_gpu_us(static_both),
        "arena_consume alone": queued_gpu_us(lambda: devalloc_consume(first["table"])),
        "consume_tiles alone": queued_gpu_us(static_consume),
        "spin(0) alone": queued_gpu_us(lambda: KB.spin[1, 1](0)),
    }


if __name__ == "__main__":
    main()
