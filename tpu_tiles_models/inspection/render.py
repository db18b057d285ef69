"""The report as text for the terminal (`format_table`) and its histograms as a PNG (`draw`)."""

from __future__ import annotations

import itertools
import os
from typing import Any, Iterable, Sequence

import numpy as np

from tpu_tiles_models.inspection.report import FEW_CONFIGS
from tpu_tiles_models.inspection.stats import share

# The 24 config_feat columns (upstream README): kernel, output and input tile bounds, each in
# 6 dimensions, their sum and their product.
CONFIG_COLUMNS = tuple(
    f"{part}_bounds_{dim}"
    for part in ("kernel", "output", "input")
    for dim in (*map(str, range(6)), "sum", "product")
)


def _int(x: Any) -> str:
    return "-" if x is None else f"{int(round(x)):,}"


def _num(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}" if abs(x) < 1e5 else f"{x:.3g}"


def _count(x: Any) -> str:
    """A count or a percentile of counts: `38`, `30.5`, `1,370`."""
    if x is None:
        return "-"
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.1f}"


def _sizes(d: dict[str, Any]) -> str:
    """`mean / p50 / max` of nodes or edges per kernel: `40.1 / 36 / 394`."""
    return (
        "-" if d["mean"] is None else f"{d['mean']:.1f} / {_count(d['p50'])} / {_count(d['max'])}"
    )


def _pct(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _kernels_share(d: dict[str, Any] | None) -> str:
    return "-" if d is None or d["share"] is None else f"{d['kernels']:,} ({_pct(d['share'])})"


def _join(d: dict[str, Any] | None, keys: Iterable[str], fmt=_num) -> str:
    return "-" if d is None else " / ".join(fmt(d[k]) for k in keys)


def _ranges(columns: list[int], names: Sequence[str] | None = None) -> str:
    """`[0, 1, 2, 5]` -> `0-2, 5`; with names, `name (i)` one by one."""
    if not columns:
        return "none"
    if names is not None:
        return ", ".join(f"{names[i]} ({i})" for i in columns)
    parts = []
    for _, run in itertools.groupby(enumerate(columns), lambda p: p[1] - p[0]):
        run = [c for _, c in run]
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(parts)


def _stats(label: str, d: dict[str, Any] | None, keys: Sequence[str], fmt=_num):
    """A row `label: p10 / p50` of the figures `keys` of `d`."""
    return f"{label}: {' / '.join(keys)}", _join(d, keys, fmt)


def _rows(s: dict[str, Any], tolerance: float) -> list[tuple[str, str]]:
    """(label, cell) rows of one split."""
    dup, prog = s["duplicates"], s["programs"]
    rt = s["runtimes"] or {}
    c0 = rt.get("config0") or {}
    rows = [
        ("npz files", _int(s["files"])),
        ("kernels read", _int(s["kernels"])),
        ("bad files skipped", _int(len(s["bad_files"]))),
        ("nodes: total", _int(s["nodes"]["total"])),
        ("nodes per kernel: mean / p50 / max", _sizes(s["nodes"])),
        ("edges: total", _int(s["edges"]["total"])),
        ("edges per kernel: mean / p50 / max", _sizes(s["edges"])),
        ("configs: total", _int(s["configs"]["total"])),
        _stats("configs per kernel", s["configs"], ("mean", "p50"), _count),
        _stats("configs per kernel", s["configs"], ("p10", "p90", "max"), _count),
        (f"kernels with < {FEW_CONFIGS} configs", _kernels_share(s["configs"]["fewer_than_10"])),
    ]
    for b in s["configs"]["histogram"]:
        label = (
            f"configs {b['lo']}-{b['hi']}" if b["hi"] is not None else f"configs > {b['lo'] - 1}"
        )
        rows.append((f"  {label}", _kernels_share(share(b["kernels"], s["kernels"]))))
    falls = rt["output_tile"]["runtime_falls"] if rt else None
    anonymised = prog["anonymised_kernels"]
    rows += [
        ("kernels with runtimes", _int(s["labelled_kernels"])),
        _stats("runtime / normaliser", rt.get("ratio"), ("mean", "std")),
        _stats("runtime / normaliser", rt.get("ratio"), ("p10", "p50", "p90")),
        _stats("runtime / normaliser", rt.get("ratio"), ("p99", "max")),
        _stats("worst / best per kernel", rt.get("worst_over_best"), ("p10", "p50", "p90")),
        _stats(
            "best runtime / normaliser", rt.get("best_ratio"), ("p10", "p50"), lambda x: _num(x, 3)
        ),
        _stats("normaliser spread in a kernel", rt.get("normaliser_spread"), ("p50", "max"), _pct),
        (
            f"config 0 is the default (within {_pct(tolerance, 0)})",
            _kernels_share(c0.get("is_default")),
        ),
        ("config 0 is the fastest", _kernels_share(c0.get("fastest"))),
        _stats("config 0 / best", c0.get("over_best"), ("mean", "p50", "p90")),
        ("runtime falls as the output tile grows", _kernels_share(falls)),
        (
            "duplicate config rows (kernels with one)",
            f"{_pct(dup['share'], 2)} ({dup['kernels']:,})",
        ),
        _stats("duplicates' runtime gap", dup["gap"], ("p50", "p90"), lambda x: _pct(x, 2)),
        (
            "programs",
            f"{prog['count']:,}" + (f" (+{anonymised:,} anonymised ids)" if anonymised else ""),
        ),
        _stats("kernels per program", prog["kernels_per_program"], ("min", "p50", "max"), _int),
    ]
    for key in ("node_feat", "config_feat"):
        f = s["features"][key]
        counts = f"{len(f['constant'])} / {len(f['heavy_tailed'])} of {f['columns']}"
        rows.append((f"{key} columns: constant / heavy-tailed", counts))
    return rows


def format_table(result: dict[str, Any]) -> str:
    """The report as text: a column per split, then the programs shared between splits and
    the constant and heavy-tailed feature columns."""
    splits = result["splits"]
    settings = result["settings"]
    per_split = {name: _rows(s, settings["default_tolerance"]) for name, s in splits.items()}
    labels = [label for label, _ in next(iter(per_split.values()))] if per_split else []
    label_w = max(map(len, labels), default=0)
    widths = {n: max(len(n), *(len(c) for _, c in rows)) for n, rows in per_split.items()}
    t = result["totals"]
    bad = f", {t['bad_files']} bad files skipped" if t["bad_files"] else ""
    lines = [f"{result['data_root']}: {t['kernels']:,} kernels, {t['configs']:,} configs{bad}", ""]
    lines.append(" " * label_w + "".join(f"  {n:>{widths[n]}}" for n in per_split))
    for i, label in enumerate(labels):
        cells = "".join(f"  {per_split[n][i][1]:>{widths[n]}}" for n in per_split)
        lines.append(f"{label:<{label_w}}{cells}")
    lines.append("")
    for pair, overlap in result["program_overlap"].items():
        shown = ", ".join(overlap["programs"][:5]) + (", ..." if overlap["count"] > 5 else "")
        shown = f" ({shown})" if shown else ""
        lines.append(f"programs in both {pair}: {overlap['count']}{shown}")
    tail = settings["tail_sigmas"]
    for name, s in splits.items():
        for key, names in (("node_feat", None), ("config_feat", CONFIG_COLUMNS)):
            f = s["features"][key]
            lines.append(
                f"{name} {key} constant: {_ranges(f['constant'], names)}; heavy-tailed (an "
                f"extreme > {tail:g} std from the mean): {_ranges(f['heavy_tailed'], names)}"
            )
        lines += [f"{name} bad file: {message}" for message in s["bad_files"][:3]]
        if len(s["bad_files"]) > 3:
            lines.append(f"{name}: {len(s['bad_files']) - 3} more bad files (see --json)")
    return "\n".join(lines)


def _bin_label(b: dict[str, Any], scale: int) -> str:
    def short(x: int) -> str:
        return f"{x // 1000}k" if scale >= 1000 and x >= 1000 else str(x)

    if b["hi"] is None:
        return f">{short(b['lo'] - 1)}"
    if b["lo"] == b["hi"]:
        return short(b["lo"])
    return f"{short(b['lo'] - 1) if scale >= 1000 and b['lo'] > 1 else b['lo']}-{short(b['hi'])}"


def draw(result: dict[str, Any], path: str | os.PathLike) -> None:
    """PNG of the report's histograms, splits side by side: configs, nodes and edges per kernel
    (share of kernels), runtime / normaliser over all configs and worst / best per kernel;
    saved as it is drawn, so `path` is a temporary name (`safe.atomic_paths`)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    import matplotlib.pyplot as plt

    splits = result["splits"]
    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    width = 0.8 / len(splits)
    for ax, key, scale in zip(axes[0], ("configs", "nodes", "edges"), (1000, 1, 1)):
        bins = next(iter(splits.values()))[key]["histogram"]
        x = np.arange(len(bins))
        for j, (name, s) in enumerate(splits.items()):
            counts = np.array([b["kernels"] for b in s[key]["histogram"]], np.float64)
            x_j, label = x + (j - (len(splits) - 1) / 2) * width, f"{name} ({s['kernels']:,})"
            ax.bar(x_j, counts / max(counts.sum(), 1), width, label=label)
        ax.set_xticks(x, [_bin_label(b, scale) for b in bins], rotation=45, ha="right", fontsize=8)
        if key == "configs":  # the real tail above 1,000 is a few percent per bin
            ax.set_yscale("log")
        ax.set_title(f"{key} per kernel (share of kernels)")
        ax.legend(fontsize=8)
    titles = ("runtime / normaliser, all configs", "worst / best runtime per kernel")
    for ax, key, title in zip(axes[1], ("ratio", "worst_over_best"), titles):
        for name, s in splits.items():
            h = s["runtimes"] and s["runtimes"][key]["histogram"]
            if not h or not h["counts"]:
                continue
            counts = np.array(h["counts"], np.float64)
            ax.stairs(counts / counts.sum(), 10.0 ** np.array(h["log10_edges"]), label=name)
        ax.set_xscale("log")
        ax.set_title(f"{title} (share)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    ax = axes[1, 2]
    labels, values = [], []
    for name, s in splits.items():
        c0 = s["runtimes"] and s["runtimes"]["config0"]
        if c0:
            labels += [f"{name}\ndefault", f"{name}\nfastest"]
            values += [c0["is_default"]["share"], c0["fastest"]["share"]]
    bars = ax.bar(np.arange(len(values)), values, color=["tab:blue", "tab:orange"] * len(splits))
    ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.set_xticks(np.arange(len(values)), labels, fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_title("config 0: is the default, is the fastest (share of kernels)")
    fig.suptitle(result["data_root"], fontsize=9)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=80)
    finally:
        plt.close(fig)
