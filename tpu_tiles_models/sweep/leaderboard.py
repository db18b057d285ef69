"""The leaderboard: one row per point from its run file and outcome, ranked, as CSV, Markdown
and a chart (`sweep.csv`, `sweep.md`, `sweep.png`).

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

from tpu_tiles_models import export, formats
from tpu_tiles_models.sweep.points import SEED_AXIS, Point, show


@dataclasses.dataclass
class Row:
    """One point's line in the leaderboard. `status`: ok, nan, failed or not run."""

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
    """A point's row from its run file (`info`) and its recorded outcome (`record`)."""
    wall = record.get("wall_s") if record else None
    if info is None:
        status = record["status"] if record and record["status"] == "failed" else "not run"
        return Row(point, status, (record or {}).get("error", ""), wall_s=wall)
    val = info.get("final_error", {}).get("val", {})
    curve, extras = info.get("train_curve", {}), info.get(export.EXTRAS_KEY) or {}
    epochs = len(curve.get("epoch", []))
    best = extras.get("best_epoch", epochs - 1)
    opas = curve.get("val_opa") or [None]
    row = Row(
        point,
        "ok",
        top1=val.get("1"),
        top5=val.get("5"),
        top10=val.get("10"),
        opa=opas[best] if 0 <= best < len(opas) else opas[-1],
        epochs=epochs,
        best_epoch=best,
        train_s=round(sum(extras.get("epoch_seconds", [])), 2),
        wall_s=wall,
    )
    row.score = 1.0 - row.top5 if row.top5 is not None else None
    bad = _non_finite(curve.get("train_loss", []), [row.top1, row.top5, row.top10])
    if bad:
        row.status, row.error = "nan", bad
    return row


def _non_finite(losses: Sequence[float], errors: Sequence[float | None]) -> str:
    for epoch, loss in enumerate(losses):
        if not _finite(loss):
            return f"non-finite training loss at epoch {epoch}; lower --lr or --clip_norm"
    if not all(_finite(e) for e in errors):
        return "non-finite validation error"
    return ""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def rank_rows(rows: list[Row]) -> list[Row]:
    """Best score first; then nan, failed and not-run points."""
    order = {"ok": 0, "nan": 1, "failed": 2, "not run": 3}
    return sorted(rows, key=lambda r: (order[r.status], -(r.score if r.ok else 0.0), r.point.key))


def axis_names(points: Sequence[Point]) -> list[str]:
    """Every axis of the sweep, in first-seen order."""
    names: dict[str, None] = {}
    for p in points:
        names.update(dict.fromkeys(p.values))
    return list(names)


CSV_COLUMNS = (
    "rank",
    "status",
    "score",
    "top1_error",
    "top5_error",
    "top10_error",
    "opa",
    "epochs",
    "best_epoch",
    "train_s",
    "wall_s",
)


def leaderboard_csv(rows: Sequence[Row], axes: Sequence[str]) -> str:
    """`sweep.csv`: one row per point; `flags` is `tpu-tiles train <flags>` of the point."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *axes, "key", "hash", "model_dir", "flags", "error"])
    for rank, r in enumerate(rows, 1):
        metrics = (r.score, r.top1, r.top5, r.top10, r.opa, r.epochs, r.best_epoch)
        writer.writerow(
            [
                rank if r.ok else "",
                r.status,
                *("" if m is None else m for m in metrics),
                "" if r.train_s is None else r.train_s,
                "" if r.wall_s is None else r.wall_s,
                *(show(r.point.values[a]) if a in r.point.values else "" for a in axes),
                r.point.key,
                r.point.hash,
                formats.model_dir_name(r.point.hash) if r.status != "not run" else "",
                shlex.join(r.point.args.to_argv()),
                r.error,
            ]
        )
    return out.getvalue()


@dataclasses.dataclass
class Group:
    """Points that differ only by seed: mean and sample std of their scores."""

    values: dict[str, Any]
    scores: list[float]
    top5: list[float]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores)

    @property
    def std(self) -> float:
        return statistics.stdev(self.scores) if len(self.scores) > 1 else 0.0


def seed_groups(rows: Sequence[Row], axes: Sequence[str]) -> list[Group]:
    """Successful points grouped by every axis but `seed`, best mean score first."""
    keep = [a for a in axes if a != SEED_AXIS]
    groups: dict[str, Group] = {}
    for r in rows:
        if not r.ok:
            continue
        values = {a: r.point.values[a] for a in keep if a in r.point.values}
        group = groups.setdefault(
            json.dumps(values, sort_keys=True, default=str), Group(values, [], [])
        )
        group.scores.append(r.score)
        group.top5.append(r.top5)
    return sorted(groups.values(), key=lambda g: -g.mean)


def leaderboard_markdown(
    rows: Sequence[Row], axes: Sequence[str], title: str, ensemble: dict | None = None
) -> str:
    """`sweep.md`: the ranked points, mean +- std over seeds, the ensemble, what failed."""
    ok = sum(r.ok for r in rows)
    lines = [f"# Sweep {title}", "", f"{len(rows)} points: {ok} ok, {len(rows) - ok} not ok.", ""]
    lines += _md_points(rows, axes)
    groups = seed_groups(rows, axes)
    if any(len(g.scores) > 1 for g in groups):
        lines += ["", "## Mean +- std over seeds", "", *_md_groups(groups, axes)]
    if ensemble:
        lines += ["", f"## Ensemble of the {ensemble['k']} best points", "", _md_ensemble(ensemble)]
    bad = [r for r in rows if not r.ok]
    if bad:
        lines += ["", "## Not ok", ""]
        lines += [f"- `{r.point.key}` {r.point.describe()}: {r.status}: {r.error}" for r in bad]
    return "\n".join(lines) + "\n"


def _md_points(rows: Sequence[Row], axes: Sequence[str]) -> list[str]:
    head = ["rank", "score", "top-1 err", "top-5 err", "top-10 err", "OPA", "epochs", "s"]
    lines = [_md_row([*head, *axes, "status"]), _md_row(["---"] * (len(head) + len(axes) + 1))]
    for rank, r in enumerate(rows, 1):
        metrics = [_fmt(m) for m in (r.score, r.top1, r.top5, r.top10, r.opa)]
        seconds = r.wall_s if r.wall_s is not None else r.train_s
        cells = [str(rank) if r.ok else "", *metrics, _fmt(r.epochs), _fmt(seconds, 1)]
        cells += [show(r.point.values[a]) if a in r.point.values else "" for a in axes]
        lines.append(_md_row([*cells, r.status]))
    return lines


def _md_groups(groups: Sequence[Group], axes: Sequence[str]) -> list[str]:
    keep = [a for a in axes if a != SEED_AXIS]
    lines = [_md_row([*keep, "seeds", "score", "top-5 err"]), _md_row(["---"] * (len(keep) + 3))]
    for g in groups:
        std5 = statistics.stdev(g.top5) if len(g.top5) > 1 else 0.0
        cells = [show(g.values.get(a, "")) for a in keep]
        cells += [str(len(g.scores)), f"{g.mean:.4f} +- {g.std:.4f}"]
        lines.append(_md_row([*cells, f"{statistics.fmean(g.top5):.4f} +- {std5:.4f}"]))
    return lines


def _md_ensemble(ensemble: dict) -> str:
    members = ", ".join(f"`{k}`" for k in ensemble["members"])
    if ensemble["error"]:
        return f"Not built: {ensemble['error']}"
    return (
        f"score {ensemble['score']:.4f} (top-1 err {ensemble['top1']:.4f}, top-5 err "
        f"{ensemble['top5']:.4f}, top-10 err {ensemble['top10']:.4f}); members {members}; "
        f"`{ensemble['dir']}`"
    )


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _fmt(value: float | int | None, digits: int = 4) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:.{digits}f}"


def leaderboard_png(rows: Sequence[Row], axes: Sequence[str]) -> bytes:
    """`sweep.png`: score per point (left) and mean +- std over seeds per group (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.ok]
    groups = seed_groups(rows, axes)
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12, 0.8 + 0.3 * max(len(ok), len(groups), 4)), squeeze=True
    )
    labels = [r.point.describe() for r in ok]
    left.barh(range(len(ok)), [r.score for r in ok], color="tab:blue")
    left.set_yticks(range(len(ok)), labels, fontsize=7)
    left.invert_yaxis()
    left.set_title("score (1 - top-5 error) per point")
    keep = [a for a in axes if a != SEED_AXIS]
    names = [
        " ".join(f"{a}={show(g.values[a])}" for a in keep if a in g.values) or "all" for g in groups
    ]
    right.barh(
        range(len(groups)),
        [g.mean for g in groups],
        xerr=[g.std for g in groups],
        color="tab:green",
        capsize=3,
    )
    right.set_yticks(
        range(len(groups)), [f"{n} (n={len(g.scores)})" for n, g in zip(names, groups)], fontsize=7
    )
    right.invert_yaxis()
    right.set_title("mean +- std over seeds")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()
