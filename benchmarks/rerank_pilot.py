"""A second stage that re-ranks a first stage's candidates: how much of the single pick it wins.

Issue 46's last model idea, measured before it is built: a trained run (the first stage) names,
for every train and valid kernel, config 0 and its `--top` best other configs; a second model
is trained by `tpu-tiles train` on those candidates alone (config 0 first, so the default
context still reads it), and the pair's pick is the second stage's first candidate. Its top-1
error is taken against each kernel's fastest config of all (not of the candidates), beside the
first stage's own pick, config 0, and the best a perfect second stage could pick.

The train kernels' candidates come from a first stage that trained on them (not out of fold,
so they are better than a new kernel's): a pilot's shortcut, said in its results.

    python benchmarks/rerank_pilot.py --work WORK --first RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tpu_tiles_models import scoring
from tpu_tiles_models.runs import TrainedRun

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="candidate data sets and second stages go here")
    p.add_argument("--first", nargs="+", required=True, help="first-stage model directories")
    p.add_argument("--top", type=int, default=15, help="other configs kept beside config 0")
    p.add_argument("--model_kwargs_json", default="{}", help="the second stage's keywords")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--early_stop", type=int, default=20)
    p.add_argument("--name", default="rerank_pilot", help="results file: <name>.md and .json")
    p.add_argument("--out", default=str(RESULTS))
    return p.parse_args(argv)


def first_scores(run: TrainedRun, split: str) -> dict[str, np.ndarray]:
    """`{file name: [configs] scores}` of a run (either stage) on `split`, its margin off."""
    model, dataset = run.load(run.train_args.data_root, split=split, progress=False)
    if getattr(model, "default_margin", None) is not None:
        model.set_default_margin(0.0)
    part = getattr(dataset, split)
    scored = scoring.score_split(model, part, dataset.stats, progress=False)
    return {os.path.basename(f): s.scores for f, s in zip(part.files, scored)}


def candidates(scores: np.ndarray, top: int) -> np.ndarray:
    """Config 0, then the `top` others the first stage ranks first (its order)."""
    others = 1 + np.argsort(scores[1:], kind="stable")[:top]
    return np.concatenate([[0], others])


def write_candidates(run: TrainedRun, top: int, root: Path) -> dict[str, np.ndarray]:
    """`root/{train,valid,test}`: each kernel with only its candidates' config rows (test as is);
    returns the first stage's scores of each valid kernel by file name."""
    source = Path(run.train_args.data_root)
    scored: dict[str, dict[str, np.ndarray]] = {}
    for split in ("train", "valid"):
        (root / split).mkdir(parents=True, exist_ok=True)
        scored[split] = first_scores(run, split)
        for name, scores in scored[split].items():
            rows = candidates(scores, top)
            with np.load(source / split / name) as z:
                arrays = {k: z[k] for k in z.files}
            for key in ("config_feat", "config_runtime", "config_runtime_normalizers"):
                arrays[key] = arrays[key][rows]
            np.savez(root / split / name, **arrays)
    (root / "test").mkdir(exist_ok=True)
    for f in sorted((source / "test").glob("*.npz")):
        (root / "test" / f.name).write_bytes(f.read_bytes())
    return scored["valid"]


def train_second(a: argparse.Namespace, data_root: Path, out: Path, seed: int) -> Path:
    """`tpu-tiles train` on the candidates (unless a run is there); its model directory."""
    done = sorted(out.glob("model_*"))
    if done:
        return done[0]
    cmd = [
        sys.executable,
        "-m",
        "tpu_tiles_models.cli",
        "train",
        "--model=ResidualSAGE",
        f"--model_kwargs_json={a.model_kwargs_json}",
        f"--data_root={data_root}",
        f"--out_dir={out}",
        f"--epochs={a.epochs}",
        f"--early_stop={a.early_stop}",
        f"--seed={seed}",
        "--no_progress",
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return next(out.glob("model_*"))


def picks(second: TrainedRun, source: Path, firsts: dict[str, np.ndarray], top: int) -> dict:
    """Mean top-1 errors on each valid kernel (in `source`) against its fastest config of all;
    `firsts`: the first stage's scores, which name each kernel's candidates."""
    seconds = first_scores(second, "valid")
    errors: dict[str, list[float]] = {k: [] for k in ("default", "first", "second", "perfect")}
    for name, first in firsts.items():
        with np.load(source / name) as z:
            runtimes = z["config_runtime"] / z["config_runtime_normalizers"]  # as the suite
        slowdown, kept = runtimes / runtimes.min() - 1.0, candidates(first, top)
        errors["default"].append(slowdown[0])
        errors["first"].append(slowdown[int(np.argmin(first))])
        errors["second"].append(slowdown[kept[int(np.argmin(seconds[name]))]])
        errors["perfect"].append(slowdown[kept].min())
    return {k: float(np.mean(v)) for k, v in errors.items()}


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    work = Path(a.work)
    results = []
    for first_dir in a.first:
        first = TrainedRun.open(first_dir)
        ta = first.train_args
        tag = f"{Path(ta.data_root).name}_{Path(first_dir).name}_top{a.top}"
        root = work / "data" / tag
        firsts = write_candidates(first, a.top, root)
        second_dir = train_second(a, root, work / "runs" / tag, ta.seed)
        source = Path(ta.data_root) / "valid"
        errors = picks(TrainedRun.open(second_dir), source, firsts, a.top)
        family = Path(ta.data_root).name.split("_")[0]
        first_label = "geometry" if "tile_geometry" in (ta.model_kwargs_json or "") else "bare"
        results.append(dict(family=family, seed=ta.seed, stage1=first_label, **errors))
        print(json.dumps(results[-1]), flush=True)
    out = Path(a.out)
    (out / f"{a.name}.json").write_text(json.dumps(results, indent=1) + "\n")
    write_table(results, a, out / f"{a.name}.md")


def write_table(results: list[dict], a: argparse.Namespace, path: Path) -> None:
    """Mean +- std over seeds per family and first stage."""
    lines = [
        f"`python benchmarks/rerank_pilot.py --work WORK --top {a.top} "
        f"--model_kwargs_json='{a.model_kwargs_json}' --epochs {a.epochs} "
        f"--early_stop {a.early_stop} --first <the suite's small-budget runs>`",
        "",
        "Top-1 error (runtime / normaliser) on every valid kernel against its fastest config "
        "of all. default: config 0; first: the first stage's own pick (config 0's margin "
        "off); second: the second stage's own pick (its margin off too) among config 0 and "
        f"the first stage's {a.top} best others (ResidualSAGE, {a.model_kwargs_json}, trained "
        "on those candidates of every train kernel; the train kernels' candidates are in "
        "sample for the first stage); perfect: the best of those candidates. Mean +- std "
        "over seeds.",
        "",
        "| family | first stage | seeds | default | first | second | perfect |",
        "|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["family"], r["stage1"]), []).append(r)
    for (family, first), rs in sorted(groups.items()):
        cells = []
        for k in ("default", "first", "second", "perfect"):
            v = np.array([r[k] for r in rs])
            cells.append(f"{v.mean():.4f} +- {v.std():.4f}")
        seeds = ",".join(str(r["seed"]) for r in rs)
        lines.append(f"| {family} | {first} | {seeds} | " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
