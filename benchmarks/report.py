"""Markdown tables of a results file, as the README shows them.

python benchmarks/report.py benchmarks/results/h200-2026-11-30.json
python benchmarks/report.py benchmarks/results/h200-2026-11-30-pipeline.json
"""

import json
import sys
from pathlib import Path


def allocators(data):
    lines = ["| target | measured | goal | met |", "| --- | --- | --- | --- |"]
    for t in data["targets"]:
        lines.append(
            f"| {t['target']} | {t['measured']} | {t['goal']} | {'yes' if t['met'] else 'no'} |"
        )
    lines += ["", "| allocator | size | threads | allocations/thread | median ms | allocations/s |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for r in data["results"].get("sustained", []):
        lines.append(
            f"| {r['allocator']} | {r['size']} | {r['threads']:,} | {r['iters']} "
            f"| {r['median_ms']:.4f} | {r['allocs_per_s']:.3g} |"
        )
    return lines


def pipeline(data):
    lines = [
        "| mode | size | median ms/frame | host ms/frame | GPU ms/frame | frames/s "
        "| cudaMalloc/frame | peak MiB held |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["results"]:
        host, gpu = (f"{r[k]:.3f}" if k in r else "-" for k in ("host_ms", "gpu_ms"))
        lines.append(
            f"| {r['mode']} | {r['size']} | {r['median_ms']:.3f} | {host} | {gpu} "
            f"| {r['fps']:.0f} | {r['mallocs_per_frame']:.0f} | {r['peak_mib']:.1f} |"
        )
    return lines


if __name__ == "__main__":
    for name in sys.argv[1:]:
        data = json.loads(Path(name).read_text())
        env = data["environment"]
        print(f"{env['gpu']}, numba-cuda {env['numba_cuda']}, {env['date']}\n")
        print("\n".join(pipeline(data) if "pipeline" in name else allocators(data)))
        print()
