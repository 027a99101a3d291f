"""Every example runs, as a user would run it, in a subprocess with small inputs
(on the simulator without a GPU)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from devalloc.backend import SIMULATOR
from helpers import run_script

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "examples" / "frame_pipeline.py"


def run_pipeline(*args, timeout=600):
    return run_script(PIPELINE, *args, timeout=timeout)


@pytest.mark.parametrize("strategy", ["warp_slab", "bump"])
def test_frame_pipeline_gives_equal_results_in_every_mode(tmp_path, strategy):
    import imageio.v3 as iio

    result = run_pipeline(
        "--size", "36x18", "--frames", "1", "--warmup", "0", "--out", str(tmp_path),
        "--strategy", strategy,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # (malloc-pool: the GPU's memory managers; the simulator has none)
    pool = "" if SIMULATOR else " malloc-pool,"
    assert f"identical across devalloc, malloc,{pool} static, devalloc-graph, static-graph" in (
        result.stdout
    )
    if SIMULATOR:
        assert "simulator" in result.stdout  # it says where it runs
    rows = {
        row["mode"]: row for row in json.loads((tmp_path / "pipeline.json").read_text())["results"]
    }
    assert rows["devalloc"]["mallocs_per_frame"] == 0 == rows["static"]["mallocs_per_frame"]
    assert rows["devalloc"]["strategy"] == strategy
    assert rows["malloc"]["mallocs_per_frame"] >= 10
    overlays = sorted(tmp_path.glob("overlay-*.png"))
    modes = [p.name[len("overlay-") :].rsplit("-", 2)[0] for p in overlays]
    expected = ["devalloc", "devalloc-graph", "malloc", "malloc-pool", "static", "static-graph"]
    assert modes == [mode for mode in expected if not (SIMULATOR and mode == "malloc-pool")]
    assert rows["static-graph"]["mallocs_per_frame"] == 0
    assert rows["devalloc-graph"]["mallocs_per_frame"] == 0
    # The graph modes ran in turns, frame by frame; the eager ones each alone.
    assert rows["devalloc-graph"]["in_turns_with"] == ["static-graph"]
    assert rows["static-graph"]["in_turns_with"] == ["devalloc-graph"]
    assert rows["devalloc"]["in_turns_with"] == [] == rows["static"]["in_turns_with"]
    assert rows["devalloc-graph"]["frames"] == 1 == rows["static-graph"]["frames"]
    assert "* modes run in turns, frame by frame" in result.stdout
    images = [iio.imread(p) for p in overlays]
    assert images[0].shape == (18, 36, 3) and images[0].dtype == np.uint8
    assert all(np.array_equal(images[0], image) for image in images[1:])
    # Edge pixels are painted in full colour over a dimmed frame (at most 255 / 3).
    assert images[0].max() > 85 and (images[0] <= 85).mean() > 0.5


def test_frame_pipeline_reads_a_folder_of_images(tmp_path):
    import imageio.v3 as iio

    rng = np.random.default_rng(7)
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(2):
        image = np.zeros((30, 40, 3), np.uint8)
        image[:, 8 * (i + 1) :] = 200  # an edge that moves
        image += rng.integers(0, 20, image.shape, dtype=np.uint8)
        iio.imwrite(frames / f"frame{i}.png", image)
    row = run_on_input(frames, 2, tmp_path / "out")
    assert (row["mode"], row["frames"], row["mallocs_per_frame"]) == ("devalloc", 2, 0)


def run_on_input(path, frames, out):
    """The devalloc mode over `frames` frames of --input `path`; its results row."""
    result = run_pipeline(
        "--input", str(path), "--mode", "devalloc", "--size", "32x16",
        "--frames", str(frames), "--warmup", "0", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads((out / "pipeline.json").read_text())["results"]
    return row


def test_frame_pipeline_reads_a_video(tmp_path):
    pytest.importorskip("av", reason="the examples extra installs PyAV, the video reader")
    import imageio.v3 as iio

    frames = np.zeros((3, 24, 40, 3), np.uint8)
    for i in range(3):
        frames[i, :, 10 + 5 * i :] = 220  # an edge that moves
    clip = tmp_path / "clip.mp4"
    iio.imwrite(clip, frames, plugin="pyav", codec="mpeg4", fps=10)
    row = run_on_input(clip, 3, tmp_path / "out")
    assert (row["mode"], row["frames"]) == ("devalloc", 3)


def test_frame_pipeline_says_what_is_wrong_with_its_input(tmp_path):
    result = run_pipeline("--input", str(tmp_path / "missing.mp4"), timeout=120)
    assert result.returncode == 2
    assert "missing.mp4: no such file or folder" in result.stderr
    assert "Traceback" not in result.stderr
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"not a video" * 10)
    result = run_pipeline("--input", str(garbage), "--mode", "devalloc", timeout=120)
    assert result.returncode != 0
    assert "garbage.mp4: cannot read it as a video" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--size", "5x5"], "from 8x8"),
        (["--size", "wide"], "WIDTHxHEIGHT"),
        (["--mode", "cudaMalloc"], "invalid choice"),
        (["--strategy", "slab"], "invalid choice"),
        (["--frames", "0"], "--frames must be at least 1"),
        (["--size", "99999999999x99999999999"], "to 16384x16384"),  # (a NumPy traceback)
        (["--arena-mib", "nan"], "expected MiB above 0"),  # (int() of NaN: a traceback)
        (["--arena-mib", "inf"], "expected MiB above 0"),
        (["--arena-mib", "-1"], "expected MiB above 0"),  # (Arena()'s error, a traceback)
        (["--arena-mib", "0"], "leave it out"),  # (was taken as "measure it")
    ],
)
def test_frame_pipeline_refuses_bad_options(args, message):
    result = run_pipeline(*args, timeout=120)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_frame_pipeline_says_so_before_the_run_when_out_cannot_be_written(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    for out in (afile, afile / "below"):  # (FileExistsError after the whole run)
        result = run_pipeline("--mode", "devalloc", "--out", str(out), timeout=120)
        assert result.returncode == 2 and f"--out {out}" in result.stderr, result.stderr
        assert "frame pipeline on" not in result.stdout


@pytest.mark.parametrize("mib", ["0.0001", "1e-9"])  # (1e-9 rounded to 0 bytes: "measure it")
def test_frame_pipeline_with_an_arena_too_small_says_what_to_do(mib):
    result = run_pipeline("--mode", "devalloc", "--arena-mib", mib, timeout=120)
    assert result.returncode == 1
    assert "arena overflow" in result.stderr and "leave it out to measure it" in result.stderr
    assert "Traceback" not in result.stderr
    assert "arena of 1.0 MiB" not in result.stdout


def test_frame_pipeline_with_an_arena_larger_than_the_device_says_so():
    result = run_pipeline("--mode", "devalloc", "--arena-mib", "4194304", timeout=120)
    assert result.returncode == 1
    assert "cannot reserve an arena" in result.stderr and "--arena-mib" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_other_examples_refuse_what_they_cannot_do(tmp_path):
    attention = run_script(ROOT / "examples" / "attention_scratch.py", "--out", str(tmp_path))
    assert attention.returncode == 2 and "is a folder" in attention.stderr
    dask = run_script(ROOT / "examples" / "dask_pipeline.py", "--workers", "0")
    assert dask.returncode == 2 and "--workers must be at least 1" in dask.stderr


def test_the_dask_example_checks_its_options_and_says_when_dask_is_missing(tmp_path):
    # (The H100 image has no `distributed`: the options were never checked there.)
    (tmp_path / "distributed").mkdir()
    (tmp_path / "distributed" / "__init__.py").write_text("raise ImportError('hidden here')\n")
    hiding = os.pathsep.join([str(tmp_path), str(ROOT)])
    cases = [(["--workers", "0"], "--workers must be at least 1"),
             (["--frames", "1"], "needs Dask's distributed (hidden here)")]  # fmt: skip
    for args, message in cases:
        run = run_script(ROOT / "examples" / "dask_pipeline.py", *args, PYTHONPATH=hiding)
        assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize(
    "mode, modes",
    [
        ("devalloc", "devalloc, devalloc x1, devalloc x3"),
        # On the GPU each slot replays its own captured frame; on the simulator,
        # which captures devalloc kernels only, the slots run their frames eagerly.
        ("graph", "devalloc-graph, static-graph, devalloc-graph x1, devalloc-graph x3"),
    ],
)
def test_frames_in_flight_give_the_same_results(mode, modes):
    result = run_pipeline(
        "--mode", mode, "--size", "24x16", "--frames", "3", "--warmup", "1", "--streams", "3"
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"identical across {modes} (3 frames checked" in result.stdout


def test_frames_split_across_gpus_give_the_same_results():
    # One GPU here (or the simulator's one): the threaded per-GPU path, against
    # the plain mode; each GPU's arena stats are printed.
    result = run_pipeline(
        "--mode", "devalloc", "--size", "24x16", "--frames", "3", "--warmup", "1",
        "--devices", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "identical across devalloc, devalloc 1 GPU (3 frames checked" in result.stdout
    stats = [
        line for line in result.stdout.splitlines() if line.startswith("devalloc 1 GPU, GPU 0:")
    ]
    assert len(stats) == 1 and "'frames': 4" in stats[0]  # the warm-up frame and 3 timed


@pytest.mark.parametrize(
    "args, message",
    [(("--devices", "0"), "--devices must be from 1"), (("--devices", "64"), "(got 64)"),
     (("--devices", "1", "--input", "."), "no --input")],
)  # fmt: skip
def test_frame_pipeline_refuses_bad_devices(args, message):
    result = run_pipeline("--mode", "devalloc", *args)
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [(("--streams", "0"), "from 1 to 64"), (("--streams", "2", "--input", "."), "no --input")],
)
def test_frame_pipeline_refuses_bad_streams(args, message):
    result = run_pipeline("--mode", "devalloc", *args)
    assert result.returncode == 2 and message in result.stderr


def test_attention_example_matches_numpy_in_every_mode(tmp_path):
    result = run_script(
        ROOT / "examples" / "attention_scratch.py", "--steps", "2", "--sequences", "3",
        "--shortest", "3", "--longest", "40", "--heads", "2", "--dim", "4", "--threads", "4",
        "--out", str(tmp_path / "attention.json"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "every mode's output matches NumPy's" in result.stdout
    # Sequences up to 40 queries, 16 a block: three chunks of queries, the
    # shorter sequences' last ones empty; the results file has every mode.
    record = json.loads((tmp_path / "attention.json").read_text())
    assert [r["mode"] for r in record["results"]] == ["devalloc", "malloc", "prealloc"]
    assert all(r["ms_per_step"] > 0 and r["scratch_bytes"] > 0 for r in record["results"])
    rows = [line.split() for line in result.stdout.splitlines() if line.split()[:1] in (
        ["devalloc"], ["malloc"], ["prealloc"])]  # fmt: skip
    assert [row[0] for row in rows] == ["devalloc", "malloc", "prealloc"]
    # Held scratch: exactly what a step needs (malloc) is less than the worst case.
    assert float(rows[1][2]) < float(rows[2][2])


def test_the_counter_baseline_lists_what_the_static_lists_do_and_stops_at_its_end():
    """`counter_lists` (the benchmarks' hand-written baseline for the frame's list
    stage) gives the histograms and overlay of `fill_tiles`; with room for part
    of the points, the tiles past the end get empty lists and nothing is
    written outside `points` (the simulator checks every index)."""
    from numba import cuda

    from kernels import image as K

    height, width = 40, 70  # 2 x 3 tiles, the last row and column partial
    rng = np.random.default_rng(7)
    edges = (rng.random((height, width)) < 0.3).astype(np.uint8)
    img = rng.random((height, width)).astype(np.float32)
    rgb = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    ty, tx = K.tiles(height, width)
    at = ((tx, ty), (K.TILE, 8))
    d_edges, d_img, d_rgb = cuda.to_device(edges), cuda.to_device(img), cuda.to_device(rgb)
    palette = cuda.to_device(K.PALETTE)

    def run(lists):
        hist = cuda.to_device(np.full((ty * tx, K.BINS), -1, np.int32))  # poisoned
        overlay = cuda.to_device(np.full((height, width, 3), 7, np.uint8))
        starts, counts = lists()
        K.consume_tiles[at](points, starts, counts, d_rgb, palette, hist, overlay)
        return hist.copy_to_host(), overlay.copy_to_host(), counts.copy_to_host()

    def fixed():
        starts = cuda.to_device(np.arange(ty * tx, dtype=np.int64) * K.TILE * K.TILE)
        counts = cuda.to_device(np.full(ty * tx, -1, np.int64))
        K.fill_tiles[at](d_edges, d_img, starts, counts, points)
        return starts, counts

    def by_counter(room):
        def lists():
            starts = cuda.to_device(np.full(ty * tx, -1, np.int64))
            counts = cuda.to_device(np.full(ty * tx, -1, np.int64))
            used = cuda.to_device(np.zeros(1, np.int64))
            K.counter_lists[at](d_edges, d_img, used, points[:room], starts, counts)
            return starts, counts

        return lists

    points = cuda.to_device(np.full((ty * tx * K.TILE * K.TILE, K.POINT), -1, np.int32))
    hist, overlay, counts = run(fixed)
    assert counts.sum() == edges.sum() > 0 and (hist >= 0).all()
    got = run(by_counter(int(edges.sum())))  # room for exactly every point
    assert np.array_equal(got[0], hist) and np.array_equal(got[1], overlay)
    assert np.array_equal(got[2], counts)
    room = int(edges.sum()) // 2
    short = run(by_counter(room))[2]
    kept = short != 0
    assert 0 < short.sum() <= room and np.array_equal(short[kept], counts[kept])
    assert (short[counts != 0] == 0).any()  # some tiles found no room
