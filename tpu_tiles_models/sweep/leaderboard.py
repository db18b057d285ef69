"""The leaderboard: one row per point from its run file and outcome, ranked, written as
`sweep.csv`, `sweep.md`, `sweep.png` and TensorBoard's HParams dashboard.

Ranking is by score, 1 - top-5 error on every config of every validation kernel, best first;
then points whose loss or errors are not finite (`nan`), that failed, or that did not run.
Points that differ only by `seed` form a group with the mean and sample std of their scores.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import shlex
import statistics
from typing import Any, Sequence

from tpu_tiles_models import files, formats, run_file, safe
from tpu_tiles_models.sweep.grid import SEED_AXIS, Point, show

FILES = ("csv", "md", "png")  # sweep.<ext> in --out_dir
HPARAMS_SUFFIX = ".sweep_hparams"  # our events files in --tensorboard, rewritten every sweep
ORDER = {"ok": 0, "nan": 1, "failed": 2, "not run": 3}
CSV_COLUMNS = (
    "rank status score top1_error top5_error top10_error opa epochs best_epoch train_s wall_s"
).split()


@dataclasses.dataclass
class Row:
    """One point's line. `status`: ok, nan, failed or not run."""

    point: Point
    status: str
    error: str = ""
    score: float | None = None
    top1: float | None = None
    top5: float | None = None
    top10: float | None = None
    opa: float | None = None
    epochs: int | None = None
    best_epoch: int | None = None
    train_s: float | None = None
    wall_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def leaderboard_row(point: Point, info: dict | None, record: dict | None) -> Row:
    """A point's row from its run file (`info`, None unless complete) and recorded outcome."""
    wall = record.get("wall_s") if record else None
    if info is None:
        status = "failed" if record and record["status"] == "failed" else "not run"
        return Row(point, status, (record or {}).get("error", ""), wall_s=wall)
    val = info.get("final_error", {}).get("val", {})
    curve, extras = info.get("train_curve", {}), info.get(run_file.EXTRAS_KEY) or {}
    epochs = len(curve.get("epoch", []))
    best = extras.get("best_epoch", epochs - 1)
    opas = curve.get("val_opa") or [None]
    row = Row(point, "ok", top1=val.get("1"), top5=val.get("5"), top10=val.get("10"))
    row.opa = opas[best] if 0 <= best < len(opas) else opas[-1]
    row.epochs, row.best_epoch, row.wall_s = epochs, best, wall
    row.train_s = round(sum(extras.get("epoch_seconds", [])), 2)
    row.score = 1.0 - row.top5 if row.top5 is not None else None
    bad = next((e for e, x in enumerate(curve.get("train_loss", [])) if not _finite(x)), None)
    if bad is not None:
        row.status = "nan"
        row.error = f"non-finite training loss at epoch {bad}; lower --lr or --clip_norm"
    elif not all(_finite(e) for e in (row.top1, row.top5, row.top10)):
        row.status, row.error = "nan", "non-finite validation error"
    return row


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def rank_rows(rows: list[Row]) -> list[Row]:
    """Best score first; then nan, failed and not-run points."""
    return sorted(rows, key=lambda r: (ORDER[r.status], -(r.score if r.ok else 0.0), r.point.key))


def write(
    rows: Sequence[Row], out_dir: str, tensorboard: str, ensemble: dict | None
) -> dict[str, str]:
    """Writes `sweep.csv`, `.md`, `.png` and the HParams summaries; returns their paths."""
    axes = list(dict.fromkeys(a for r in rows for a in r.point.values))  # first seen first
    paths = {ext: files.join(out_dir, f"sweep.{ext}") for ext in FILES}
    texts = (_csv(rows, axes).encode(), _markdown(rows, axes, out_dir, ensemble).encode())
    with safe.atomic_paths([(paths[ext], "--out_dir") for ext in FILES]) as tmps:  # together
        for tmp, data in zip(tmps, (*texts, _png(rows, axes))):
            tmp.write_bytes(data)
    _hparams(files.expand(tensorboard), rows, axes)
    return dict(paths, tensorboard=files.expand(tensorboard))


def _cell(row: Row, axis: str) -> str:
    return show(row.point.values[axis]) if axis in row.point.values else ""


def _csv(rows: Sequence[Row], axes: Sequence[str]) -> str:
    """One row per point; `flags` is `tpu-tiles train <flags>` of the point."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *axes, "key", "hash", "model_dir", "flags", "error"])
    for rank, r in enumerate(rows, 1):
        numbers = (r.score, r.top1, r.top5, r.top10, r.opa, r.epochs, r.best_epoch, r.train_s)
        cells = [rank if r.ok else "", r.status, *numbers, r.wall_s, *(_cell(r, a) for a in axes)]
        model_dir = formats.model_dir_name(r.point.hash) if r.status != "not run" else ""
        cells += [r.point.key, r.point.hash, model_dir, shlex.join(r.point.args.to_argv()), r.error]
        writer.writerow(["" if c is None else c for c in cells])
    return out.getvalue()


def seed_groups(rows: Sequence[Row], axes: Sequence[str]) -> list[tuple[dict, list[Row]]]:
    """Ok rows grouped by every axis but `seed`: (values, rows), best mean score first."""
    keep = [a for a in axes if a != SEED_AXIS]
    groups: dict[str, tuple[dict, list[Row]]] = {}
    for r in (r for r in rows if r.ok):
        values = {a: r.point.values[a] for a in keep if a in r.point.values}
        key = json.dumps(values, sort_keys=True, default=str)
        groups.setdefault(key, (values, []))[1].append(r)
    return sorted(groups.values(), key=lambda g: -statistics.fmean(r.score for r in g[1]))


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std (0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _markdown(rows: Sequence[Row], axes: Sequence[str], title: str, ensemble: dict | None) -> str:
    """The ranked points, mean +- std over seeds, the ensemble, what was not ok."""
    ok = sum(r.ok for r in rows)
    lines = [f"# Sweep {title}", "", f"{len(rows)} points: {ok} ok, {len(rows) - ok} not ok.", ""]
    head = ["rank", "score", "top-1 err", "top-5 err", "top-10 err", "OPA", "epochs", "s"]
    lines += [_md([*head, *axes, "status"]), _md(["---"] * (len(head) + len(axes) + 1))]
    for rank, r in enumerate(rows, 1):
        seconds = r.wall_s if r.wall_s is not None else r.train_s
        cells = [str(rank) if r.ok else "", *(_fmt(m) for m in (r.score, r.top1, r.top5, r.top10))]
        cells += [_fmt(r.opa), _fmt(r.epochs), _fmt(seconds, 1), *(_cell(r, a) for a in axes)]
        lines.append(_md([*cells, r.status]))
    groups = seed_groups(rows, axes)
    if any(len(members) > 1 for _, members in groups):
        keep = [a for a in axes if a != SEED_AXIS]
        lines += ["", "## Mean +- std over seeds", ""]
        lines += [_md([*keep, "seeds", "score", "top-5 err"]), _md(["---"] * (len(keep) + 3))]
        for values, members in groups:
            stats = [_mean_std([getattr(r, m) for r in members]) for m in ("score", "top5")]
            cells = [show(values.get(a, "")) for a in keep] + [str(len(members))]
            lines.append(_md(cells + [f"{m:.4f} +- {s:.4f}" for m, s in stats]))
    if ensemble:
        lines += ["", f"## Ensemble of the {ensemble['k']} best points", ""]
        members = ", ".join(f"`{k}`" for k in ensemble["members"])
        lines.append(
            f"Not built: {ensemble['error']}"
            if ensemble["error"]
            else f"score {ensemble['score']:.4f} (top-1 err {ensemble['top1']:.4f}, top-5 err "
            f"{ensemble['top5']:.4f}, top-10 err {ensemble['top10']:.4f}); members {members}; "
            f"`{ensemble['dir']}`"
        )
    bad = [r for r in rows if not r.ok]
    if bad:
        lines += ["", "## Not ok", ""]
        lines += [f"- `{r.point.key}` {r.point.describe()}: {r.status}: {r.error}" for r in bad]
    return "\n".join(lines) + "\n"


def _md(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _fmt(value: float | int | None, digits: int = 4) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:.{digits}f}"


def _png(rows: Sequence[Row], axes: Sequence[str]) -> bytes:
    """Score per point (left) and mean +- std over seeds per group (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok, groups = [r for r in rows if r.ok], seed_groups(rows, axes)
    height = 0.8 + 0.3 * max(len(ok), len(groups), 4)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, height))
    left.barh(range(len(ok)), [r.score for r in ok], color="tab:blue")
    left.set_yticks(range(len(ok)), [r.point.describe() for r in ok], fontsize=7)
    left.set_title("score (1 - top-5 error) per point")
    stats = [_mean_std([r.score for r in members]) for _, members in groups]
    right.barh(range(len(groups)), [m for m, _ in stats], xerr=[s for _, s in stats], capsize=3)
    names = [" ".join(f"{a}={show(v)}" for a, v in values.items()) or "all" for values, _ in groups]
    labels = [f"{n} (n={len(members)})" for n, (_, members) in zip(names, groups)]
    right.set_yticks(range(len(groups)), labels, fontsize=7)
    right.set_title("mean +- std over seeds")
    for ax in (left, right):
        ax.invert_yaxis()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


def _hparams(root: str, rows: Sequence[Row], axes: Sequence[str]) -> None:
    """The HParams experiment (its axes and metrics) in `root`, and each ok point's session in
    `root/run_<h>/`, beside the trainer's per-epoch scalars; a session once written is kept."""
    ok = [r for r in rows if r.ok]
    if not ok:
        return
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp

    def value(v: Any) -> bool | float | str:
        if isinstance(v, (bool, str)):
            return v
        return float(v) if isinstance(v, (int, float)) else json.dumps(v)

    def domain(axis: str):  # one type per domain: bool, float or str
        seen = sorted({value(r.point.values[axis]) for r in ok if axis in r.point.values}, key=str)
        return hp.Discrete(seen if len({type(v) for v in seen}) < 2 else sorted(map(str, seen)))

    finals = ("score", "top1_error", "top5_error", "top10_error", "opa")
    metrics = [hp.Metric(f"final/{m}") for m in finals]
    metrics += [hp.Metric(m) for m in ("val_score", "val_opa", "train_loss")]
    for old in files.glob(files.join(root, f"*{HPARAMS_SUFFIX}")):
        files.remove(old)
    with tf.summary.create_file_writer(root, filename_suffix=HPARAMS_SUFFIX).as_default():
        hp.hparams_config(hparams=[hp.HParam(a, domain(a)) for a in axes], metrics=metrics)
    for r in ok:
        run_dir = run_file.tensorboard_dir(root, r.point.hash)
        if files.glob(files.join(run_dir, f"*{HPARAMS_SUFFIX}")):
            continue
        values = {a: value(v) for a, v in r.point.values.items()}
        with tf.summary.create_file_writer(run_dir, filename_suffix=HPARAMS_SUFFIX).as_default():
            hp.hparams(values, trial_id=r.point.key)
            for name, v in zip(finals, (r.score, r.top1, r.top5, r.top10, r.opa)):
                if v is not None:
                    tf.summary.scalar(f"final/{name}", v, step=r.best_epoch or 0)
