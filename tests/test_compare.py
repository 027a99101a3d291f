"""benchmarks/run.py --compare: the comparisons with other tools run in child
processes, land in one results file, and are summed up as "devalloc against X"
rows; one that cannot run here is an error in the file, not a crash."""

import json
from pathlib import Path

import pytest

from devalloc.backend import SIMULATOR
from helpers import run_script

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not SIMULATOR, reason="the GPU runs the full comparisons")


def test_comparisons_land_in_one_file_with_their_summary(tmp_path):
    out = tmp_path / "report.json"
    done = run_script(ROOT / "benchmarks" / "run.py", "--suites", "--compare", "attention",
                      "scratch", "device-peers", "--out", str(out), timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    comparisons = data["comparisons"]
    assert [r["mode"] for r in comparisons["attention"]["results"]] == [
        "devalloc", "malloc", "prealloc"]  # fmt: skip
    assert "devalloc-warp_slab" in {r["mode"] for r in comparisons["scratch"]["results"]}
    # Gallatin and Ouroboros are CUDA C++: on the simulator the comparison fails, said so.
    assert "needs a GPU" in comparisons["device-peers"]["error"]
    assert "comparison device-peers failed" in done.stdout
    rows = data["summary"]
    scenarios = {r["scenario"] for r in rows}
    assert scenarios == {"attention scratch", "per-launch scratch"}
    assert {r["other"] for r in rows if r["scenario"] == "attention scratch"} == {
        "malloc", "prealloc"}  # fmt: skip
    for row in rows:
        assert row["speedup"] > 0 and row["memory_ratio"] > 0, row
    # The worst-case buffers hold more than devalloc's arena for the same work.
    static = next(r for r in rows if r["other"] == "prealloc")
    attention = {r["mode"]: r for r in comparisons["attention"]["results"]}
    held = {mode: r["scratch_bytes"] for mode, r in attention.items()}
    assert static["memory_ratio"] == pytest.approx(held["prealloc"] / held["devalloc"])
    assert out.with_suffix(".summary.png").stat().st_size > 10_000
