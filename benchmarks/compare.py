"""What devalloc buys over every other way: the comparisons, run and summed up.

Each comparison is a script of its own, run in a child process (each chooses its
memory manager, NRT or CUDA libraries before CUDA starts) that writes a JSON
file; `run_comparisons` collects them, and `summarize` turns them into one list
of "devalloc against X" rows: how many times faster devalloc is (above 1: it
is) and how much memory X holds against devalloc's, both from the same run.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# name: (command, seconds); each takes --out (the pipeline a folder)
COMPARISONS = {
    "host-frame": (["benchmarks/host_pools.py", "--frames", "1000", "--warmup", "50"], 300),
    "host-sizes": (["benchmarks/host_pools.py", "--workload", "sizes"], 420),
    "scratch": (["benchmarks/scratch.py"], 300),
    "device-peers": (["benchmarks/device_peers.py"], 300),
    "attention": (["examples/attention_scratch.py", "--steps", "10"], 300),
    "pipeline": (
        [
            "examples/frame_pipeline.py",
            "--benchmark",
            "--frames",
            "200",
            "--streams",
            "4",
            "--size",
            "1280x720",
            "--size",
            "1920x1080",
            "--size",
            "3840x2160",
        ],
        420,
    ),  # (each size: every mode, then devalloc and devalloc-graph on 1 and 4 streams)
}


def run_comparisons(names, progress=print):
    """Run the comparisons `names`; {name: its results, or {"error": why}}."""
    found = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            command, seconds = COMPARISONS[name]
            out = Path(folder) / name
            target = out if name == "pipeline" else out.with_suffix(".json")
            progress(f"comparison {name}: {' '.join(command)}")
            try:
                done = subprocess.run([sys.executable, *command, "--out", str(target)], cwd=ROOT,
                                      capture_output=True, text=True, timeout=seconds)  # fmt: skip
            except subprocess.TimeoutExpired:
                found[name] = {"error": f"took more than {seconds} s"}
                continue
            result = out / "pipeline.json" if name == "pipeline" else target
            if not result.exists():
                tail = " | ".join(done.stderr.strip().splitlines()[-4:])
                found[name] = {"error": f"exit {done.returncode}, no results: {tail}"}
                continue
            found[name] = json.loads(result.read_text())
            if done.returncode:
                found[name]["exit"] = done.returncode
    return found


def load_comparisons(folder):
    """The results of comparisons run before, from `folder`/<name>.json."""
    files = {name: Path(folder) / f"{name}.json" for name in COMPARISONS}
    return {name: json.loads(file.read_text()) for name, file in files.items() if file.exists()}


def _row(scenario, other, devalloc_cost, other_cost, devalloc_bytes=None, other_bytes=None):
    return {
        "scenario": scenario,
        "other": other,
        "speedup": other_cost / devalloc_cost,
        "memory_ratio": other_bytes / devalloc_bytes if devalloc_bytes and other_bytes else None,
    }


def summarize(comparisons):
    """The "devalloc against X" rows of every comparison that ran (one buffer
    at a time, `host-sizes`, has its own table and plot: a frame's arrays are
    what a frame costs)."""
    rows = []
    frame = comparisons.get("host-frame", {}).get("results", [])
    timed = {r["row"]: r["median_us"] for r in frame if "median_us" in r}
    if "devalloc-frame" in timed:
        for name, us in timed.items():
            if not name.startswith("devalloc"):
                rows.append(
                    _row("host: a 1080p frame's 13 arrays", name, timed["devalloc-frame"], us)
                )
    scratch = {r["mode"]: r for r in comparisons.get("scratch", {}).get("results", [])
               if "host_us" in r}  # fmt: skip
    mine = scratch.get("devalloc-warp_slab")
    for name, r in scratch.items():
        if mine and not name.startswith("devalloc"):
            costs = mine["host_us"]["median"], r["host_us"]["median"]
            held = mine["held_bytes"], r["held_bytes"]
            rows.append(_row("per-launch scratch", name, *costs, *held))
    attention = {r["mode"]: r for r in comparisons.get("attention", {}).get("results", [])}
    mine = attention.get("devalloc")
    for name, r in attention.items():
        if mine and name != "devalloc":
            costs = mine["ms_per_step"], r["ms_per_step"]
            held = mine["scratch_bytes"], r["scratch_bytes"]
            rows.append(_row("attention scratch", name, *costs, *held))
    pipeline = comparisons.get("pipeline", {}).get("results", [])
    by = {(r["mode"], r["size"]): r for r in pipeline}
    for (mode, size), r in by.items():
        if size != "1920x1080":
            continue
        ours = {"malloc": "devalloc", "malloc-pool": "devalloc", "static": "devalloc",
                "static-graph": "devalloc-graph"}.get(mode)  # fmt: skip
        mine = by.get((ours, size))
        if mine:
            costs, held = (mine["median_ms"], r["median_ms"]), (mine["peak_mib"], r["peak_mib"])
            rows.append(_row(f"frame pipeline 1080p ({ours})", mode, *costs, *held))
    peers = comparisons.get("device-peers", {}).get("results", [])
    rate = {(r["test"], r["allocator"], r["size"]): r["g_per_s"] for r in peers if "g_per_s" in r}
    for (test, name, size), g in rate.items():
        mine = rate.get((test, "devalloc warp_slab", size))
        if mine and not name.startswith("devalloc"):
            rows.append(_row(f"in-kernel, {test}'s test, {size} B", name, 1 / mine, 1 / g))
    return rows
