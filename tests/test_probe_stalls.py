"""benchmarks/probe_stalls.py --summarize: Nsight Compute's per-instruction CSV
becomes, per kernel, the code a launch ran (instructions, stretches, cache
lines) and its warp samples by stall reason, as JSON and a plot."""

import csv
import json

from helpers import ROOT, run_script

SCRIPT = ROOT / "benchmarks" / "probe_stalls.py"
HEADER = ["Address", "Source", "# Samples", "Instructions Executed", "stall_no_inst",
          "stall_long_sb", "stall_no_inst (Not Issued)"]  # fmt: skip


def write_csv(path, kernels):
    """Nsight Compute's ``--page source --csv`` layout: per kernel a name row, a
    header row, then (address, samples, executed, no_inst, long_sb) rows."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        for name, rows in kernels:
            out.writerow(["Kernel Name", name])
            out.writerow(HEADER)
            for address, samples, executed, no_inst, long_sb in rows:
                out.writerow([hex(address), "NOP ;", samples, executed, no_inst, long_sb, 99])


def test_summary_counts_the_code_run_and_the_stalls(tmp_path):
    base = 0x7F0000000000
    # devalloc: 3 run in two stretches (0x00-0x10, then 0x200), over two 128 B
    # lines; 0x100 never ran. By hand: all 2 run, one stretch, one line.
    devalloc = [(base, 5, 320, 4, 1), (base + 0x10, 3, 320, 3, 0),
                (base + 0x100, 0, 0, 0, 0), (base + 0x200, 2, 40, 0, 2)]  # fmt: skip
    by_hand = [(base, 4, 320, 1, 3), (base + 0x10, 0, 320, 0, 0)]
    source = tmp_path / "stalls.csv"
    write_csv(source, [("kernels::single_shot_by_hand(long long)", by_hand),
                       ("_3cdynamic_3e::single_shot[abi:v1](long long)", devalloc)])  # fmt: skip
    out = tmp_path / "stalls.json"
    done = run_script(SCRIPT, "--summarize", f"10000={source}", "--out", str(out), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(out.read_text())["10000"]
    assert set(summary) == {"devalloc", "by hand"}
    ours = summary["devalloc"]
    assert (ours["instructions"], ours["instructions_run"]) == (4, 3)
    assert (ours["stretches_run"], ours["lines_run"]) == (2, 2)
    assert ours["stalls"] == {"no_inst": 7, "long_sb": 3}  # (not-issued columns left out)
    assert ours["no_instruction_share"] == 0.7
    hand = summary["by hand"]
    assert (hand["instructions_run"], hand["stretches_run"], hand["lines_run"]) == (2, 1, 1)
    assert out.with_suffix(".png").stat().st_size > 0
    assert "70.0% waiting for instructions" in done.stdout


def test_summarize_refuses_what_is_not_a_threads_and_file_pair(tmp_path):
    for bad in ("stalls.csv", f"many={tmp_path}/none.csv", f"10={tmp_path}/none.csv"):
        done = run_script(SCRIPT, "--summarize", bad, "--out", str(tmp_path / "x.json"))
        assert done.returncode == 2 and "THREADS=CSV" in done.stderr
