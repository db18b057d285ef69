"""Times README's first command's demo and records what it printed, for README.

    python benchmarks/demo_bench.py [--out /tmp/demo_bench]

Runs `tpu-tiles demo --no_progress` in a fresh process into an empty folder, measures its wall
time and peak RSS, and writes `benchmarks/results/demo.md`: the command, the machine, the
time, and the demo's own `evaluation.csv` as a table (copied, never retyped).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/demo_bench", help="emptied, then the demo's folder")
    a = p.parse_args(argv)
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "tpu_tiles_models.cli", "demo", "--out", str(out), "--no_progress"]
    subprocess.run(cmd, check=True)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    with open(out / "evaluation.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    lines = [
        f"`tpu-tiles demo` (`python benchmarks/demo_bench.py`): {seconds:.0f} s, peak RSS "
        f"{peak_mb:.0f} MB, on {os.cpu_count()} CPU cores (load average {load:.1f} at the "
        f"start), Python {platform.python_version()}, TensorFlow {_tensorflow_version()}; "
        "validation split, every config of every kernel:",
        "",
        "| model | top-1 err | top-1 / default | top-5 err | top-10 err | score (1 - top-5) "
        "| OPA |",
        "|---|---|---|---|---|---|---|",
    ]
    default_top1 = next(float(r["top1"]) for r in rows if r["model"] == "default")
    for r in rows:
        ratio = f"{float(r['top1']) / default_top1:.2f}" if default_top1 else "-"
        lines.append(
            f"| {r['model']} | {r['top1']} | {ratio} | {r['top5']} | {r['top10']} | "
            f"{r['score']} | {r['opa']} |"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "demo.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _tensorflow_version() -> str:
    """The installed TensorFlow's version (the stack the demo ran on), without importing it."""
    from tpu_tiles_models import tensorflow_version

    return tensorflow_version() or "?"


if __name__ == "__main__":
    main()
