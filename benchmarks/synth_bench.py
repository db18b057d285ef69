"""Times `tpu-tiles synth --scale full` on 1 and several workers, for docs/full_scale.md (by hand).

    python benchmarks/synth_bench.py --work /tmp/synth_bench --families fusion,roofline \
        --sample ../shared/data/sample_submission.csv

Each run is a fresh `tpu-tiles synth` process (`benchmarks/synth.py`, which knows the benchmark
families too) into an empty folder; the sets written with different worker counts are compared
byte for byte. Writes `benchmarks/results/synth_bench.md`.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
SYNTH = Path(__file__).resolve().parent / "synth.py"  # `tpu-tiles synth`, every family


def _synth(out: Path, family: str, workers: int, sample: str) -> float:
    """Wall seconds of one `tpu-tiles synth --scale full` into an emptied `out`."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, str(SYNTH), str(out), "--scale", "full"]
    cmd += ["--family", family, "--num_workers", str(workers), "--no_progress"]
    cmd += ["--test_ids_from", sample] if sample else []
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _same_files(a: Path, b: Path) -> bool:
    """Whether two trees hold the same file names with the same bytes."""
    names = sorted(p.relative_to(a) for p in a.rglob("*.npz"))
    if names != sorted(p.relative_to(b) for p in b.rglob("*.npz")):
        return False
    return all(filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def _shape(root: Path) -> dict:
    """Config counts per kernel and the largest graph of a data set."""
    counts, nodes = [], 0
    for path in root.rglob("*.npz"):
        with np.load(path) as d:
            counts.append(len(d["config_feat"]))
            nodes = max(nodes, len(d["node_opcode"]))
    counts = np.array(counts)
    return dict(
        configs=int(counts.sum()),
        median=int(np.median(counts)),
        max=int(counts.max()),
        over_9000=int((counts > 9000).sum()),
        kernels=len(counts),
        nodes=nodes,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="the data sets go here (emptied per run)")
    p.add_argument("--families", default="fusion,roofline")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--sample", default="", help="sample_submission.csv for the test ids")
    a = p.parse_args(argv)
    work = Path(a.work)
    load = os.getloadavg()[0]
    rows = []
    for family in a.families.split(","):
        one, many = work / f"{family}_1", work / f"{family}_{a.workers}"
        t1, tn = _synth(one, family, 1, a.sample), _synth(many, family, a.workers, a.sample)
        shape = _shape(one)
        rate = shape["kernels"] / t1
        rows.append(
            f"| `{family}` | {shape['configs']:,} | {shape['median']} / {shape['max']:,} / "
            f"{shape['over_9000']} kernels | {shape['nodes']} | {t1:.1f} s ({rate:.0f} kernels/s)"
            f" | {tn:.1f} s ({t1 / tn:.2f}x) | {'yes' if _same_files(one, many) else '**no**'} |"
        )
        shutil.rmtree(many)
        shutil.rmtree(one)
    lines = [
        f"`python benchmarks/synth_bench.py {' '.join(argv or sys.argv[1:])}` (each run: "
        f"`tpu-tiles synth OUT --scale full --family F --num_workers W --no_progress`; "
        f"{os.cpu_count()} CPU cores, load average {load:.1f} at the start)",
        "",
        f"| family | configs | per kernel: median / max / over 9,000 | nodes, max | 1 worker | "
        f"{a.workers} workers | same bytes |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "synth_bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
