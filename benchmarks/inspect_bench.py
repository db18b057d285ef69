"""Times `tpu-tiles inspect` and its peak memory on data roots of different sizes (by hand).

    python benchmarks/inspect_bench.py --roots /tmp/tiny,/tmp/full --work /tmp/inspect_bench \
        --repeat 8

With `--repeat K`, the last root is also measured as a copy (written once under `--work`)
whose kernels hold their configs K times over: a stand-in for the real collection's 13.4
million configs until a synthetic family has them.

Each root gets one fresh process, `/usr/bin/time -v tpu-tiles inspect ROOT --no_progress
--json WORK/report_<i>.json --overwrite`: wall and CPU time and peak RSS come from `time -v`, the
root's size from the report itself. Peak RSS that stays flat from a tiny root to a full-size
one is the point: a kernel at a time, never a split. Writes
`benchmarks/results/inspect_bench.md` (and `.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
_TIME_FIELDS = {
    "wall": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)",
    "user": r"User time \(seconds\): (\S+)",
    "system": r"System time \(seconds\): (\S+)",
    "peak_kb": r"Maximum resident set size \(kbytes\): (\d+)",
}


def _seconds(clock: str) -> float:
    """`1:02.5` or `1:02:03` -> seconds."""
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total


def repeated(root: Path, out: Path, k: int) -> Path:
    """A copy of `root` whose kernels repeat their configs `k` times (made once, reused)."""
    done = out / ".complete"
    if done.exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    for path in sorted(root.glob("*/*.npz")):
        with np.load(path) as d:
            arrays = {key: d[key] for key in d.files}
        for key in ("config_feat", "config_runtime", "config_runtime_normalizers"):
            arrays[key] = np.concatenate([arrays[key]] * k)
        target = out / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        np.savez(target, **arrays)
    done.touch()
    return out


def measure(root: str, report: Path) -> dict:
    """One `tpu-tiles inspect` process on `root` under `/usr/bin/time -v`."""
    cli = [sys.executable, "-m", "tpu_tiles_models.cli", "inspect", root, "--no_progress"]
    cli += ["--json", str(report), "--overwrite"]
    done = subprocess.run(
        ["/usr/bin/time", "-v", *cli], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if done.returncode:
        raise SystemExit(f"{' '.join(cli)} failed:\n{done.stderr}")
    found = {k: re.search(rx, done.stderr).group(1) for k, rx in _TIME_FIELDS.items()}
    totals = json.loads(report.read_text())["totals"]
    return {
        "root": root,
        "kernels": totals["kernels"],
        "configs": totals["configs"],
        "wall_s": round(_seconds(found["wall"]), 1),
        "cpu_s": round(float(found["user"]) + float(found["system"]), 1),
        "peak_rss_mb": round(int(found["peak_kb"]) / 1024),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--roots", required=True, help="comma-separated data roots, smallest first")
    p.add_argument("--work", required=True, help="the reports go here")
    p.add_argument("--repeat", type=int, default=0, help="also the last root, configs K times")
    p.add_argument("--note", default="", help="a line printed under the table")
    a = p.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    roots = a.roots.split(",")
    if a.repeat > 1:
        roots.append(str(repeated(Path(roots[-1]), work / f"repeated_{a.repeat}x", a.repeat)))
    rows = [measure(root, work / f"report_{i}.json") for i, root in enumerate(roots)]
    lines = [
        f"`python benchmarks/inspect_bench.py {' '.join(argv or sys.argv[1:])}` (each root: "
        "`/usr/bin/time -v tpu-tiles inspect ROOT --no_progress --json REPORT`; "
        f"{os.cpu_count()} CPU cores, load average {load:.1f} at the start)",
        "",
        "| data root | kernels | configs | wall | CPU | peak RSS |",
        "|---|---|---|---|---|---|",
        *(
            f"| `{r['root']}` | {r['kernels']:,} | {r['configs']:,} | {r['wall_s']:.1f} s | "
            f"{r['cpu_s']:.1f} s | {r['peak_rss_mb']:,} MB |"
            for r in rows
        ),
    ]
    if a.repeat > 1:
        lines += [
            "",
            f"`{roots[-1]}` is `{roots[-2]}` with every kernel's configs repeated {a.repeat} "
            "times (`--repeat`), the real collection's size in configs.",
        ]
    if a.note:
        lines += ["", a.note]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "inspect_bench.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "inspect_bench.json").write_text(json.dumps({"load": load, "rows": rows}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
