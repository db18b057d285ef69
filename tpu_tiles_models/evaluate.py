"""`tpu-tiles evaluate`: top-k errors and Kaggle-form score of trained models on the valid split.

As upstream's `tiles_evaluate.py`: each model reloaded (`runs.TrainedRun`), its top-k errors
averaged per benchmark and over all kernels; beside them the baselines of `metrics.BASELINES`
and each model's ranking with config 0 kept among its 5 first (`KEPT`), so a user sees on their
own validation split whether keeping the default pays.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import tqdm

from tpu_tiles_models import files, formats, margin, metrics, registry, run_file, safe, scoring
from tpu_tiles_models.errors import UserError
from tpu_tiles_models.kernel_files import benchmark_of
from tpu_tiles_models.runs import TrainedRun

OVERALL = "overall"
_COLUMNS = ("top1", "top5", "top10", "score", "opa")
# Each row's top-1 error over the `default` baseline's on the same kernels (None where that is
# 0: nothing to beat), shown as `top1/def` in the table of every ranking.
RATIO = "top1_vs_default"


class EvaluateError(UserError, ValueError):
    """Nothing to evaluate, or an output that cannot be written; one line with the fix."""


def expand_dirs(dirs: str | Sequence[str | os.PathLike]) -> list[Path]:
    """Model directories from `--dirs` (comma-separated or a list); a training `--out_dir`
    stands for the `model_*` directories in it, in name order."""
    items = [d for d in dirs.split(",") if d.strip()] if isinstance(dirs, str) else list(dirs)
    found: list[Path] = []
    for item in items:
        path = Path(files.canonical(str(item).strip(), what="--dirs"))
        if path.is_dir() and not (path / formats.SAVED_MODEL_FILE).is_file():
            children = sorted(p for p in path.glob(formats.MODEL_DIR_GLOB) if p.is_dir())
            if not children:
                raise EvaluateError(
                    f"{path}: no model_<hash> directories in it; pass --dirs model_<h>[,...] "
                    "or a training --out_dir"
                )
            found.extend(children)
        else:
            found.append(path)
    if not found:
        raise EvaluateError("no model directories given; pass --dirs model_<h>[,model_<h2>...]")
    return found


def _row(kernels: int, errors: dict[int, float], opa: float) -> dict[str, Any]:
    """`{"kernels", "top1", "top5", "top10", "score", "opa"}`."""
    top = {f"top{k}": errors[k] for k in metrics.TOP_KS}
    return {"kernels": kernels, **top, "score": metrics.kaggle_score(errors[5]), "opa": opa}


def _errors_row(pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """The row of (runtimes, scores) pairs."""
    errors = metrics.top_k_errors(pairs, metrics.TOP_KS)
    return _row(len(pairs), errors, metrics.mean_pair_accuracy(pairs))


def _baseline_row(runtimes: list[np.ndarray], baseline: str) -> dict[str, Any]:
    """A baseline's row: errors a mean over `metrics`' draws, OPA draw 0's."""
    rng = np.random.default_rng(0)
    opa = metrics.mean_pair_accuracy(
        (r, metrics.baseline_scores(len(r), baseline, rng)) for r in runtimes
    )
    return _row(len(runtimes), metrics.baseline_top_k_errors(runtimes, baseline), opa)


def _by_benchmark(scored: list[scoring.Scored], row_of) -> dict[str, dict[str, Any]]:
    """`row_of(kernels)` per benchmark (sorted by name), then `overall` of all kernels."""
    groups: dict[str, list] = defaultdict(list)
    for s in scored:
        groups[benchmark_of(s.tile_id)].append(s)
    rows = {name: row_of(groups[name]) for name in sorted(groups)}
    rows[OVERALL] = row_of(scored)
    return rows


def summarize(
    scored: list[scoring.Scored], *, keep_default: bool = False
) -> dict[str, dict[str, Any]]:
    """Per-benchmark rows (sorted by name) and the `overall` row, a mean over all kernels;
    with `keep_default`, of the rankings with config 0 kept among the 5 first."""
    return _by_benchmark(
        scored,
        lambda group: _errors_row(
            [(s.runtimes, margin.ranking(s.scores, keep_default)) for s in group]
        ),
    )


def summarize_baselines(scored: list[scoring.Scored]) -> dict[str, dict[str, dict[str, Any]]]:
    """`summarize`'s rows for each of `metrics.BASELINES`, on the same kernels' runtimes."""
    return {
        baseline: _by_benchmark(
            scored, lambda group, b=baseline: _baseline_row([s.runtimes for s in group], b)
        )
        for baseline in metrics.BASELINES
    }


def evaluate_dirs(
    dirs: str | Sequence[str | os.PathLike],
    data_root: str | os.PathLike,
    *,
    cache_dir: str | None = None,
    models_path: str | Path | None = None,
    progress: bool = True,
    outputs: Sequence[safe.Output] = (),
) -> dict[str, Any]:
    """Evaluates every model of `dirs` on the valid split of `data_root`, after checking
    `outputs` (`--json`, `--png`) against every model dir, run file and the data.

    Returns a JSON-ready dict: `data_root`, `split`, `models`, a list of `{"dir", "label",
    "model", "model_kwargs_json", "run_val_errors", "run_keep_default", "rows", "kept_rows"}`,
    and `baselines`, `{"random": rows, "default": rows}`. Each `rows` maps each benchmark and
    `overall` to a row (`_row`, and `RATIO`); `kept_rows` are the model's with config 0 kept
    among its 5 first; `run_keep_default` says which of the two it ranks by
    (`TrainedRun.keeps_default_in`).

    Raises:
      EvaluateError: no model directory in `dirs`.
      ExportError, DataError: a model or a valid file that cannot be read.
      FlagError: an output that clashes with an input.
    """
    model_dirs = expand_dirs(dirs)
    root = os.path.expanduser(os.fspath(data_root))
    inputs = safe.split_inputs(root) + registry.models_inputs(models_path)
    for model_dir in model_dirs:
        inputs += run_file.run_inputs(model_dir, "--dirs")
    safe.claim(outputs, inputs)
    cache = os.path.expanduser(cache_dir) if cache_dir else None
    models, baselines = [], None
    for i, model_dir in enumerate(
        tqdm.tqdm(model_dirs, desc="models", disable=not progress or len(model_dirs) < 2), 1
    ):
        run = TrainedRun.open(model_dir, models_path=models_path)
        model, dataset = run.load(root, split="valid", cache_dir=cache, progress=progress)
        scored = scoring.score_split(
            model,
            dataset.valid,
            dataset.stats,
            progress=progress,
            desc=f"[{i}] valid",
            who=str(run.model_dir),
        )
        args = run.args
        models.append(
            {
                "dir": str(model_dir),
                "label": f"[{i}] {args['model']}",
                "model": args["model"],
                "model_kwargs_json": args["model_kwargs_json"],
                "run_val_errors": run.val_errors or None,
                "run_keep_default": run.keeps_default_in(model),
                "rows": summarize(scored),
                "kept_rows": summarize(scored, keep_default=True),
            }
        )
        if baselines is None:  # every model sees the same kernels and runtimes
            baselines = summarize_baselines(scored)
        del model  # one model in memory at a time
    for rows in [*baselines.values(), *(m[k] for m in models for k in ("rows", "kept_rows"))]:
        for name, row in rows.items():
            base = baselines["default"][name]["top1"]
            row[RATIO] = row["top1"] / base if base > 0 else None
    return {
        "data_root": files.canonical(root),
        "split": "valid",
        "models": models,
        "baselines": baselines,
    }


KEPT = "+default"  # the label suffix of a model's ranking with config 0 kept in its top 5


def rankings(result: dict[str, Any], *, name: str = "label") -> list[tuple[str, dict[str, Any]]]:
    """`(label, overall row)` of every ranking: the baselines, then each model and the same
    model with config 0 kept among its 5 first (label + `KEPT`); models are labelled by
    their `name` field (`label`: "[1] ResidualSAGE", `model`: "ResidualSAGE")."""
    out = [(baseline, rows[OVERALL]) for baseline, rows in result["baselines"].items()]
    for m in result["models"]:
        out += [(m[name], m["rows"][OVERALL]), (m[name] + KEPT, m["kept_rows"][OVERALL])]
    return out


def format_table(result: dict[str, Any]) -> str:
    """Text table: a row per benchmark and `overall`; per model top-1/5/10 error and score."""
    models = result["models"]
    names = sorted({n for m in models for n in m["rows"] if n != OVERALL}) + [OVERALL]
    name_w = max(len("benchmark"), *map(len, names))
    cell, group_w = 7, 4 * 7 + 3
    lines = [f"{result['split']} split of {result['data_root']}"]
    for m in models:
        stored = m.get("run_val_errors") or {}
        note = f"  (run file top-5 error {stored['5']:.4f})" if "5" in stored else ""
        lines.append(f"{m['label']} {m['model_kwargs_json']}  {m['dir']}{note}")
    lines.append("")
    head1 = " " * (name_w + 6) + "".join(
        f" | {m['label'][: group_w - 1]:<{group_w - 1}}" for m in models
    )
    head2 = f"{'benchmark':<{name_w}} {'n':>5}"
    head2 += "".join(" | " + " ".join(f"{c:>{cell}}" for c in _COLUMNS) for _ in models)
    lines += [head1, head2, "-" * len(head2)]
    for name in names:
        kernels = next((m["rows"][name]["kernels"] for m in models if name in m["rows"]), 0)
        if name == OVERALL:
            lines.append("-" * len(head2))
        line = f"{name:<{name_w}} {kernels:>5}"
        for m in models:
            row = m["rows"].get(name)
            values = [f"{row[c]:>{cell}.4f}" if row else f"{'-':>{cell}}" for c in _COLUMNS]
            line += " | " + " ".join(values)
        lines.append(line)
    return "\n".join([*lines, "", *rankings_table(result)])


def rankings_table(result: dict[str, Any], *, name: str = "label") -> list[str]:
    """Every ranking's overall row, baselines first, with its top-1 error over the `default`
    row's (`top1/def`), and which rankings the models rank by (models named as `rankings`)."""
    chose = {m[name] + KEPT: m.get("run_keep_default") for m in result["models"]}
    ranked = rankings(result, name=name)
    name_w = max(len("ranking"), *(len(label) for label, _ in ranked))
    lines = [
        "all kernels, every ranking (default: config 0, the compiler's default, first, the "
        f"rest random; {KEPT}: the model's ranking with config 0 kept in its top 5; top1/def: "
        "top-1 error over default's, below 1 beats the compiler's pick)",
        f"{'ranking':<{name_w}} " + " ".join(f"{c:>7}" for c in _COLUMNS) + f" {'top1/def':>8}",
    ]
    for label, row in ranked:
        values = " ".join(f"{row[c]:>7.4f}" for c in _COLUMNS)
        note = "  <- the model ranks by this (its run's validation chose it)"
        note = note if chose.get(label) else ""
        lines.append(f"{label:<{name_w}} {values} {ratio_text(row.get(RATIO)):>8}{note}")
    return lines


def ratio_text(ratio: float | None) -> str:
    """A `RATIO` for a table: `0.87x`, or `-` when the default's top-1 error is 0."""
    return "-" if ratio is None else f"{ratio:.2f}x"


def write_outputs(
    result: dict[str, Any],
    *,
    json_path: str | os.PathLike | None = None,
    png_path: str | os.PathLike | None = None,
) -> list[Path]:
    """Writes `result` as indented JSON and as a chart (`draw`), those given, together: both
    or, on a failure or a stop signal, neither (`safe.atomic_paths`). Returns their paths."""
    given = [(p, flag) for p, flag in ((json_path, "--json"), (png_path, "--png")) if p]
    paths = [Path(os.path.expanduser(os.fspath(p))) for p, _ in given]
    with safe.atomic_paths([(path, flag) for path, (_, flag) in zip(paths, given)]) as tmps:
        for (_, flag), tmp in zip(given, tmps):
            if flag == "--json":
                tmp.write_text(json.dumps(result, indent=2, allow_nan=False), encoding="utf-8")
            else:
                draw(result, tmp)
    return paths


def draw(result: dict[str, Any], path: str | os.PathLike) -> None:
    """PNG bar chart of every ranking's overall score and top-1/5/10 error, saved to `path`
    as it is drawn (a temporary name: `write_outputs`)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    import matplotlib.pyplot as plt

    labels, overall = zip(*rankings(result))
    x = np.arange(len(labels))
    fig, (ax_score, ax_err) = plt.subplots(1, 2, figsize=(4 + 1.1 * len(labels), 3.8))
    bars = ax_score.bar(x, [r["score"] for r in overall], color="tab:green")
    ax_score.bar_label(bars, fmt="%.3f", fontsize=8)
    ax_score.set_title("score (1 - top-5 error), higher is better")
    width = 0.8 / len(metrics.TOP_KS)
    for j, k in enumerate(metrics.TOP_KS):
        ax_err.bar(x + (j - 1) * width, [r[f"top{k}"] for r in overall], width, label=f"top-{k}")
    ax_err.set_title("top-k error, lower is better")
    ax_err.legend()
    for ax in (ax_score, ax_err):
        ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=90)
    finally:
        plt.close(fig)
