"""The frame pipeline's frames as Dask tasks: each worker owns its arena.

    python examples/dask_pipeline.py                    # a worker per GPU (dask-cuda), or
                                                        # one on the simulator
    python examples/dask_pipeline.py --frames 400 --size 3840x2160

Each frame is one task (`frame_pipeline.frame_task`): the worker renders it,
runs the `devalloc` mode's kernels in its own arena (`devalloc.dask.ArenaPlugin`,
made when the worker starts, closed when it stops, sized by ``arena.run``) and
returns the edge count and histograms. The run checks a few frames against the
same frames computed here, and reports frames per second. With ``dask-cuda``
installed and GPUs present it uses ``LocalCUDACluster`` (a worker per GPU);
otherwise a ``LocalCluster`` of CPU workers; on the simulator, one worker in
this process, running the same code. The same client code would drive workers
on other machines: Dask moves the frames and results, devalloc keeps each
worker's memory.
"""

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
# Workers start as new processes: they find devalloc and frame_pipeline this way.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), str(ROOT / "examples"), os.environ.get("PYTHONPATH")) if p
)

import frame_pipeline as P  # noqa: E402 (picks the simulator when there is no GPU)
import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc.backend import SIMULATOR  # noqa: E402

try:  # (the options are checked first either way: main says what is missing)
    from distributed import Client, LocalCluster

    from devalloc.dask import ArenaPlugin
except ImportError as error:
    DASK_MISSING = error
else:
    DASK_MISSING = None


def make_cluster(workers, gpu):
    """A worker per GPU with dask-cuda where it can; otherwise `workers` CPU workers."""
    if gpu:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            print("dask-cuda is not installed: CPU workers, each using the current GPU")
        else:
            return LocalCUDACluster(n_workers=workers)
    # On the simulator: one worker, in this process (the simulator runs one kernel
    # at a time; worker processes only add their start-up).
    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=not SIMULATOR,
                        dashboard_address=None)  # fmt: skip


def reference(frames, width, height):
    """The checked frames, computed here in an arena of this process."""
    camera, out = P.Camera(height, width), P.Outputs(height, width)
    results = {}
    with devalloc.Arena(1 << 20) as arena:
        for index in frames:
            camera.frame(index)
            edges = arena.run(P.devalloc_frame, arena, camera, out, P.fixed_buffers(height, width))
            results[index] = (int(edges.copy_to_host().sum()), out.hist.copy_to_host())
    return results


def main(argv=None):
    gpu = not SIMULATOR and cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=200 if gpu else 4)
    parser.add_argument("--size", type=P.parse_size, default=None,
                        help="WIDTHxHEIGHT (default 1920x1080; 24x16 simulated)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=None,
                        help="workers (default: one per GPU; 1 on the simulator)")  # fmt: skip
    parser.add_argument("--check", type=int, default=2, help="frames checked here")
    args = parser.parse_args(argv)
    width, height = args.size or ((1920, 1080) if gpu else (24, 16))
    workers = args.workers if args.workers is not None else (len(cuda.gpus) if gpu else 1)
    if args.frames < 1 or workers < 1 or args.check < 0:
        parser.error("--frames and --workers must be at least 1, --check at least 0")
    if SIMULATOR and workers > 1:
        parser.error("the simulator runs one kernel at a time: one worker (--workers 1)")
    if DASK_MISSING is not None:
        parser.error(f'needs Dask\'s distributed ({DASK_MISSING}): pip install -e ".[dask]"')

    with make_cluster(workers, gpu) as cluster, Client(cluster) as client:
        client.register_plugin(ArenaPlugin(1 << 20))

        def frames(indices):
            count = len(indices)
            return client.map(P.frame_task, indices, [width] * count, [height] * count, pure=False)

        client.gather(frames(range(workers)))  # a warm-up frame per worker: kernels loaded
        began = time.perf_counter()
        futures = frames(range(args.frames))
        results = {index: (edges, hist) for index, edges, hist in client.gather(futures)}
        elapsed = time.perf_counter() - began
    where = f"{workers} {'GPU' if gpu else 'simulated'} worker(s)"
    print(f"{args.frames} frames of {width}x{height} on {where}: "
          f"{args.frames / elapsed:.1f} frames/s")  # fmt: skip
    checked = list(range(min(args.check, args.frames)))
    for index, (edges, hist) in reference(checked, width, height).items():
        if results[index][0] != edges or not np.array_equal(results[index][1], hist):
            raise SystemExit(f"frame {index}: the workers' result differs from this process's")
    print(f"frames {checked} identical to the same frames computed here")


if __name__ == "__main__":
    main()
