"""The frame pipeline: Canny-style edges and per-tile edge-point lists, every frame,
with three ways of getting the frame's GPU memory.

    python examples/frame_pipeline.py                          # GPU: 1920x1080, all modes
    python examples/frame_pipeline.py --size 3840x2160 --mode devalloc --out out/
    python examples/frame_pipeline.py --input clip.mp4         # your video or image folder
    python examples/frame_pipeline.py --benchmark --out out/   # 1080p and 4K, results file

Modes:

devalloc  the frame's temporaries from one arena: the fixed-size ones as frame
          arrays (``arena.empty``), and each tile's edge-point list allocated
          inside the kernel that finds its length. ``arena.run`` runs each frame
          and sizes the arena: 1.5 times the peak of the first frames, doubled
          (and the frame run again) should one outgrow it; --arena-mib gives a
          fixed size instead. --strategy picks the in-kernel allocator
          (warp_slab, the default, or bump). --streams N also runs it with N
          frames in flight (``devalloc.ArenaRing``: an arena, a stream, a
          camera buffer and outputs per slot) and with 1, timing whole runs;
          so does devalloc-graph when chosen, a captured frame per slot.
          --devices N runs it with its frames split across N GPUs (a host
          thread and an arena per GPU) and on one.
malloc    every temporary from ``cuda.device_array`` each frame; the lists by
          the classic count pass, copy to host, allocate, second pass.
malloc-pool  `malloc` under devalloc's Numba memory manager
          (``NUMBA_CUDA_MEMORY_MANAGER=devalloc.allocators.numba``: every
          ``cuda.device_array`` from a stream-ordered pool), in a process of
          its own, as a memory manager is chosen before CUDA starts. GPU only.
static    everything allocated once by hand, the lists for the worst case
          (every pixel an edge).

All modes compute the same edges, histograms and overlays, and the run checks
that they do. Without a GPU it runs on Numba's CUDA simulator, on small frames.
"""

import argparse
import dataclasses
import json
import math
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.world import environment, simulate_without_gpu  # noqa: E402

simulate_without_gpu()  # before numba is imported, as is the next line
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")  # one-thread launches are meant

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402
from tqdm import tqdm  # noqa: E402

import devalloc  # noqa: E402
from devalloc.backend import SIMULATOR  # noqa: E402
from kernels import image as K  # noqa: E402

MODES = ("devalloc", "malloc", "malloc-pool", "static", "devalloc-graph", "static-graph")
GRAPH_MODES = ("devalloc-graph", "static-graph")
PIXEL_BLOCK = (8, 8) if SIMULATOR else (16, 16)  # the simulator pays per thread
TILE_BLOCK = (K.TILE, 8)
POOL_MANAGER = "devalloc.allocators.numba"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff"}


# -- frames ----------------------------------------------------------------------------


def sample_photo():
    """A real photograph shipped with scikit-image (RGB, 512 x 512)."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut())


def as_rgb(image):
    image = np.asarray(image)
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    if image.dtype != np.uint8:
        image = (255 * (image / max(image.max(), 1))).astype(np.uint8)
    return np.ascontiguousarray(image[..., :3])


def input_images(path):
    """Frames of a video file, or the images of a folder in name order."""
    import imageio.v3 as iio

    path = Path(path)
    if path.is_dir():
        files = sorted(
            p
            for p in path.iterdir()
            if p.suffix.lower() in {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff"}
        )
        if not files:
            raise SystemExit(f"no images in {path}")
        for name in files:
            yield as_rgb(iio.imread(name))
    else:
        try:
            frames = iio.imiter(path)
            first = next(frames)
        except StopIteration:
            raise SystemExit(f"--input {path}: no frames in it") from None
        except Exception as error:  # imageio names no single error class for this
            raise SystemExit(f"--input {path}: cannot read it as a video ({error})") from None
        yield as_rgb(first)
        for frame in frames:
            yield as_rgb(frame)


class Camera:
    """Renders frames on the GPU into one persistent buffer: the sample photo
    panned and zoomed with sensor noise, or the user's own frames fitted to size."""

    def __init__(self, height, width, source=None):
        self.rgb = cuda.device_array((height, width, 3), np.uint8)
        self.grid = (-(-width // PIXEL_BLOCK[0]), -(-height // PIXEL_BLOCK[1]))
        self.source = iter(input_images(source)) if source else None
        self.photo = None if source else cuda.to_device(sample_photo())

    def frame(self, index, stream=0):
        if self.source is not None:
            try:
                self.photo = cuda.to_device(next(self.source))
            except StopIteration:
                return False
            ph, pw = self.photo.shape[:2]
            center, zoom = (pw / 2, ph / 2), 1.0
        else:
            ph, pw = self.photo.shape[:2]
            phase = index / 24.0
            center = (pw * (0.5 + 0.18 * np.sin(phase)), ph * (0.5 + 0.12 * np.cos(0.7 * phase)))
            zoom = 0.55 + 0.25 * (1 + np.sin(0.5 * phase)) / 2
        K.render[self.grid, PIXEL_BLOCK, stream](
            self.photo, self.rgb, center[0], center[1], zoom, index
        )
        return True


# -- the frame's buffers ---------------------------------------------------------------


def fixed_buffers(height, width):
    """The frame's fixed-size temporaries: (name, shape, dtype)."""
    ty, tx = K.tiles(height, width)
    pixels = (height, width)
    return [
        ("gray", pixels, np.float32),
        ("blur_x", pixels, np.float32),
        ("blur", pixels, np.float32),
        ("magnitude", pixels, np.float32),
        ("direction", pixels, np.uint8),
        ("strength", pixels, np.uint8),
        ("edges", pixels, np.uint8),
        ("edges_next", pixels, np.uint8),
        ("table", (ty * tx, 2), np.int64),  # devalloc: each tile's list (offset, length)
        ("starts", (ty * tx,), np.int64),  # malloc/static: where each tile's list starts
        ("counts", (ty * tx,), np.int64),
    ]


def allocate(buffers, empty):
    """The frame's buffers, each made by ``empty(shape, dtype)``."""
    return {name: empty(shape, dtype) for name, shape, dtype in buffers}


class Outputs:
    """What each frame leaves for the host, in all modes: histograms and overlay."""

    def __init__(self, height, width):
        ty, tx = K.tiles(height, width)
        self.tiles = (tx, ty)
        self.hist = cuda.device_array((ty * tx, K.BINS), np.int32)
        self.overlay = cuda.device_array((height, width, 3), np.uint8)
        self.palette = cuda.to_device(K.PALETTE)


def edges_of(camera, buf, stream=0):
    """The stages up to the edge map; returns the buffer holding the edges."""
    at = (camera.grid, PIXEL_BLOCK, stream)
    K.grayscale[at](camera.rgb, buf["gray"])
    K.blur_rows[at](buf["gray"], buf["blur_x"])
    K.blur_columns[at](buf["blur_x"], buf["blur"])
    K.sobel[at](buf["blur"], buf["magnitude"], buf["direction"])
    K.suppress[at](buf["magnitude"], buf["direction"], buf["strength"])
    src, dst = buf["edges"], buf["edges_next"]
    K.seed_edges[at](buf["strength"], src)
    for _ in range(K.HYSTERESIS_PASSES):
        K.grow_edges[at](buf["strength"], src, dst)
        src, dst = dst, src
    return src


def lists_at_starts(camera, out, buf, edges, points, stream=0):
    """The list stage where the host placed each tile's list (buf["starts"]):
    fill the lists, then the histograms and overlay from them."""
    K.fill_tiles[out.tiles, TILE_BLOCK, stream](
        edges, buf["blur"], buf["starts"], buf["counts"], points
    )
    consume_lists(camera, out, buf, points, stream)


def consume_lists(camera, out, buf, points, stream=0):
    """The histograms and overlay from each tile's list (buf["starts"], buf["counts"])."""
    K.consume_tiles[out.tiles, TILE_BLOCK, stream](
        points, buf["starts"], buf["counts"], camera.rgb, out.palette, out.hist, out.overlay
    )


# -- the three modes ---------------------------------------------------------------------


class FrameClock:
    """When a frame began and when its work was all queued: on the host (time to
    queue it) and, on the GPU, as events on the default stream (the frame's GPU
    time; for a replayed graph, nothing but its kernels)."""

    def __init__(self):
        self.events = None if SIMULATOR else (cuda.event(), cuda.event())

    def begin(self):
        self.began = time.perf_counter()
        if self.events:
            self.events[0].record()

    def queued(self):
        self.host = time.perf_counter() - self.began
        if self.events:
            self.events[1].record()

    def gpu_ms(self):
        """After the frame finished: milliseconds between the two events."""
        return cuda.event_elapsed_time(*self.events) if self.events else float("nan")


def frame_queued(pipeline):
    clock = getattr(pipeline, "clock", None)  # none while a mode sets itself up
    if clock is not None:
        clock.queued()


class Static:
    """Everything allocated once; each tile's list has room for a whole tile."""

    name = "static"

    def __init__(self, camera, out, height, width):
        self.camera, self.out = camera, out
        self.buf = allocate(fixed_buffers(height, width), cuda.device_array)
        tiles = self.buf["starts"].shape[0]
        self.points = cuda.device_array((tiles * K.TILE * K.TILE, K.POINT), np.int32)
        self.buf["starts"].copy_to_device(np.arange(tiles, dtype=np.int64) * K.TILE * K.TILE)
        self.held_bytes = sum(a.nbytes for a in self.buf.values()) + self.points.nbytes

    def stages(self, stream=0):
        """The frame's work, queued on `stream`; returns the edge map's buffer."""
        edges = edges_of(self.camera, self.buf, stream)
        lists_at_starts(self.camera, self.out, self.buf, edges, self.points, stream)
        return edges

    def process(self):
        edges = self.stages()
        frame_queued(self)
        cuda.synchronize()
        return edges


class StaticGraph(Static):
    """`Static`, its frame captured once as a CUDA graph and replayed (on the
    simulator, which has no graphs, launched eagerly)."""

    name = "static-graph"

    def process(self):
        if getattr(self, "graph", None) is None:
            edges = super().process()  # eagerly first: every kernel loaded before capture
            if not SIMULATOR:
                from devalloc.cuda_graphs import StreamCapture

                self.graph = StreamCapture()
                self.edges = self.stages(self.graph.stream)
                self.graph.finish()
            return edges
        self.graph.launch(0)
        frame_queued(self)
        cuda.synchronize()
        return self.edges


class Malloc:
    """Every temporary from cuda.device_array, every frame."""

    name = "malloc"

    def __init__(self, camera, out, height, width):
        self.camera, self.out = camera, out
        self.buffers = fixed_buffers(height, width)
        self.held_bytes = 0

    def process(self):
        out = self.out
        buf = {name: cuda.device_array(shape, dtype) for name, shape, dtype in self.buffers}
        edges = edges_of(self.camera, buf)
        K.count_tiles[out.tiles, TILE_BLOCK](edges, buf["counts"])
        counts = buf["counts"].copy_to_host()  # the host must know the lengths
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        buf["starts"] = cuda.to_device(starts)
        points = cuda.device_array((max(int(counts.sum()), 1), K.POINT), np.int32)
        lists_at_starts(self.camera, out, buf, edges, points)
        frame_queued(self)
        cuda.synchronize()
        frame_bytes = sum(a.nbytes for a in buf.values()) + points.nbytes
        self.held_bytes = max(self.held_bytes, frame_bytes)
        self.last = buf  # keep the edges alive for the caller, as the other modes do
        return edges


def devalloc_frame(arena, camera, out, buffers, stream=0, devalloc_stream=None):
    """One frame's work on `arena`: frame arrays for the fixed-size buffers, then
    the stages; returns the edge map. Devalloc kernels launch on
    `devalloc_stream` (none: the arena's own, or inside a capture the graph's)."""
    buf = allocate(buffers, arena.empty)
    edges = edges_of(camera, buf, stream)
    at = (out.tiles, TILE_BLOCK) if devalloc_stream is None else (out.tiles, TILE_BLOCK, stream)
    K.arena_lists[at](arena, edges, buf["blur"], buf["table"])
    K.arena_consume[at](arena, buf["table"], camera.rgb, out.palette, out.hist, out.overlay)
    return edges


_TASK_STATE = {}  # (worker, width, height) -> its camera, outputs and buffer list


def frame_task(index, width, height):
    """Frame `index` as a Dask task (examples/dask_pipeline.py), in the worker's
    arena (`devalloc.dask.worker_arena`), sized by ``arena.run``: returns the
    index, the count of edge pixels and the tiles' histograms."""
    from distributed import get_worker

    from devalloc.dask import worker_arena

    key = (get_worker().address, width, height)
    if key not in _TASK_STATE:
        _TASK_STATE[key] = Camera(height, width), Outputs(height, width)
    camera, out = _TASK_STATE[key]
    camera.frame(index)
    arena = worker_arena()
    edges = arena.run(devalloc_frame, arena, camera, out, fixed_buffers(height, width))
    return index, int(edges.copy_to_host().sum()), out.hist.copy_to_host()


class Devalloc:
    """The frame's temporaries from one arena: frame arrays for the fixed-size
    ones, and each tile's list allocated in-kernel by the thread that counted
    it. ``arena.run`` sizes the arena (unless it was given a size): either
    strategy then fits the frame, `bump` exactly and `warp_slab` with slabs
    grown from demand, so what it holds back is bounded by what it uses.
    """

    name = "devalloc"

    def __init__(self, camera, out, height, width, arena_bytes=None, strategy="warp_slab"):
        self.camera, self.out = camera, out
        self.buffers = fixed_buffers(height, width)
        self.fixed_size = arena_bytes is not None
        self.arena = devalloc.Arena(arena_bytes or 1 << 20, strategy=strategy)

    @property
    def held_bytes(self):
        return self.arena.capacity

    def process(self):
        if self.fixed_size:
            with self.arena.frame():
                return self._launches()
        return self.arena.run(self._launches)

    def _launches(self, stream=0):
        """The frame's work: devalloc kernels need no stream (inside a capture
        they are recorded on the graph's), the others take `stream`."""
        edges = devalloc_frame(self.arena, self.camera, self.out, self.buffers, stream)
        frame_queued(self)
        return edges


class DevallocGraph(Devalloc):
    """`Devalloc`, its frame captured once with ``arena.capture()`` (frame arrays
    and all) and replayed each frame; grown and captured again should a frame
    outgrow the arena."""

    name = "devalloc-graph"
    graph = None

    def process(self):
        if self.graph is None:
            # Eagerly first: every kernel is loaded before the capture, and the
            # arena sized. The simulator records devalloc kernels only: there
            # every frame is eager.
            edges = super().process()
            if not SIMULATOR:
                with self.arena.capture() as graph:
                    self.edges = self._launches(graph.stream)
                self.graph = graph
            return edges
        self.graph.replay()
        frame_queued(self)
        try:
            self.arena.check()
        except devalloc.ArenaOverflowError as overflow:
            larger = self.arena.sizing.grown(self.arena.capacity, overflow)
            if self.fixed_size or larger is None:
                raise
            tqdm.write("a frame outgrew the arena: growing it and capturing the frame again")
            self.arena.resize(larger)
            self.graph = None
            return self.process()
        return self.edges


# -- running ---------------------------------------------------------------------------


class MallocCounter:
    """Counts real device allocations (cudaMalloc through Numba) while active."""

    def __init__(self):
        self.calls = 0

    def __enter__(self):
        if SIMULATOR:  # the simulator has no allocator to watch: count the API calls
            self.saved = {name: getattr(cuda, name) for name in ("device_array", "to_device")}
            for name, original in self.saved.items():
                setattr(cuda, name, self._counted(original))
        else:
            self.context = cuda.current_context()
            original = self.context.memalloc
            self.context.memalloc = self._counted(original)
        return self

    def _counted(self, original):
        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        return counted

    def __exit__(self, *exc):
        if SIMULATOR:
            for name, original in self.saved.items():
                setattr(cuda, name, original)
        else:
            del self.context.memalloc
        return False


def used_device_bytes():
    if SIMULATOR:
        return 0
    free, total = cuda.current_context().get_memory_info()
    return total - free


class ModeRun:
    """One mode's pipeline over the frames, a frame at a time, and its figures."""

    def __init__(self, mode, height, width, source, arena_bytes, strategy, overlays):
        self.mode, self.strategy, self.overlays = mode, strategy, overlays
        self.size = f"{width}x{height}"
        self.camera = Camera(height, width, source)
        out = Outputs(height, width)
        before = used_device_bytes()
        with MallocCounter() as setup:
            if mode.startswith("devalloc"):
                kind = DevallocGraph if mode == "devalloc-graph" else Devalloc
                self.pipeline = kind(self.camera, out, height, width, arena_bytes, strategy)
            else:
                kind = {"static": Static, "malloc": Malloc, "malloc-pool": Malloc,
                        "static-graph": StaticGraph}[mode]  # fmt: skip
                self.pipeline = kind(self.camera, out, height, width)
        self.setup_mallocs = setup.calls
        self.held = used_device_bytes() - before  # what its setup took
        self.grown = self.peak_grown = 0  # what its frames added since (pending frees too)
        self.pipeline.clock = FrameClock()
        self.times, self.host, self.gpu, self.mallocs, self.results = [], [], [], [], []

    def frame(self, index, timed, kept):
        """Frame `index` (its input first, then the GPU idle); False when the input ran out."""
        if not self.camera.frame(index):
            return False
        cuda.synchronize()
        clock, before = self.pipeline.clock, used_device_bytes()
        with MallocCounter() as counter:
            begin = time.perf_counter()
            clock.begin()
            edges = self.pipeline.process()
            elapsed = time.perf_counter() - begin
        self.grown += used_device_bytes() - before
        self.peak_grown = max(self.peak_grown, self.grown)
        if timed:
            self.times.append(elapsed)
            self.host.append(clock.host)  # until the frame's work was queued
            self.gpu.append(clock.gpu_ms())
            self.mallocs.append(counter.calls)
        if kept:
            out = self.pipeline.out
            self.results.append(
                (index, edges.copy_to_host(), out.hist.copy_to_host(), out.overlay.copy_to_host())
            )
            if self.overlays is not None:
                name = f"overlay-{self.mode}-{self.size}-{index:04d}.png"
                write_overlay(self.overlays / name, self.results[-1][3])
        return True

    def finish(self, in_turns):
        """The mode's row of figures (its arena's statistics printed and the arena
        closed), and the kept frames' results."""
        if self.mode.startswith("devalloc"):
            stats = self.pipeline.arena.stats()
            by_kernel = ", ".join(f"{name} {n}" for name, n in stats.allocs_by_kernel.items())
            tqdm.write(
                f"{self.mode:>8} {self.size}: {stats.frames} frames in an arena of "
                f"{stats.capacity_bytes / 2**20:.1f} MiB ({stats.device_mallocs} cudaMalloc); "
                f"in-kernel allocations: {by_kernel}"
            )
            self.pipeline.arena.close()
        median = statistics.median(self.times) * 1e3 if self.times else float("nan")
        return {
            "mode": self.mode,
            "strategy": self.strategy if self.mode.startswith("devalloc") else None,
            "size": self.size,
            "frames": len(self.times),
            "in_turns_with": [m for m in in_turns if m != self.mode],
            "median_ms": median,
            "fps": 1e3 / median,
            "host_ms": statistics.median(self.host) * 1e3 if self.host else float("nan"),
            "gpu_ms": statistics.median(self.gpu) if self.gpu else float("nan"),
            "setup_mallocs": self.setup_mallocs,
            "mallocs_per_frame": (
                statistics.median(self.mallocs) if self.mallocs else float("nan")
            ),
            "peak_mib": self.pipeline.held_bytes / 2**20,
            "device_used_mib": (self.held + self.peak_grown) / 2**20,
        }, self.results


def in_turns(modes):
    """`modes` as groups run together: the graph modes in turns (their frames
    neither allocate nor free, so neither's memory figures see the other's),
    each eager mode alone, in the order given."""
    graphs = tuple(m for m in modes if m in GRAPH_MODES)
    groups = []
    for mode in modes:
        if mode not in GRAPH_MODES:
            groups.append((mode,))
        elif mode == graphs[0]:
            groups.append(graphs)
    return groups


def run_modes(modes, height, width, frames, warmup, source, arena_bytes, keep, overlays,
              strategy):  # fmt: skip
    """Run `modes` (a group of `in_turns`) over the same frames, in turns frame
    by frame (each frame on an idle GPU, as one mode alone runs it), so that
    what drifts on the machine during the run falls on each alike; returns
    each mode's row of figures and kept frames' results. Overlays of the kept
    frames go to the folder `overlays`. (The two graph modes, one after the
    other, differed by more from run to run than what was being compared: on
    an H100, 2026-12-07, 1.047-1.067x in three calls; in turns 1.044x.)"""
    if modes == ("malloc-pool",) and os.environ.get("NUMBA_CUDA_MEMORY_MANAGER") != POOL_MANAGER:
        return [run_under_pool(height, width, frames, warmup, source, keep, overlays)]
    runs = [ModeRun(m, height, width, source, arena_bytes, strategy, overlays) for m in modes]
    label = f"{'/'.join(modes)} {width}x{height}"
    for index in tqdm(range(warmup + frames), desc=label, leave=False, disable=None):
        going = [run.frame(index, index >= warmup, index in keep) for run in runs]
        if not all(going):
            break
    return [run.finish(modes) for run in runs]


def run_streamed(height, width, frames, warmup, keep, streams, strategy, graph=False):
    """`devalloc` (or with `graph`, `devalloc-graph`) with `streams` frames in
    flight (`devalloc.ArenaRing`): each slot has its arena, its stream, its
    camera buffer and its outputs (and, with `graph`, its frame captured once);
    frames take the slots in turn and nothing waits on the host between them.
    Times the whole run (frames/s), not each frame; keeps the frames in `keep`.
    Then a few frames more with events around each: the row's timeline."""
    kind = "devalloc-graph" if graph else "devalloc"
    label = f"{kind} x{streams} {width}x{height}"
    sizer = Devalloc(Camera(height, width), Outputs(height, width), height, width)
    for index in range(3):  # the arena's size, as `devalloc` measures it
        sizer.camera.frame(index)
        sizer.process()
    capacity = sizer.arena.capacity
    sizer.arena.close()
    buffers = fixed_buffers(height, width)
    slots = [(Camera(height, width), Outputs(height, width)) for _ in range(streams)]
    results, began = [], None
    with devalloc.ArenaRing(streams, capacity, strategy=strategy) as ring:
        replays = [None] * streams  # each slot's captured frame and the edges it leaves
        if graph and not SIMULATOR:  # (the simulator's capture records devalloc kernels only)
            for k, slot in enumerate(ring):
                camera, out = slots[k]
                with slot.arena.frame():  # eagerly first: every kernel loaded
                    devalloc_frame(slot.arena, camera, out, buffers, slot.stream, slot.stream)
                with slot.arena.capture() as captured:
                    edges = devalloc_frame(slot.arena, camera, out, buffers, captured.stream)
                replays[k] = captured, edges

        def one_frame(index):
            k = index % streams
            camera, out = slots[k]
            if replays[k] is None:
                with ring.frame() as slot:  # (slots in turn: slot k is frame k's)
                    camera.frame(index, slot.stream)
                    edges = devalloc_frame(
                        slot.arena, camera, out, buffers, slot.stream, slot.stream
                    )
            else:
                slot = ring[k]
                camera.frame(index, slot.stream)
                captured, edges = replays[k]
                captured.replay(slot.stream)
            return slot, out, edges

        for index in tqdm(range(warmup + frames), desc=label, leave=False, disable=None):
            if index == warmup:
                cuda.synchronize()
                began = time.perf_counter()
            slot, out, edges = one_frame(index)
            if index in keep:  # (copies on the slot's stream, the arrays' own)
                kept = (edges.copy_to_host(stream=slot.stream),
                        out.hist.copy_to_host(stream=slot.stream),
                        out.overlay.copy_to_host(stream=slot.stream))  # fmt: skip
                slot.stream.synchronize()
                results.append((index, *kept))
        cuda.synchronize()
        elapsed = time.perf_counter() - began
        timeline = frame_timeline(ring, one_frame, warmup + frames, 4 * streams)
        ring.check()
    row = whole_run_row(f"{kind} x{streams}", strategy, width, height, frames, elapsed,
                        streams * capacity, timeline=timeline)  # fmt: skip
    return row, results


def whole_run_row(mode, strategy, width, height, frames, elapsed, held_bytes, **more):
    """The table's row for a run timed whole (`elapsed` seconds for `frames`
    frames, frames/s, not each frame's time): what per frame it cannot say is nan."""
    per_frame = elapsed / frames * 1e3
    nan = float("nan")
    return {
        "mode": mode, "strategy": strategy, "size": f"{width}x{height}", "frames": frames,
        "median_ms": per_frame, "fps": 1e3 / per_frame, "host_ms": nan, "gpu_ms": nan,
        "setup_mallocs": nan, "mallocs_per_frame": 0, "peak_mib": held_bytes / 2**20,
        "device_used_mib": nan, **more,
    }  # fmt: skip


def frame_timeline(ring, one_frame, first, count):
    """`count` frames more from index `first`, each between two events on its
    slot's stream: [slot, start ms, end ms] per frame, from the first start
    (none on the simulator, which has no events). Untimed: the events cost
    host time the timed frames do not pay."""
    if SIMULATOR:
        return []
    cuda.synchronize()
    marks = []
    for index in range(first, first + count):
        k = index % len(ring)
        start, end = cuda.event(), cuda.event()
        start.record(ring[k].stream)
        one_frame(index)
        end.record(ring[k].stream)
        marks.append((k, start, end))
    cuda.synchronize()
    origin = marks[0][1]
    return [[k, cuda.event_elapsed_time(origin, start), cuda.event_elapsed_time(origin, end)]
            for k, start, end in marks]  # fmt: skip


def run_devices(height, width, frames, warmup, keep, devices, strategy):
    """`devalloc` split across `devices` GPUs, a host thread per GPU: frame k
    runs on GPU k mod `devices`, in that GPU's arena (sized by ``arena.run``),
    with its own camera buffer and outputs, made inside ``with cuda.gpus[d]:``.
    Times the whole run, from when every thread has run its warm-up frames;
    each GPU's arena, stats and overflow are its own."""
    label = f"devalloc {devices} GPU{'s' if devices > 1 else ''}"
    results, failures, used = [], [], [None] * devices  # used: (capacity, stats) per GPU
    lock = threading.Lock()
    warm = threading.Barrier(devices + 1)  # every thread warm, then the clock starts

    def work(d):
        try:
            with cuda.gpus[d]:
                pipeline = Devalloc(Camera(height, width), Outputs(height, width), height,
                                    width, strategy=strategy)  # fmt: skip
                mine = range(d, warmup + frames, devices)
                timed = False
                for index in mine:
                    if index >= warmup and not timed:
                        cuda.synchronize()
                        warm.wait()
                        timed = True
                    pipeline.camera.frame(index)
                    edges = pipeline.process()
                    if index in keep:
                        kept = (edges.copy_to_host(), pipeline.out.hist.copy_to_host(),
                                pipeline.out.overlay.copy_to_host())  # fmt: skip
                        with lock:
                            results.append((index, *kept))
                if not timed:
                    warm.wait()
                cuda.synchronize()
                arena = pipeline.arena
                used[d] = arena.capacity, dataclasses.asdict(arena.stats())
                arena.close()
        except BaseException as error:  # (reported by the main thread, with the GPU)
            failures.append((d, error))
            warm.abort()

    threads = [threading.Thread(target=work, args=(d,), name=f"{label} #{d}")
               for d in range(devices)]  # fmt: skip
    for thread in threads:
        thread.start()
    try:
        warm.wait()
    except threading.BrokenBarrierError:
        pass
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        d, error = failures[0]
        raise RuntimeError(f"{label}: GPU {d} failed: {error!r}") from error
    results.sort(key=lambda r: r[0])
    held = sum(capacity for capacity, _ in used)
    row = whole_run_row(label, strategy, width, height, frames, elapsed, held,
                        per_gpu=[stats for _, stats in used])  # fmt: skip
    return row, results


def run_under_pool(height, width, frames, warmup, source, keep, overlays):
    """`run_modes` of malloc-pool, in a process whose Numba memory manager is
    devalloc's pool (the manager is chosen before CUDA starts)."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "malloc-pool.pickle"
        command = [sys.executable, __file__, "--mode", "malloc-pool",
                   "--size", f"{width}x{height}", "--frames", str(frames),
                   "--warmup", str(warmup), "--keep", ",".join(map(str, sorted(keep))),
                   "--result-file", str(result)]  # fmt: skip
        if source is not None:
            command += ["--input", str(source)]
        if overlays is not None:
            command += ["--out", str(overlays)]
        env = {**os.environ, "NUMBA_CUDA_MEMORY_MANAGER": POOL_MANAGER}
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        return pickle.loads(result.read_bytes())


def write_overlay(path, overlay):
    import imageio.v3 as iio

    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, overlay)


def compare(all_results):
    """Every mode's edges, histograms and overlays must equal the first mode's."""
    (first_mode, reference), *others = all_results.items()
    for mode, results in others:
        if len(results) != len(reference):
            raise SystemExit(f"{mode} checked {len(results)} frames, {first_mode} {len(reference)}")
        for (index, *mine), (_, *theirs) in zip(results, reference):
            for what, a, b in zip(("edges", "histograms", "overlay"), mine, theirs):
                if not np.array_equal(a, b):
                    raise SystemExit(f"frame {index}: {mode} {what} differ from {first_mode}'s")
    checked = len(reference)
    edges = int(sum(r[1].sum() for r in reference))
    return (
        f"identical across {', '.join(all_results)} ({checked} frames checked, {edges} edge pixels)"
    )


def print_table(rows):
    header = ("mode", "size", "ms/frame", "host ms", "GPU ms", "frames/s", "cudaMalloc/frame",
              "peak MiB")  # fmt: skip
    widths = (15, 10, 9, 8, 8, 9, 17, 9)
    print("\n" + " ".join(f"{h:>{w}}" for h, w in zip(header, widths)))
    for r in rows:
        mark = "*" if r.get("in_turns_with") else ""
        print(
            f"{r['mode'] + mark:>15} {r['size']:>10} {r['median_ms']:9.3f} {r['host_ms']:8.3f} "
            f"{r['gpu_ms']:8.3f} {r['fps']:9.1f} {r['mallocs_per_frame']:17.0f} "
            f"{r['peak_mib']:9.2f}"
        )
    if any(r.get("in_turns_with") for r in rows):
        print("* modes run in turns, frame by frame, each frame on an idle GPU")


def parse_size(text):
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected WIDTHxHEIGHT such as 1920x1080 (got {text!r})"
        ) from None
    if not (8 <= width <= MAX_SIDE and 8 <= height <= MAX_SIDE):
        raise argparse.ArgumentTypeError(
            f"frames must be from 8x8 to {MAX_SIDE}x{MAX_SIDE} (got {text!r})"
        )
    return width, height


MAX_SIDE = 16384  # CUDA's largest 2-D texture side: larger frames are no camera's
MAX_ARENA_MIB = 4 << 20  # devalloc's largest arena, 4 TiB


def parse_mib(text):
    """--arena-mib: a finite size above 0, at most an arena's largest."""
    try:
        mib = float(text)
    except ValueError:
        mib = float("nan")
    if not 0 < mib <= MAX_ARENA_MIB:  # (NaN fails both)
        raise argparse.ArgumentTypeError(
            f"expected MiB above 0, at most {MAX_ARENA_MIB} (got {text!r}); "
            "leave it out to have the arena sized by measurement"
        )
    return mib


def main(argv=None):
    gpu = not SIMULATOR and cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=(*MODES, "eager", "graph", "all"), default="all",
                        help="one mode, the eager ones, the graph ones, or all")  # fmt: skip
    parser.add_argument(
        "--size", type=parse_size, action="append",
        help="WIDTHxHEIGHT, repeatable (default 1920x1080; 40x20 on the simulator)",
    )  # fmt: skip
    parser.add_argument("--frames", type=int, default=None, help="timed frames per mode")
    parser.add_argument("--warmup", type=int, default=None, help="untimed frames first")
    parser.add_argument("--input", help="a video file or a folder of images")
    parser.add_argument("--out", type=Path, help="folder for overlay images and results")
    parser.add_argument("--arena-mib", type=parse_mib, help="arena size; default: measured")
    parser.add_argument("--strategy", choices=("warp_slab", "bump"), default="warp_slab",
                        help="the devalloc arena's allocator strategy")  # fmt: skip
    parser.add_argument("--benchmark", action="store_true",
                        help="1920x1080 and 3840x2160 (or the --size ones), results file "
                             "and plots in --out, one overlay")  # fmt: skip
    parser.add_argument("--streams", type=int, default=1,
                        help="frames in flight: above 1, devalloc (and devalloc-graph, when "
                             "chosen) also run with that many streams (devalloc.ArenaRing), "
                             "and with 1 to compare")  # fmt: skip
    parser.add_argument("--devices", type=int, default=None,
                        help="GPUs: devalloc also runs with its frames split across this many, "
                             "a host thread per GPU, and on one to compare")  # fmt: skip
    # (for run_under_pool: the frames to keep, and where to leave one mode's results)
    parser.add_argument("--keep", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.benchmark and not args.size:
        sizes = [(1920, 1080), (3840, 2160)]
    else:
        sizes = args.size or ([(1920, 1080)] if gpu else [(40, 20)])
    frames = args.frames if args.frames is not None else (100 if gpu else 1)
    warmup = args.warmup if args.warmup is not None else (3 if gpu else 0)
    if frames < 1 or warmup < 0:
        parser.error("--frames must be at least 1 and --warmup at least 0")
    if not 1 <= args.streams <= 64:
        parser.error(f"--streams must be from 1 to 64 (got {args.streams})")
    if args.streams > 1 and args.input is not None:
        parser.error("--streams renders its own frames: it takes no --input")
    if args.devices is not None:
        present = len(cuda.gpus) if gpu else 1  # (the simulator has one)
        if not 1 <= args.devices <= present:
            parser.error(f"--devices must be from 1 to the {present} GPU(s) here "
                         f"(got {args.devices})")  # fmt: skip
        if args.input is not None:
            parser.error("--devices renders its own frames: it takes no --input")
    if args.input is not None and not Path(args.input).exists():
        parser.error(f"--input {args.input}: no such file or folder")
    if args.out is not None:  # before the run, not after it
        try:
            args.out.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            parser.error(f"--out {args.out}: {error.strerror or error}")
    where = (
        cuda.get_current_device().name
        if gpu
        else "Numba's CUDA simulator (no GPU found): small frames, slow"
    )
    if isinstance(where, bytes):
        where = where.decode()
    print(f"frame pipeline on {where}")
    modes = {
        "all": MODES,
        "graph": GRAPH_MODES,
        "eager": tuple(m for m in MODES if m not in GRAPH_MODES),
    }.get(args.mode, (args.mode,))
    if not gpu and "malloc-pool" in modes:  # the simulator has no memory managers
        if args.mode == "malloc-pool":
            parser.error("--mode malloc-pool needs a GPU (the simulator has no memory managers)")
        modes = tuple(m for m in modes if m != "malloc-pool")
    # (Rounded up: a size below one byte is one byte, not 0, which reads as "measure it".)
    arena_bytes = math.ceil(args.arena_mib * 2**20) if args.arena_mib else None
    keep = {warmup, warmup + frames // 2, warmup + frames - 1}
    if args.keep:
        keep = {int(index) for index in args.keep.split(",")}
    if args.result_file is not None:  # one mode, one size, for run_under_pool
        (width, height), mode = sizes[0], modes[0]
        (outcome,) = run_modes((mode,), height, width, frames, warmup, args.input, arena_bytes,
                               keep, args.out, args.strategy)  # fmt: skip
        args.result_file.write_bytes(pickle.dumps(outcome))
        return

    rows, verdicts = [], []
    for number, (width, height) in enumerate(sizes):
        results = {}
        for group in in_turns(modes):
            # Overlays for every mode, or in a benchmark only the first size's first modes.
            first = (number, group[0]) == (0, modes[0])
            write = args.out is not None and (not args.benchmark or first)
            outcomes = run_modes(
                group, height, width, frames, warmup, args.input, arena_bytes, keep,
                args.out if write else None, args.strategy,
            )  # fmt: skip
            for row, kept in outcomes:
                rows.append(row)
                results[row["mode"]] = kept
        if args.streams > 1:  # the same frames in flight on one stream, then on several
            kinds = [graph for graph, mode in ((False, "devalloc"), (True, "devalloc-graph"))
                     if mode in modes] or [False]  # fmt: skip
            for graph in kinds:
                for streams in (1, args.streams):
                    row, results[row["mode"]] = run_streamed(
                        height, width, frames, warmup, keep, streams, args.strategy, graph
                    )
                    rows.append(row)
        if args.devices is not None:  # the same frames on one GPU, then split across several
            for devices in sorted({1, args.devices}):
                row, results[row["mode"]] = run_devices(
                    height, width, frames, warmup, keep, devices, args.strategy
                )
                rows.append(row)
                for d, stats in enumerate(row["per_gpu"]):
                    print(f"{row['mode']}, GPU {d}: {stats}")
        if len(results) > 1:
            verdicts.append(f"{width}x{height}: " + compare(results))
    print_table(rows)
    for verdict in verdicts:
        print("results", verdict)
    print(devalloc.stats())

    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {"environment": environment(), "results": rows}
        path = args.out / "pipeline.json"
        path.write_text(json.dumps(record, indent=1))
        print(f"wrote {path}")
        if gpu:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from plot import plot_pipeline

            for png in plot_pipeline(path):
                print(f"wrote {png}")


if __name__ == "__main__":
    try:
        main()
    except (devalloc.ArenaOverflowError, devalloc.DeviceMemoryError) as error:
        # A fixed --arena-mib too small for the frame, or too large for the GPU.
        sys.exit(f"{error}\n(--arena-mib sets the arena's size; leave it out to measure it)")
