"""benchmarks/scratch.py: per-launch variable scratch, every mode against NumPy.

On the simulator every mode but malloc-async (cuda.core needs a GPU) runs with
tiny sizes; the PTX checks (marker ``ptx``) compile its kernels for sm_90,
the NRT kernel in a process of its own (NRT is chosen before Numba is imported)."""

import json
import math
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from devalloc.backend import SIMULATOR

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "scratch.py"
sys.path.insert(0, str(SCRIPT.parent))

import scratch  # noqa: E402

from helpers import compile_all, env_with_root  # noqa: E402

TINY = ["--threads", "40", "--min-length", "2", "--max-length", "24", "--launches", "2",
        "--warmup", "1", "--sets", "3"]  # fmt: skip
# (cuda.core's cudaMallocAsync needs a GPU: on the simulator, malloc-async is skipped)
RUNNABLE = [mode for mode in scratch.MODES if not (SIMULATOR and mode == "malloc-async")]


@pytest.fixture(scope="module")
def setup():
    return scratch.Setup(scratch.parse(TINY))


# -- the answer and its check ------------------------------------------------------------


def test_reference_is_what_a_plain_loop_computes():
    signal, draws = scratch.make_problem(300, 1, 70, sets=2, seed=3)
    for lengths in draws:
        expected = scratch.reference(signal, lengths)
        for i, n in enumerate(lengths):
            running = np.cumsum(signal[i : i + n], dtype=np.float32)
            k = int(np.searchsorted(running, running[-1] / 2, side="left"))
            assert expected[i] == np.float32(k) + running[k] / running[-1], i


def test_lengths_are_skewed_and_reach_the_worst_case():
    _, draws = scratch.make_problem(1 << 14, 8, 512, sets=2, seed=1)
    for lengths in draws:
        assert lengths.dtype == np.int32
        assert lengths.min() >= 8 and lengths.max() == 512
        assert lengths.max() > 5 * lengths.mean()  # the worst case is far from the mean
    assert not np.array_equal(draws[0], draws[1])  # each launch's draw differs


def test_check_refuses_wrong_outputs():
    signal, (lengths,) = scratch.make_problem(50, 2, 30, sets=1)
    expected = scratch.reference(signal, lengths)
    scratch.check(expected.copy(), expected, "exact")
    for wrong in (expected[7] * np.float32(1 + 1e-5), np.nan, expected[7] + 1):
        out = expected.copy()
        out[7] = wrong
        with pytest.raises(scratch.CheckError, match=r"exact: 1 of 50 threads differ.*thread 7"):
            scratch.check(out, expected, "exact")
    with pytest.raises(scratch.CheckError, match="shape"):
        scratch.check(expected[:-1], expected, "short")


# -- every mode on the simulator ---------------------------------------------------------


@pytest.mark.parametrize("mode", RUNNABLE)
def test_each_mode_writes_numpys_answer(setup, mode):
    row, out, used = scratch.run_mode(mode, setup)
    expected = scratch.reference(setup.signal_host, setup.lengths_host[used])
    assert not np.isnan(out).any()  # the poison was overwritten everywhere
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    scratch.check(out, expected, mode)
    # A deliberately wrong reference, another launch's lengths, is caught.
    other = scratch.reference(setup.signal_host, setup.lengths_host[(used + 1) % 3])
    with pytest.raises(scratch.CheckError, match=mode):
        scratch.check(out, other, mode)
    assert used == 2  # the last launch: (3 sizing frames for devalloc +) 1 warm-up + 2 timed
    assert row["held_bytes"] > 0


def test_modes_hold_what_they_should(setup):
    static, _, _ = scratch.run_mode("static-worst", setup)
    malloc, _, used = scratch.run_mode("malloc", setup)
    assert static["held_bytes"] == 40 * 24 * 4
    assert malloc["held_bytes"] == 4 * int(setup.lengths_host[used].sum())
    assert set(malloc["parts_us"]) == {"offsets", "allocate", "kernel"}
    arena_row, _, _ = scratch.run_mode("devalloc-warp_slab", setup)
    assert arena_row["peak_used_bytes"] <= arena_row["held_bytes"]
    assert arena_row["resizes_while_timed"] == 0  # sized before the timing


def test_malloc_async_is_skipped_with_the_reason_on_the_simulator(setup):
    if not SIMULATOR:
        pytest.skip("runs on the GPU")
    row = scratch.measure_mode("malloc-async", setup)
    assert "simulator" in row["skipped"] and "host_us" not in row


def test_main_writes_results_and_a_plot(tmp_path, capsys):
    out = tmp_path / "scratch.json"
    assert scratch.main([*TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "every mode that ran matches NumPy's answer" in printed
    data = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    env = data["environment"]
    assert env["simulator"] is SIMULATOR and env["date"] and "--threads 40" in env["command"]
    assert data["parameters"]["threads"] == 40 and data["parameters"]["max_length"] == 24
    assert 0 < data["needed_bytes"] < 40 * 24 * 4
    rows = {row["mode"]: row for row in data["results"]}
    assert list(rows) == list(scratch.MODES)
    for mode, row in rows.items():
        if "skipped" in row:
            assert mode == "malloc-async" and SIMULATOR and row["skipped"]
            continue
        assert row["check"] == "ok", row
        times = row["host_us"]
        assert all(math.isfinite(t) and t > 0 for t in times.values()), row
        assert times["p10"] <= times["median"] <= times["p90"]
        assert row["held_bytes"] > 0 and row["launches"] == 2
        assert mode in printed
    assert rows["static-worst"]["held_bytes"] >= rows["malloc"]["held_bytes"]


def test_a_mode_with_a_wrong_answer_fails_the_run(tmp_path, monkeypatch, capsys):
    wrong = scratch.reference

    def off_by_one(signal, lengths):
        return wrong(signal, lengths) + 1

    monkeypatch.setattr(scratch, "reference", off_by_one)
    out = tmp_path / "r.json"
    assert scratch.main([*TINY, "--modes", "static-worst", "--out", str(out)]) == 1
    (row,) = json.loads(out.read_text())["results"]
    assert "differ from NumPy's answer" in row["check"]
    assert "FAILED: static-worst" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--threads", "0"], "--threads must be at least 1 (got 0)"),
        (["--max-length", "-1"], "--max-length must be from --min-length (8)"),
        (["--min-length", "0"], "--min-length must be at least 1"),
        (["--max-length", str(1 << 21)], "to 1048576"),
        (["--launches", "0"], "--launches and --sets must be at least 1"),
        (["--warmup", "-1"], "--warmup at least 0"),
        (["--nrt-heap-mib", "0"], "--nrt-heap-mib must be at least 1"),
        (["--modes", "cudaMalloc"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_with_a_message(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        scratch.main(args)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_script_refuses_bad_arguments_as_a_user_runs_it():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--threads", "0"],
        cwd=ROOT, env=env_with_root(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--threads must be at least 1" in result.stderr and "Traceback" not in result.stderr


def test_nrt_failure_is_reported_in_its_row():
    """A failing NRT process (here: killed by a bad option) is an error row, not a crash."""
    args = Namespace(**vars(scratch.parse(TINY)))
    args.nrt_heap_mib = -5  # refused by the child's parser
    setup = scratch.Setup(args)
    row = scratch.measure_mode("nrt", setup)
    assert "NRT process exited 2" in row["error"] and "--nrt-heap-mib" in row["error"]


# -- sm_90 PTX, no GPU needed ------------------------------------------------------------

CC = (9, 0)


@pytest.mark.ptx
def test_kernels_compile_for_sm90():

    compiled = compile_all(scratch, CC)
    assert len(compiled) == len(scratch.PTX_SIGNATURES) + 1
    release = os.environ.get("DEVALLOC_TEST_NVVM_RELEASE")
    for key, ptx in compiled.items():
        assert ".target sm_90" in ptx and ".entry" in ptx, key
        if release:  # compiled with the libnvvm the suite asked for
            assert f"release {release}," in ptx, key
    # The search reads the scratch back: the stores into it are kept.
    assert "st.global.f32" in compiled["median_arena", "warp_slab"]


NRT_PTX = """
import ctypes, os, sys
if os.environ.get("DEVALLOC_TEST_NVVM"):  # the libnvvm the suite runs with (conftest.py)
    ctypes.CDLL(os.environ["DEVALLOC_TEST_NVVM"], mode=ctypes.RTLD_GLOBAL)
sys.path.insert(0, {benchmarks!r})
import scratch
from numba import cuda
from devalloc.numba_compat import compiling_for
with compiling_for((9, 0)):
    ptx, _ = cuda.compile_ptx(scratch.median_nrt.py_func, scratch.NRT_SIGNATURE, cc=(9, 0))
print(ptx)
"""


@pytest.mark.ptx
def test_the_nrt_kernel_compiles_for_sm90_with_nrt_on():
    code = NRT_PTX.format(benchmarks=str(SCRIPT.parent))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=env_with_root(NUMBA_ENABLE_CUDASIM="0", NUMBA_CUDA_ENABLE_NRT="1"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert ".target sm_90" in result.stdout
    assert "NRT_MemInfo_alloc" in result.stdout  # np.empty is NRT's allocation
    release = os.environ.get("DEVALLOC_TEST_NVVM_RELEASE")
    if release:  # compiled with the libnvvm the suite asked for
        assert f"release {release}," in result.stdout
