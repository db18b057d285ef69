"""The protocol that can tell a real win from noise (issue 60), run by hand.

Each family is drawn twice (`--data_seeds`, two data sets of the same generator) and every arm
(a model and its training flags, `ARMS`) is trained on each draw with two seeds (`--seeds`),
on each family and on its shuffled copy (config 0 not special). Training selects its epoch and
fits config 0's rule on the validation kernels only; the protocol then scores each finished run
on a held-out test split of `--heldout` kernels (at least 300) that nothing else reads: the
same kernels as the data set's test split, made again by the generator with their runtimes
(the data set's own test split has zeros, as the real one). Budgets are optimiser steps
(usable train kernels // batch x epochs). While an arm trains, its held-out top-5 is measured
every `--curve_every` epochs (the weights of that epoch, before any selection, ranked by the
scores alone): the learning curve, and the comparison at matched training CPU seconds.

A comparison of arm A with the reference R is paired per kernel: on each draw, each kernel's
error under A (mean over seeds) minus under R; its figure is the mean over kernels and draws,
its 90% interval a bootstrap over draws and, within each, kernels (`bootstrap`). The decision
rule (`decide`): a default changes when its primary endpoint (top-5 error on `archetype` and on
its shuffled copy) is lower with the interval's upper bound below 0 on both, and on no other
family or shuffled copy is it worse than the non-inferiority margin at the interval's bound:
top-5 10% of the reference's error, and where config 0 is the compiler's default, the top-1
error of the ranking by each run's own rule (the single pick) +0.003.

    python benchmarks/protocol.py --work W --families archetype \
        --arms bare32,gated32,w48,gated48 --name protocol_archetype
    python benchmarks/protocol.py --work W --families archetype --tabulate   # tables only

Writes `benchmarks/results/<name>.json` (every run's figures and every comparison) and
`<name>.md` (the tables and the verdict). The statistics and the rule need numpy alone; the
rest imports suite.py (its data sets and shuffled copies) and the package when it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
SHUFFLED = "-shuffled"  # suite.SHUFFLED: a family's copy with its configs shuffled
PRIMARY = "archetype"  # the primary endpoint's family (with its shuffled copy)
# Families whose config 0 is the compiler's default (the single pick's non-inferiority counts
# there); `archetype` logs an ordinary tile first, a shuffled copy anything.
DEFAULT_FIRST = ("roofline", "alt", "fusion", "inference")
LEVEL = 0.90  # the intervals' coverage
BOOTSTRAP = 4000  # resamples
MARGIN_TOP5 = 0.10  # non-inferiority: top-5 error at most 10% (relative) above the reference's
MARGIN_TOP1 = 0.003  # and the single pick's top-1 at most +0.003 where config 0 is the default
MIN_HELDOUT = 300

# Arms: label -> (model class, model keywords, training flags over the budget's). Keywords are
# named in full, so that a label means one model whatever the class defaults become.
_BARE = {"hidden_dim": 32, "config_attention": False}
ARMS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "bare32": ("ResidualSAGE", _BARE, {}),
    "w48": ("ResidualSAGE", dict(_BARE, hidden_dim=48), {}),
    # The gated set context (LayerScale gates on both branches). Its ablation `self32`, the
    # same block on each config by itself (config_attention="alone"), ran with models.py at
    # 2215679 (protocol_small_archetype.md) and left with the keyword.
    "gated32": ("ResidualSAGE", dict(_BARE, config_attention="gated"), {}),
    "gated48": ("ResidualSAGE", dict(_BARE, config_attention="gated", hidden_dim=48), {}),
    # The ungated block as first written, 48 wide (issue 60's set A figures).
    "att48": ("ResidualSAGE", dict(_BARE, config_attention=True, hidden_dim=48), {}),
    # With the tile geometry (`tile_geometry: true`: the trainer builds it with the data's
    # column map), at each width and set context of the candidates (issue 60 item 5).
    "geo32": ("ResidualSAGE", dict(_BARE, tile_geometry=True), {}),
    "w48geo": ("ResidualSAGE", dict(_BARE, hidden_dim=48, tile_geometry=True), {}),
    "gated32geo": ("ResidualSAGE", dict(_BARE, config_attention="gated", tile_geometry=True), {}),
    "gated48geo": (
        "ResidualSAGE",
        dict(_BARE, config_attention="gated", hidden_dim=48, tile_geometry=True),
        {},
    ),
    # Upstream's best baseline with upstream's keywords: the training CPU the 3x cap is of.
    "ej": ("EarlyJoinSAGE", {}, {}),
    # Trained longer: "epochs" is a multiple of the budget's.
    "bare32x3": ("ResidualSAGE", _BARE, {"epochs": 3}),
    "w48geox3": ("ResidualSAGE", dict(_BARE, hidden_dim=48, tile_geometry=True), {"epochs": 3}),
    "gated48x3": (
        "ResidualSAGE",
        dict(_BARE, config_attention="gated", hidden_dim=48),
        {"epochs": 3},
    ),
}


# -- statistics (numpy only) ------------------------------------------------------------------


def paired_differences(
    arm: dict[int, dict[int, np.ndarray]], reference: dict[int, dict[int, np.ndarray]]
) -> dict[int, np.ndarray]:
    """Per draw, `[kernels]` the arm's error minus the reference's, each the mean over the
    training seeds both have on that draw. `arm[draw][seed]` is `[kernels]` per-kernel errors
    in one kernel order per draw. Draws or seeds only one side has are left out; a draw with
    no seed in common is left out."""
    out = {}
    for draw in sorted(set(arm) & set(reference)):
        seeds = sorted(set(arm[draw]) & set(reference[draw]))
        if not seeds:
            continue
        a = np.mean([arm[draw][s] for s in seeds], axis=0)
        r = np.mean([reference[draw][s] for s in seeds], axis=0)
        if a.shape != r.shape:
            raise ValueError(f"draw {draw}: {a.shape[0]} kernels against {r.shape[0]}")
        out[draw] = a - r
    return out


def mean_over(diffs: dict[int, np.ndarray]) -> float:
    """The mean difference over draws and kernels (every kernel of every draw weighs the same)."""
    return float(np.concatenate(list(diffs.values())).mean())


def bootstrap(
    diffs: dict[int, np.ndarray], *, level: float = LEVEL, resamples: int = BOOTSTRAP, seed: int = 0
) -> tuple[float, float]:
    """The `level` percentile interval of `mean_over(diffs)` by a two-stage bootstrap: draws
    resampled with replacement, then within each resampled draw its kernels."""
    if not diffs:
        raise ValueError("bootstrap: no paired differences")
    rng = np.random.default_rng(seed)
    draws = [np.asarray(d, np.float64) for _, d in sorted(diffs.items())]
    chosen = rng.integers(len(draws), size=(resamples, len(draws)))
    total, count = np.zeros(resamples), np.zeros(resamples)
    for slot in range(len(draws)):  # each resample's slot holds a draw, its kernels resampled
        for j, d in enumerate(draws):
            rows = np.flatnonzero(chosen[:, slot] == j)
            total[rows] += d[rng.integers(len(d), size=(len(rows), len(d)))].sum(axis=1)
            count[rows] += len(d)
    stats = total / count
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [tail, 1.0 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Comparison:
    """Arm against the reference on one family (or shuffled copy) at one error column."""

    arm: str
    family: str
    # "top5", "top1": of each run's own ranking (its rule); "top5_last": its last epoch's
    # weights before selection, by scores alone (the curve's last point)
    column: str
    reference_mean: float
    difference: float  # arm - reference, mean over kernels and draws
    low: float
    high: float
    draws: int
    kernels: int


def compare(
    arm: str,
    family: str,
    column: str,
    errors_arm: dict[int, dict[int, np.ndarray]],
    errors_ref: dict[int, dict[int, np.ndarray]],
    **bootstrap_options: Any,
) -> Comparison:
    """`Comparison` of per-kernel errors (`paired_differences`' layout)."""
    diffs = paired_differences(errors_arm, errors_ref)
    if not diffs:
        raise ValueError(f"{arm} on {family}: no draw and seed in common with the reference")
    ref = np.concatenate(
        [np.mean([errors_ref[d][s] for s in errors_ref[d]], axis=0) for d in diffs]
    )
    low, high = bootstrap(diffs, **bootstrap_options)
    return Comparison(
        arm,
        family,
        column,
        float(ref.mean()),
        mean_over(diffs),
        low,
        high,
        len(diffs),
        sum(len(d) for d in diffs.values()),
    )


def margin_of(c: Comparison) -> float | None:
    """The non-inferiority margin of a comparison (None: none applies)."""
    if c.column == "top5":
        return MARGIN_TOP5 * c.reference_mean
    if c.column == "top1" and c.family in DEFAULT_FIRST:
        return MARGIN_TOP1
    return None


def decide(comparisons: Sequence[Comparison], primary: str = PRIMARY) -> dict[str, str]:
    """Per arm, the decision rule's verdict: `CHANGE` (the default should become it), or
    `KEEP: <why>`. Primary: top-5 on `primary` and on `primary + SHUFFLED`, each with its
    interval's upper bound below 0; then every other comparison with a margin (`margin_of`)
    must have its upper bound at most the margin. A primary comparison missing keeps the
    default (the rule cannot tell)."""
    by_arm: dict[str, list[Comparison]] = defaultdict(list)
    for c in comparisons:
        by_arm[c.arm].append(c)
    verdicts = {}
    for arm, cs in sorted(by_arm.items()):
        first = {c.family: c for c in cs if c.column == "top5"}
        why = []
        for family in (primary, primary + SHUFFLED):
            c = first.get(family)
            if c is None:
                why.append(f"no top-5 comparison on {family}")
            elif not c.high < 0:
                why.append(f"top-5 on {family} not lower (interval {c.low:+.4f} to {c.high:+.4f})")
        for c in cs:
            m = margin_of(c)
            primary_cell = c.column == "top5" and c.family in (primary, primary + SHUFFLED)
            if m is not None and not primary_cell and c.high > m:
                why.append(
                    f"{c.column} on {c.family} may be worse by {c.high:+.4f} (margin {m:.4f})"
                )
        verdicts[arm] = "CHANGE" if not why else "KEEP: " + "; ".join(why)
    return verdicts


def verdict_table(comparisons: Sequence[Comparison], reference: str) -> list[str]:
    """The comparisons and the rule's verdicts as markdown lines."""
    lines = [
        f"| arm | family | error | {reference} | arm - {reference} | {LEVEL:.0%} interval "
        "| margin | tells |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        m = margin_of(c)
        if c.high < 0:
            tells = "lower"
        elif c.low > 0:
            tells = "higher"
        else:
            tells = "does not tell"
        if m is not None and c.high > m:
            tells += "; may be worse than the margin"
        lines.append(
            f"| {c.arm} | {c.family} | {c.column} | {c.reference_mean:.4f} | "
            f"{c.difference:+.4f} | {c.low:+.4f} to {c.high:+.4f} | "
            + (f"{m:.4f}" if m is not None else "-")
            + f" | {tells} |"
        )
    lines.append("")
    for arm, verdict in decide(comparisons).items():
        lines.append(f"- {arm} as the default (against {reference}): {verdict}")
    return lines


# -- data: the draws and their held-out test splits --------------------------------------------


def heldout_root(root: Path) -> Path:
    """Where the labelled held-out test split of the data set at `root` goes (`<it>/test`)."""
    return root.with_name(root.name + ".heldout")


def write_heldout(root: Path, family: str, seed: int, kernels: int, max_configs: int) -> Path:
    """The first `kernels` test kernels of the data set `root` (`synthetic.generate(...,
    seed=seed, family=family, max_configs=max_configs)`) made again with their runtimes, into
    `heldout_root(root)/test`; the kernels the data set holds are checked to be the same
    configs. Kept when present."""
    from tpu_tiles_models.formats import SPLITS
    from tpu_tiles_models.synthetic import families, writer

    out = heldout_root(root)
    if (out / "test").is_dir():
        return out
    counts = {"train": 0, "valid": 0, "test": kernels}
    maker = families.get_family(family)
    staging = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)  # a run stopped half-way
    (staging / "test").mkdir(parents=True)
    try:
        for split, i, tile_id, weights in writer._split_plan(counts, seed, None):
            rng = np.random.default_rng([seed, SPLITS.index(split), i, 1])  # as _Job.write
            arrays = maker.make_kernel(
                rng, kind_weights=weights, labelled=True, max_configs=max_configs or None
            )
            made = root / "test" / f"{tile_id}.npz"
            if made.exists():
                with np.load(made) as z:
                    if not np.array_equal(z["config_feat"], arrays["config_feat"]):
                        raise RuntimeError(f"{made}: not the kernel the generator makes again")
            np.savez(staging / "test" / f"{tile_id}.npz", **arrays)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    staging.rename(out)
    return out


def make_draws(a: argparse.Namespace, work: Path) -> dict[tuple[str, int], Path]:
    """`{(family or shuffled copy, data seed): data root}`, each with its held-out split."""
    import suite

    roots = {}
    for draw in seeds_of(a.data_seeds):
        ns = argparse.Namespace(**{**vars(a), "data_seed": draw, "shuffled": True})
        made = suite.make_data(ns, work)
        for family in a.families.split(","):
            write_heldout(made[family], family, draw, a.heldout, a.max_configs)
            shuffled = made[family + SHUFFLED]
            if not (heldout_root(shuffled) / "test").is_dir():
                suite.shuffle_configs(heldout_root(made[family]), heldout_root(shuffled))
        roots.update({(f, draw): r for f, r in made.items()})
    return roots


def seeds_of(text: str) -> list[int]:
    return [int(s) for s in str(text).split(",") if s != ""]


# -- training with a held-out curve ------------------------------------------------------------


def point_args(a: argparse.Namespace, arm: str, root: Path, seed: int, work: Path) -> dict:
    """The `TrainArgs` fields of one run."""
    cls, kwargs, flags = ARMS[arm]
    flags = dict(flags)
    epochs = a.epochs * flags.pop("epochs", 1)
    return dict(
        model=cls,
        model_kwargs_json=json.dumps(kwargs, sort_keys=True),
        epochs=epochs,
        early_stop=a.early_stop,
        score_candidates=a.score_candidates,
        seed=seed,
        data_root=str(root),
        out_dir=str(work / "runs"),
        cache_dir=str(work / "cache"),
        run_id=arm,
        no_progress=True,
        **flags,
    )


def score_path(work: Path, arm: str, family: str, draw: int, seed: int) -> Path:
    return work / "scores" / f"{arm}__{family}__d{draw}__s{seed}.json"


def kernel_errors(scored, keep_default: bool = False) -> dict[str, list[float]]:
    """Per-kernel top-1 and top-5 errors of `scoring.Scored` kernels."""
    from tpu_tiles_models import margin, metrics

    out: dict[str, list[float]] = {"top1": [], "top5": []}
    for s in scored:
        order = margin.ranking(s.scores, keep_default)
        for k in (1, 5):
            out[f"top{k}"].append(metrics.kernel_top_k_error(s.runtimes, order, k))
    return out


def child(spec_path: str) -> None:
    """One run: trains (`train.train`), measuring the held-out errors every `curve_every`
    epochs, then scores the finished run (as rebuilt from its files) on the held-out split,
    by its scores and by its own rule; writes the spec's `out` JSON."""
    spec = json.loads(Path(spec_path).read_text())
    from tpu_tiles_models import data, scoring, train
    from tpu_tiles_models import margin as margins
    from tpu_tiles_models.runs import TrainedRun
    from tpu_tiles_models.train_args import TrainArgs

    args = TrainArgs.from_dict(spec["args"])
    heldout, every = spec["heldout"], spec["curve_every"]
    seen: dict[str, Any] = {}
    load, offer = data.load_dataset, train._Candidates.offer

    def loading(*pos, **kw):  # the trainer's data set: its statistics score the curve
        dataset = load(*pos, **kw)
        seen.setdefault("dataset", dataset)
        return dataset

    curve: list[dict[str, Any]] = []

    def offered(self, key, epoch, model):
        offer(self, key, epoch, model)
        seen["candidates"] = self
        if (epoch + 1) % every:
            return
        if "test" not in seen:
            stats = seen["dataset"].stats
            seen["test"] = load(heldout, splits=("test",), stats=stats, progress=False).test
        scored = scoring.score_split(model, seen["test"], seen["dataset"].stats, progress=False)
        curve.append(dict(epoch=epoch + 1, **kernel_errors(scored)))

    data.load_dataset, train._Candidates.offer = loading, offered
    try:
        trained = train.train(args)
    finally:
        data.load_dataset, train._Candidates.offer = load, offer
    run = TrainedRun.open(trained.model_dir)
    model, dataset = run.load(heldout, split="test", progress=False)
    scored = scoring.score_split(model, dataset.test, dataset.stats, progress=False)
    rule = bool(run.keeps_default_in(model))
    ruled = kernel_errors(scored, keep_default=rule)  # its margin and gate: what it ranks
    margin = float(margins.margin_of(model) or 0.0)
    for s in scored:  # `own_scores` took config 0's margin off: the scores alone put it back
        s.scores = s.scores.copy()
        s.scores[0] += margin
    plain = kernel_errors(scored)
    averaged = averaged_candidates(model, seen["candidates"].kept, seen["dataset"], dataset)
    extras = run.extras
    steps_per_epoch = train._steps(seen["dataset"].train, args, 1, 1)
    default = kernel_errors(
        [scoring.Scored(s.tile_id, np.arange(len(s.runtimes)), s.runtimes) for s in scored]
    )
    result = dict(
        run=Path(run.model_dir).name,
        tile_ids=[s.tile_id for s in scored],
        top1=ruled["top1"],
        top5=ruled["top5"],
        top1_scores=plain["top1"],
        top5_scores=plain["top5"],
        top1_default=default["top1"],
        rule_keeps_default=rule,
        top1_averaged=averaged["top1"],
        top5_averaged=averaged["top5"],
        margin=margin,
        epochs=len(extras.get("epoch_cpu_seconds", [])),
        best_epoch=extras.get("best_epoch"),
        steps_per_epoch=steps_per_epoch,
        epoch_cpu_seconds=extras.get("epoch_cpu_seconds", []),
        curve=curve,
    )
    out = Path(spec["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out)


def averaged_candidates(model, kept: list, trainer, heldout) -> dict[str, list[float]]:
    """The single pick from weight-averaged checkpoints (issue 60 item 6): the weights of the
    epochs the trainer kept as candidates averaged (as stochastic weight averaging averages
    checkpoints; the rule's weights are 0 in every candidate), config 0's rule fitted again
    on the trainer's validation kernels, then the per-kernel errors of that ranking on the
    held-out split. Leaves `model` with those weights."""
    from tpu_tiles_models import margin, scoring, train

    weights = [w for _, _, w in kept]
    train._assign(model, [np.mean(ws, axis=0) for ws in zip(*weights)])
    val = scoring.score_split(model, trainer.valid, trainer.stats, progress=False)
    fit = margin.margin_of(model) is not None
    margin.KeepDefault.measure(scoring.pairs(val), fit_margin=fit).put_into(model)
    scored = scoring.score_split(model, heldout.test, heldout.stats, progress=False)
    return kernel_errors(scored, keep_default=bool(margin.rule_of(model)))


def run_points(a: argparse.Namespace, roots: dict[tuple[str, int], Path], work: Path) -> None:
    """Trains every missing (arm, family, draw, seed), `--jobs` at a time, each in a child."""
    todo = []
    for arm in a.arms.split(","):
        for (family, draw), root in sorted(roots.items()):
            for seed in seeds_of(a.seeds):
                out = score_path(work, arm, family, draw, seed)
                if not out.exists():
                    todo.append((arm, family, draw, seed, root, out))
    # Seed 0 first, then arm by arm in `--arms` order, each on every draw and family: a
    # partial run already pairs the first arms with the reference on both draws. By family:
    # draw by draw, family by family, every arm: a partial run pairs every arm on the first.
    arms = a.arms.split(",")
    if a.order == "family":
        todo.sort(key=lambda t: (t[3], t[2], t[1], arms.index(t[0])))
    else:
        todo.sort(key=lambda t: (t[3], arms.index(t[0]), t[2], t[1]))
    print(f"{len(todo)} runs to train", flush=True)
    running: list[tuple[subprocess.Popen, str, float]] = []
    (work / "logs").mkdir(parents=True, exist_ok=True)
    for n, (arm, _, _, seed, root, out) in enumerate(todo):
        while len(running) >= a.jobs:
            running = _reap(running)
        spec = dict(
            args=point_args(a, arm, root, seed, work),
            heldout=str(heldout_root(root)),
            curve_every=a.curve_every,
            out=str(out),
        )
        name = out.stem
        spec_path = work / "logs" / f"{name}.spec.json"
        spec_path.write_text(json.dumps(spec))
        log = open(work / "logs" / f"{name}.log", "w")
        cmd = [sys.executable, __file__, "--child", str(spec_path)]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        print(f"[{n + 1}/{len(todo)}] {name} started", flush=True)
        running.append((proc, name, time.perf_counter()))
    while running:
        running = _reap(running)


def _reap(running: list) -> list:
    time.sleep(2)
    left = []
    for proc, name, start in running:
        if proc.poll() is None:
            left.append((proc, name, start))
        else:
            took = time.perf_counter() - start
            print(f"{name} exited {proc.returncode} after {took:.0f} s", flush=True)
    return left


# -- tables ------------------------------------------------------------------------------------


def load_scores(work: Path) -> dict[tuple[str, str, int, int], dict]:
    """Every finished run's held-out figures: `{(arm, family, draw, seed): result}`."""
    out = {}
    for path in sorted((work / "scores").glob("*.json")):
        arm, family, draw, seed = path.stem.split("__")
        r = json.loads(path.read_text())
        last = r["curve"][-1] if r["curve"] else None
        if last is not None and last["epoch"] == r["epochs"]:  # the last epoch's weights
            r["top5_last"] = last["top5"]
        out[arm, family, int(draw[1:]), int(seed[1:])] = r
    return out


def errors_of(scores: dict, arm: str, family: str, column: str) -> dict[int, dict[int, np.ndarray]]:
    """`{draw: {seed: [kernels]}}` per-kernel errors of one arm on one family."""
    out: dict[int, dict[int, np.ndarray]] = defaultdict(dict)
    for (a, f, draw, seed), r in scores.items():
        if (a, f) == (arm, family) and column in r:
            out[draw][seed] = np.asarray(r[column], np.float64)
    return dict(out)


def cpu_at(result: dict, epoch: int) -> float:
    """Training CPU seconds of a run's first `epoch` epochs."""
    return float(sum(result["epoch_cpu_seconds"][:epoch]))


def matched_cpu_errors(
    scores: dict, arm: str, family: str, cpu: dict[tuple[int, int], float]
) -> dict[int, dict[int, np.ndarray]]:
    """Per draw and seed, an arm's held-out top-5 per kernel at the curve point whose training
    CPU is nearest `cpu[draw, seed]` (the other arm's whole run's): the weights of that
    epoch, before selection, ranked by their scores alone."""
    out: dict[int, dict[int, np.ndarray]] = defaultdict(dict)
    for (a, f, draw, seed), r in scores.items():
        if (a, f) != (arm, family) or (draw, seed) not in cpu or not r["curve"]:
            continue
        point = min(r["curve"], key=lambda p: abs(cpu_at(r, p["epoch"]) - cpu[draw, seed]))
        out[draw][seed] = np.asarray(point["top5"], np.float64)
    return dict(out)


def run_table(scores: dict) -> list[str]:
    """Mean held-out figures per arm and family (over draws, seeds and kernels)."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for (arm, family, _, _), r in scores.items():
        groups[arm, family].append(r)
    lines = [
        "| family | arm | runs | epochs | steps | top-1 | top-1 / config 0 | top-5 | top-5 by "
        "scores alone | CPU s/run | curve: top-5 by scores at epoch |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (arm, family), rs in sorted(groups.items(), key=lambda t: (t[0][1], t[0][0])):
        mean = lambda k, rs=rs: float(np.mean([np.mean(r[k]) for r in rs]))  # noqa: E731
        default = mean("top1_default")
        epochs = sorted({r["epochs"] for r in rs})
        steps = sorted({r["epochs"] * r["steps_per_epoch"] for r in rs})
        by_epoch: dict[int, list[float]] = defaultdict(list)
        for r in rs:
            for p in r["curve"]:
                by_epoch[p["epoch"]].append(float(np.mean(p["top5"])))
        curve = ", ".join(f"{e}: {np.mean(v):.3f}" for e, v in sorted(by_epoch.items()))
        lines.append(
            f"| {family} | {arm} | {len(rs)} | {'/'.join(map(str, epochs))} | "
            f"{'/'.join(map(str, steps))} | {mean('top1'):.4f} | "
            f"{mean('top1') / default if default else float('nan'):.2f} | {mean('top5'):.4f} | "
            f"{mean('top5_scores'):.4f} | {np.mean([cpu_at(r, r['epochs']) for r in rs]):.0f} | "
            f"{curve} |"
        )
    return lines


def comparisons(scores: dict, reference: str, arms: Sequence[str]) -> list[Comparison]:
    """Every arm against the reference, on every family and copy, at each column."""
    families = sorted({f for (_, f, _, _) in scores})
    out = []
    for arm in arms:
        if arm == reference:
            continue
        for family in families:
            for column in ("top5", "top1", "top5_last"):
                mine = errors_of(scores, arm, family, column)
                ref = errors_of(scores, reference, family, column)
                if paired_differences(mine, ref):
                    out.append(compare(arm, family, column, mine, ref))
    return out


def matched_cpu(scores: dict, reference: str, arms: Sequence[str]) -> list[str]:
    """Each arm against the reference at the same training CPU seconds, top-5 per kernel,
    paired, with the bootstrap interval: the cheaper run finished (selected, as trained)
    against the costlier one's held-out curve at the epoch nearest the same CPU (the weights
    of that epoch, mid-schedule, ranked by their scores alone), per draw and seed."""
    lines = []
    families = sorted({f for (_, f, _, _) in scores})
    for arm in arms:
        if arm == reference:
            continue
        for family in families:
            runs = {
                name: {(d, s): r for (a, f, d, s), r in scores.items() if (a, f) == (name, family)}
                for name in (arm, reference)
            }
            pairs = sorted(set(runs[arm]) & set(runs[reference]))
            if not pairs:
                continue
            cpu = {
                n: float(np.mean([cpu_at(r, r["epochs"]) for r in runs[n].values()])) for n in runs
            }
            cheap, dear = (arm, reference) if cpu[arm] <= cpu[reference] else (reference, arm)
            at = {k: cpu_at(runs[cheap][k], runs[cheap][k]["epochs"]) for k in pairs}
            curve = matched_cpu_errors(scores, dear, family, at)
            finished = errors_of(scores, cheap, family, "top5_scores")  # as the curve ranks
            mine, ref = (finished, curve) if cheap == arm else (curve, finished)
            if not paired_differences(mine, ref):
                continue
            c = compare(arm, family, "top5 at matched CPU", mine, ref)
            lines.append(
                f"| {arm} | {family} | {cpu[arm]:.0f} | {cpu[reference]:.0f} | {dear}'s curve "
                f"at {cpu[cheap]:.0f} s | {c.reference_mean:.4f} | {c.difference:+.4f} | "
                f"{c.low:+.4f} to {c.high:+.4f} |"
            )
    return _table(
        f"| arm | family | arm's CPU s/run | {reference}'s | compared | {reference}'s top-5 "
        f"| arm - {reference} | {LEVEL:.0%} interval |",
        lines,
    )


def summary_table(a: argparse.Namespace, scores: dict) -> str:
    """The decision in a few lines (the docs include it): per arm, its top-5 against the
    reference on each family and shuffled copy (difference and interval), its training CPU
    over the reference's, and the rule's verdict."""
    arms = [x for x in a.arms.split(",") if x != a.reference]
    cs = [c for c in comparisons(scores, a.reference, arms) if c.column == "top5"]
    families = list(dict.fromkeys(c.family for c in cs))
    cpu = {
        arm: np.mean([cpu_at(r, r["epochs"]) for k, r in scores.items() if k[0] == arm])
        for arm in [a.reference, *arms]
    }
    seeds, draws = sorted({k[3] for k in scores}), len({k[2] for k in scores})
    lines = [
        f"Top-5 error, arm - {a.reference} on {MIN_HELDOUT}+ held-out kernels a draw "
        f"({draws} draw{'s' * (draws != 1)}, training seeds {seeds}; {LEVEL:.0%} interval), "
        "[the full tables](../benchmarks/results/" + f"{a.name}.md):",
        "",
        "| arm | " + " | ".join(families) + f" | CPU / {a.reference}'s | verdict |",
        "|---|" + "---|" * (len(families) + 2),
    ]
    reference = {c.family: c.reference_mean for c in cs}
    cells = [f"{reference[f]:.3f} (its error)" for f in families]
    lines.append(f"| {a.reference} | " + " | ".join(cells) + " | 1.00 | the default |")
    verdicts = decide(comparisons(scores, a.reference, arms))
    for arm in arms:
        by_family = {c.family: c for c in cs if c.arm == arm}
        cells = [
            f"{c.difference:+.3f} ({c.low:+.3f} to {c.high:+.3f})" if c else "-"
            for c in (by_family.get(f) for f in families)
        ]
        verdict = verdicts.get(arm, "KEEP").split(":")[0]
        ratio = cpu[arm] / cpu[a.reference]
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {ratio:.2f} | {verdict} |")
    return "\n".join(lines) + "\n"


def averaged_table(scores: dict) -> list[str]:
    """Weight-averaged candidates against the selected epoch, paired within the same runs
    (arm and family), each ranked by its own rule; top-1 also over config 0's (the compiler's
    pick). Empty where no run measured them."""
    lines = []
    for arm, family in sorted({(k[0], k[1]) for k, r in scores.items() if "top1_averaged" in r}):
        row = [arm, family]
        for column in ("top1", "top5"):
            mine = errors_of(scores, arm, family, f"{column}_averaged")
            ref = errors_of(scores, arm, family, column)
            c = compare(arm, family, column, mine, ref)
            row.append(f"{c.reference_mean:.4f} -> {c.reference_mean + c.difference:.4f}")
            row.append(f"{c.difference:+.4f} ({c.low:+.4f} to {c.high:+.4f})")
        default = float(
            np.mean([np.mean(v) for v in _flat(errors_of(scores, arm, family, "top1_default"))])
        )
        averaged = float(
            np.mean([np.mean(v) for v in _flat(errors_of(scores, arm, family, "top1_averaged"))])
        )
        row.append(f"{averaged / default:.2f}" if default else "-")
        lines.append("| " + " | ".join(row) + " |")
    return _table(
        "| arm | family | top-1: selected -> averaged | difference (90%) | top-5: selected -> "
        "averaged | difference (90%) | averaged top-1 / config 0's |",
        lines,
    )


def floor_errors(family: str, draw: int, heldout: Path) -> dict[str, float]:
    """`{tile_id: top-1 error}` of the noise-free floor on a held-out split: each kernel's
    configs ranked by the generator's noise-free runtimes (the family's cost model; `drawn`
    on the draw's own core), scored against the measured ones."""
    from tpu_tiles_models import metrics
    from tpu_tiles_models.synthetic import families

    runtime = families.get_family(family).runtime
    seeded = {"seed": draw} if family == "drawn" else {}
    out = {}
    for path in sorted((heldout / "test").glob("*.npz")):
        with np.load(path) as z:
            parts = [z[k] for k in ("node_feat", "node_opcode", "edge_index", "config_feat")]
            measured = z["config_runtime"]
        clean = runtime(*parts, **seeded)
        out[path.stem] = metrics.kernel_top_k_error(measured, clean, 1)
    return out


def floor_table(scores: dict, roots: dict[tuple[str, int], Path]) -> list[str]:
    """The single pick per arm and family where config 0 is the compiler's default (issue 60
    item 6): held-out top-1 of each run's own ranking, of config 0 (the compiler's pick) and of
    the noise-free floor (`floor_errors`), each the mean over kernels, draws and seeds; the
    pick over the compiler's, and the share of the compiler-to-floor gap the pick closes."""
    floors: dict[tuple[str, int], dict[str, float]] = {}
    lines = []
    for arm, family in sorted({(k[0], k[1]) for k in scores if k[1] in DEFAULT_FIRST}):
        pick, compiler, floor = [], [], []
        for (a, f, draw, _), r in sorted(scores.items()):
            if (a, f) != (arm, family) or (f, draw) not in roots:
                continue
            if (f, draw) not in floors:
                floors[f, draw] = floor_errors(f, draw, heldout_root(roots[f, draw]))
            pick.append(np.mean(r["top1"]))
            compiler.append(np.mean(r["top1_default"]))
            floor.append(np.mean([floors[f, draw][t] for t in r["tile_ids"]]))
        if not pick:
            continue
        p, c, fl = float(np.mean(pick)), float(np.mean(compiler)), float(np.mean(floor))
        ratio = f"{p / c:.2f}" if c > 0 else "-"
        closed = f"{(c - p) / (c - fl):+.0%}" if c > fl else "-"
        cells = [arm, family, str(len(pick)), f"{p:.4f}", f"{c:.4f}", f"{fl:.4f}", ratio, closed]
        lines.append("| " + " | ".join(cells) + " |")
    return _table(
        "| arm | family | runs | top-1: the pick | config 0 (the compiler's) | noise-free floor "
        "| pick / compiler's | gap to the floor closed |",
        lines,
    )


def _table(header: str, lines: list[str]) -> list[str]:
    """A markdown table of `header` (`| a | b |`) and its rows; none without rows."""
    return [header, "|" + "---|" * (header.count("|") - 1), *lines] if lines else []


def _flat(by_draw: dict[int, dict[int, np.ndarray]]) -> list[np.ndarray]:
    return [v for seeds in by_draw.values() for v in seeds.values()]


def markdown(
    a: argparse.Namespace, scores: dict, command: str, roots: dict[tuple[str, int], Path]
) -> str:
    arms = a.arms.split(",")
    cs = comparisons(scores, a.reference, arms)
    draws = sorted({k[2] for k in scores})
    seeds = sorted({k[3] for k in scores})
    kernels = sorted({len(r["top5"]) for r in scores.values()})
    parts = [
        f"`{command}`",
        "",
        f"{a.train} train / {a.valid} valid kernels per family and draw (at most "
        f"{a.max_configs or 'all'} configs), data seeds (draws) {draws}, training seeds "
        f"{seeds} (what finished: see runs), {a.epochs} epochs x the arm's multiple (early stop "
        f"{a.early_stop}), {a.score_candidates} candidate epochs rescored on validation; every "
        f"figure on {'/'.join(map(str, kernels))} held-out test kernels per draw that neither "
        "selection nor the rule saw. steps: optimiser steps (usable train kernels // batch x "
        "epochs). top-1, top-5: each run's own ranking (its config 0 margin and gate, fitted "
        "on validation); / config 0: over config 0's own top-1 error; by scores alone: "
        "without the margin and gate. Curve: held-out top-5 of the weights at that epoch "
        f"(before selection, ranked by scores alone), every {a.curve_every} epochs. CPU s/run: "
        "the training epochs' process CPU seconds (the machine shared with other work). "
        "In the comparisons, top5_last: the last epoch's weights, before selection, by their "
        "scores alone (no decision reads it).",
        "",
        *run_table(scores),
        "",
        f"Paired per-kernel differences against {a.reference} (mean over kernels and draws of "
        f"the per-kernel error, each the mean over seeds), {LEVEL:.0%} intervals from a "
        f"bootstrap over draws and kernels ({BOOTSTRAP} resamples); the decision rule's "
        f"margins: top-5 {MARGIN_TOP5:.0%} of {a.reference}'s, top-1 +{MARGIN_TOP1} "
        f"where config 0 is the compiler's default ({', '.join(DEFAULT_FIRST)}).",
        "",
        *verdict_table(cs, a.reference),
    ]
    averaged = averaged_table(scores)
    if averaged:
        parts += [
            "",
            "The single pick from weight-averaged checkpoints: the trainer's candidate epochs' "
            "weights averaged, config 0's rule fitted again on validation, against the epoch "
            "the trainer selected, paired within the same runs (held-out kernels):",
            "",
            *averaged,
        ]
    floor = floor_table(scores, roots)
    if floor:
        parts += [
            "",
            "The single pick where config 0 is the compiler's default: held-out top-1 of each "
            "run's own ranking against config 0's and against the noise-free floor (each "
            "kernel's configs ranked by the generator's noise-free runtimes); gap closed: "
            "(compiler's - pick) / (compiler's - floor):",
            "",
            *floor,
        ]
    for reference in dict.fromkeys([a.reference, *filter(None, a.long_reference.split(","))]):
        matched = matched_cpu(scores, reference, arms)
        if matched:
            parts += [
                "",
                f"At matched training CPU seconds against {reference}: the cheaper run "
                "finished against the costlier one's held-out curve at the epoch nearest the "
                "same CPU (that epoch's weights, mid-schedule, ranked by their scores alone; "
                "same draw and seed), top-5 per kernel, paired:",
                "",
                *matched,
            ]
    return "\n".join(parts) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="data, runs, scores and logs go here")
    p.add_argument("--families", default=PRIMARY)
    p.add_argument("--arms", default="bare32,att48", help=f"some of {', '.join(ARMS)}")
    p.add_argument("--reference", default="bare32", help="the arm the others are paired with")
    p.add_argument(
        "--long_reference",
        default="",
        help="more arms (comma-separated) to compare every arm with at matched CPU seconds",
    )
    p.add_argument("--data_seeds", default="0,1")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--train", type=int, default=400)
    p.add_argument("--valid", type=int, default=100)
    p.add_argument("--test", type=int, default=20, help="the data set's own (unlabelled) test")
    p.add_argument("--heldout", type=int, default=MIN_HELDOUT, help="held-out test kernels")
    p.add_argument("--max_configs", type=int, default=400)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--early_stop", type=int, default=20)
    p.add_argument("--score_candidates", type=int, default=3)
    p.add_argument("--curve_every", type=int, default=5)
    p.add_argument("--jobs", type=int, default=1, help="runs trained at once")
    p.add_argument("--order", choices=("arm", "family"), default="arm", help="what runs first")
    p.add_argument("--tabulate", action="store_true", help="train nothing; write the tables")
    p.add_argument("--name", default="protocol")
    p.add_argument("--out", default=str(RESULTS))
    a = p.parse_args(argv)
    if a.heldout < MIN_HELDOUT:
        p.error(f"--heldout must be at least {MIN_HELDOUT}, got {a.heldout}")
    # Tabulating reads finished runs, also those of an arm that has left `ARMS`.
    unknown = [x for x in [*a.arms.split(","), a.reference] if x not in ARMS]
    if unknown and not a.tabulate:
        p.error(f"--arms: unknown {', '.join(unknown)}; use some of {', '.join(ARMS)}")
    return a


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        child(argv[1])
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    a = parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    roots = make_draws(a, work)
    if not a.tabulate:
        run_points(a, roots, work)
    scores = load_scores(work)
    # Only what the command names: its arms, families (and shuffled copies), draws and seeds.
    arms = set(a.arms.split(",")) | {a.reference}
    families = {f + copy for f in a.families.split(",") for copy in ("", SHUFFLED)}
    draws, seeds = set(seeds_of(a.data_seeds)), set(seeds_of(a.seeds))
    scores = {
        k: v
        for k, v in scores.items()
        if k[0] in arms and k[1] in families and k[2] in draws and k[3] in seeds
    }
    command = "python benchmarks/protocol.py " + " ".join(
        x if not x.startswith(str(work)) else Path(x).name for x in argv
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(a, scores, command, roots)
    (out / f"{a.name}.md").write_text(text)
    (out / f"{a.name}_summary.md").write_text(summary_table(a, scores))
    per_kernel = ("top1", "top5", "top1_scores", "top5_scores", "top1_default", "top5_last")
    per_kernel += ("top1_averaged", "top5_averaged")
    summary = dict(
        command=command,
        # Per run its means over the held-out kernels (the per-kernel figures stay in the
        # work folder's scores/, which `--tabulate` reads).
        runs={
            "__".join(map(str, k)): {
                **{x: v[x] for x in v if x not in (*per_kernel, "curve", "tile_ids")},
                **{x: float(np.mean(v[x])) for x in per_kernel if x in v},
                "curve": [
                    dict(epoch=p["epoch"], top5=float(np.mean(p["top5"]))) for p in v["curve"]
                ],
            }
            for k, v in scores.items()
        },
        comparisons=[c.__dict__ for c in comparisons(scores, a.reference, a.arms.split(","))],
    )
    (out / f"{a.name}.json").write_text(json.dumps(summary, indent=1))
    print(text)


if __name__ == "__main__":
    main()
