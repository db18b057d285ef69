"""A second stage that re-ranks a first stage's candidates: how much of the single pick it wins.

Issue 46's last model idea, measured before it is built: a trained run (the first stage) names,
for every train and valid kernel, config 0 and its `--top` best other configs; a second model
is trained by `tpu-tiles train` on those candidates alone (config 0 first, so the default
context still reads it), and the pair's pick is the second stage's first candidate. Its top-1
error is taken against each kernel's fastest config of all (not of the candidates), beside the
first stage's own pick, config 0, and the best a perfect second stage could pick.

With `--folds 0` the train kernels' candidates come from the first stage that trained on them
(better than a new kernel's: the pilot's shortcut, said in its results). With `--folds K` they
are out of fold: K copies of the first stage (its flags and seed) are trained, each on the train
kernels outside one fold, and each names the candidates of its own fold's kernels; the valid
kernels' candidates still come from the first stage itself, as a user's would.

    python benchmarks/rerank_pilot.py --work WORK --folds 2 --first RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from tpu_tiles_models import margin, scoring
from tpu_tiles_models.runs import TrainedRun

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = ("default", "first", "first_rule", "second", "second_rule", "perfect")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="candidate data sets and second stages go here")
    p.add_argument("--first", nargs="+", required=True, help="first-stage model directories")
    p.add_argument("--top", type=int, default=15, help="other configs kept beside config 0")
    p.add_argument("--model_kwargs_json", default="{}", help="the second stage's keywords")
    p.add_argument("--folds", type=int, default=0, help="train candidates out of K folds (0: in)")
    p.add_argument(
        "--second_flags", default="", help="more `tpu-tiles train` flags of the second stage"
    )
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--early_stop", type=int, default=20)
    p.add_argument("--name", default="rerank_pilot", help="results file: <name>.md and .json")
    p.add_argument("--out", default=str(RESULTS))
    return p.parse_args(argv)


def first_scores(run: TrainedRun, split: str, root: Path | None = None) -> dict[str, np.ndarray]:
    """`{file name: [configs] scores}` of a run (either stage) on `split` of `root` (default:
    its own data), its margin off."""
    model, dataset = run.load(root or run.train_args.data_root, split=split, progress=False)
    if getattr(model, "default_margin", None) is not None:
        model.set_default_margin(0.0)
    part = getattr(dataset, split)
    scored = scoring.score_split(model, part, dataset.stats, progress=False)
    return {os.path.basename(f): s.scores for f, s in zip(part.files, scored)}


def candidates(scores: np.ndarray, top: int) -> np.ndarray:
    """Config 0, then the `top` others the first stage ranks first (its order)."""
    others = 1 + np.argsort(scores[1:], kind="stable")[:top]
    return np.concatenate([[0], others])


def link_split(source: Path, target: Path, names: list[str]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        if not (target / name).exists():
            (target / name).symlink_to((source / name).resolve())


def fold_scores(first: TrainedRun, folds: int, work: Path, tag: str) -> dict[str, np.ndarray]:
    """Out-of-fold scores of every train kernel: `folds` copies of `first`'s training, each on
    the train kernels outside one fold (every `folds`-th file in name order), score that fold."""
    source = Path(first.train_args.data_root)
    names = sorted(f.name for f in (source / "train").glob("*.npz"))
    scores: dict[str, np.ndarray] = {}
    for k in range(folds):
        held = names[k::folds]
        root = work / "data" / f"{tag}_fold{k}"
        link_split(source / "train", root / "train", sorted(set(names) - set(held)))
        for split in ("valid", "test"):
            link_split(
                source / split, root / split, sorted(f.name for f in (source / split).glob("*.npz"))
            )
        out = work / "runs" / f"{tag}_fold{k}"
        if not sorted(out.glob("model_*")):
            args = first.train_args.replace(
                data_root=str(root),
                out_dir=str(out),
                results_csv="",
                cache_dir="",
                tensorboard="",
                no_progress=True,
                overwrite=False,
            )
            cmd = [sys.executable, "-m", "tpu_tiles_models.cli", "train", *args.to_argv()]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        half = TrainedRun.open(next(out.glob("model_*")))
        held_root = work / "data" / f"{tag}_held{k}"
        link_split(source / "train", held_root / "valid", held)
        scores.update(first_scores(half, "valid", held_root))
    return scores


def write_candidates(
    run: TrainedRun, top: int, root: Path, train_scores: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """`root/{train,valid,test}`: each kernel with only its candidates' config rows (test as is);
    the train kernels' candidates from `train_scores` where given (out of fold), else from
    `run`; returns the first stage's scores of each valid kernel by file name."""
    source = Path(run.train_args.data_root)
    scored: dict[str, dict[str, np.ndarray]] = {}
    for split in ("train", "valid"):
        (root / split).mkdir(parents=True, exist_ok=True)
        given = train_scores if split == "train" else None
        scored[split] = given if given is not None else first_scores(run, split)
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
        *shlex.split(a.second_flags),
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return next(out.glob("model_*"))


def rule_picks(kernels: list[tuple[np.ndarray, np.ndarray]]) -> list[int]:
    """Each kernel's pick by a run's rule, on `(runtimes, scores)` pairs: config 0's margin
    fitted on the other folds (`margin.fold_margins`) where that lowers the mean top-1 error
    below the scores' own; else the scores' own pick. This is `margin.choose` as it was when
    the rerank tables were written, before its third choice (`margin.ALWAYS`): kept so that
    they rerun as written; `margin.choose(kernels).folds` gives today's rule."""
    own = [int(np.argmin(s)) for _, s in kernels]
    folds = margin.fold_margins(kernels)
    crossed = [int(np.argmin(margin.with_margin(s, m))) for (_, s), m in zip(kernels, folds)]

    def mean_error(chosen: list[int]) -> float:
        return float(np.mean([r[i] / r.min() for (r, _), i in zip(kernels, chosen)]))

    return crossed if mean_error(crossed) < mean_error(own) else own


def picks(second: TrainedRun, source: Path, firsts: dict[str, np.ndarray], top: int) -> dict:
    """Mean top-1 errors on each valid kernel (in `source`) against its fastest config of all;
    `firsts`: the first stage's scores, which name each kernel's candidates."""
    seconds = first_scores(second, "valid")
    runtimes, kept = {}, {}
    for name, first in firsts.items():
        with np.load(source / name) as z:
            runtimes[name] = z["config_runtime"] / z["config_runtime_normalizers"]  # as the suite
        kept[name] = candidates(first, top)
    names = list(firsts)
    first_rule = rule_picks([(runtimes[n], firsts[n]) for n in names])
    second_rule = rule_picks([(runtimes[n][kept[n]], seconds[n]) for n in names])
    errors: dict[str, list[float]] = {k: [] for k in COLUMNS}
    for i, name in enumerate(names):
        slowdown, rows = runtimes[name] / runtimes[name].min() - 1.0, kept[name]
        errors["default"].append(slowdown[0])
        errors["first"].append(slowdown[int(np.argmin(firsts[name]))])
        errors["first_rule"].append(slowdown[first_rule[i]])
        errors["second"].append(slowdown[rows[int(np.argmin(seconds[name]))]])
        errors["second_rule"].append(slowdown[rows[second_rule[i]]])
        errors["perfect"].append(slowdown[rows].min())
    return {k: float(np.mean(v)) for k, v in errors.items()}


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    work = Path(a.work)
    results = []
    for first_dir in a.first:
        first = TrainedRun.open(first_dir)
        ta = first.train_args
        tag = f"{Path(ta.data_root).name}_{Path(first_dir).name}"
        oof = fold_scores(first, a.folds, work, tag) if a.folds else None
        tag += f"_top{a.top}" + (f"_oof{a.folds}" if a.folds else "")
        root = work / "data" / tag
        firsts = write_candidates(first, a.top, root, oof)
        kwargs = json.loads(a.model_kwargs_json)  # one second stage per keywords
        second = [f"_{k}-{v}" for k, v in sorted(kwargs.items())] + shlex.split(a.second_flags)
        runs = work / "runs" / (tag + "".join(second))
        second_dir = train_second(a, root, runs, ta.seed)
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
        f"--early_stop {a.early_stop} --folds {a.folds}"
        + (f" --second_flags='{a.second_flags}'" if a.second_flags else "")
        + " --first <the suite's small-budget runs>`",
        "",
        "Top-1 error (runtime / normaliser) on every valid kernel against its fastest config "
        "of all. default: config 0; first: the first stage's own pick (config 0's margin "
        "off); second: the second stage's own pick (its margin off too) among config 0 and "
        f"the first stage's {a.top} best others (ResidualSAGE, {a.model_kwargs_json}, trained "
        "on those candidates of every train kernel; the train kernels' candidates are "
        + (
            f"out of fold: from {a.folds} copies of the first stage, each trained without "
            "one fold of them"
            if a.folds
            else "in sample for the first stage"
        )
        + "); perfect: the best of those candidates. ', rule': the pick with config 0's "
        "margin fitted on the other valid kernels (5 folds) where that lowers the mean, as a "
        "run's reported rule. "
        "Mean +- std over seeds.",
        "",
        "| family | first stage | seeds | default | first | first, rule | second | second, rule "
        "| perfect |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["family"], r["stage1"]), []).append(r)
    for (family, first), rs in sorted(groups.items()):
        cells = []
        for k in COLUMNS:
            if any(k not in r for r in rs):  # a results file from before the column
                cells.append("-")
                continue
            v = np.array([r[k] for r in rs])
            cells.append(f"{v.mean():.4f} +- {v.std():.4f}")
        seeds = ",".join(str(r["seed"]) for r in rs)
        lines.append(f"| {family} | {first} | {seeds} | " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
