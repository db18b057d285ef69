"""Where the single pick is held back: the features, the model or the noise (run by hand).

For each synthetic family and its shuffled copy (the suite's: `suite.make_data`, configs in a
seeded random order so that config 0 is not special), at a small budget (400 train / 100 valid
kernels, at most 400 configs each, data seeds 0,1,2), it scores on train and valid kernels,
top-1 and top-5 error (`metrics.kernel_top_k_error` against runtime / normaliser, as every
table of the project):

- `default`: config 0 first, the rest at random (the suite's baseline; its top-1 is the
  compiler's pick), on the families only: on a shuffled copy config 0 is no default;
- `floor`: each kernel's configs ranked by the generator's noise-free runtime
  (`synthetic.noise_free_runtime`): measurement noise is all that separates it from 0, and
  no model ranks better on average;
- config-only ridges fitted per family on the train kernels (each kernel weighs the same),
  predicting log runtime / normaliser centred per kernel, ranking by prediction, with
  (a) `raw`: log(x + 1) of the 24 config columns (and its square: `families.config_design`);
  (b) `perdim`: per output dimension, read from the node features (the tiled output's shape
      and layout, bounds in granules of its layout as the families write them), the tile
      count, the padding waste and log(tile / shape), and for the whole tile its count,
      waste, elements and bytes; the kernel and input bounds, whose dimensions are no output
      dimension, as log(x + 1); each feature and its square (`design`);
  (c) `both`: (a) and (b) side by side;
- the same three designs in a ridge fitted on each kernel's own configs (`own_*`, out of
  fold: `own_kernel_scores`), what a per-config head whose weights depend on the kernel (a
  late head over a graph embedding) could reach with them.

Read the rows together: a pooled ridge far above the floor on its own train kernels
under-fits (one set of weights for every kernel cannot express the order); an own-kernel
ridge far above the floor says the designs themselves cannot, even kernel by kernel; `perdim`
against `raw` is what the representation buys; floor against 0 is what the noise costs.

    python benchmarks/config_bottleneck.py --work WORK     # data (reused), then scores
    python benchmarks/config_bottleneck.py --tabulate      # the table from the json

Writes `benchmarks/results/<name>.json` (one row per family, data seed and split) and
`<name>.md` (mean +- std over data seeds; docs/choosing.md's block, through
`update_readme.py`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

# benchmarks/suite.py and families.py, beside this script: the data sets and shuffled copies
# are the suite's, the raw design the families' config-only ridge's.
from families import config_design
from suite import RESULTS, SHUFFLED, family_roots, make_data, mean_std

from tpu_tiles_models import data, metrics, safe, synthetic
from tpu_tiles_models.synthetic.features import CFG_INPUT, CFG_KERNEL, CFG_OUTPUT, COL_LAYOUT
from tpu_tiles_models.synthetic.geometry import (
    dims_of,
    element_bytes,
    granules,
    operand_lists,
    root_outputs,
)

# The small budget of issue 46 (where seed variance shows); test kernels are only written.
SMALL = dict(train=400, valid=100, test=10, max_configs=400)
SLOTS = 6  # output dimensions in a config's bounds block
FEATURE_SETS = ("raw", "perdim", "both")
# The rankers, in the table's order, and their headers.
OWN = tuple(f"own_{name}" for name in FEATURE_SETS)  # each kernel's own ridge
RANKERS = ("default", "floor", *FEATURE_SETS, *OWN)
HEADERS = (
    "default (config 0)",
    "noise-free floor",
    "ridge, raw",
    "ridge, per-dim",
    "ridge, both",
    "own-kernel ridge, raw",
    "own-kernel ridge, per-dim",
    "own-kernel ridge, both",
)
KS = (1, 5)
ALPHA = 1e-3  # ridge penalty per kernel on standardised features: a guard, not a prior
OWN_ALPHA = 1e-2  # the same, on one kernel's configs: a few hundred rows, not a hundred thousand
FOLDS, MIN_OWN = 2, 4  # own-kernel ridges: out-of-fold scores; too few configs to split below
DRAWS = 20  # random orders of the rest, for `default`'s top-5 (as the suite's baseline)


# --------------------------------------------------------------------------------------
# Features.
# --------------------------------------------------------------------------------------
def output_geometry(
    node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The tiled output as the config's output bounds see it, slot by slot from its minor-most
    dim (slot 0) outwards: `[SLOTS]` config column of each slot's bound, shape and granule
    (slots past the rank: 1 and 1), and its bytes per element.

    The output is the fusion's root (the first operand of a tuple root); a bound counts
    granules of its layout: 128 along the minor-most dim, 8 along the next, 1 elsewhere
    (`geometry.granules`, the families' convention). Slots follow the layout so that slot 0
    is the lane dim in every kernel, whatever its rank and dim order."""
    opc = np.asarray(node_opcode).astype(np.int64)
    out = root_outputs(node_feat, opc, operand_lists(len(opc), np.asarray(edge_index)))[0]
    dims = dims_of(node_feat, out)[:SLOTS]
    rank = len(dims)
    minor_to_major = node_feat[out, COL_LAYOUT : COL_LAYOUT + rank].astype(np.int64) % max(rank, 1)
    if sorted(minor_to_major.tolist()) != list(range(rank)):  # no layout: the last dim minor
        minor_to_major = np.arange(rank)[::-1]
    order = np.concatenate([minor_to_major, np.arange(rank, SLOTS)])
    shape, granule = np.ones(SLOTS), np.ones(SLOTS)
    shape[:rank] = dims[minor_to_major]
    granule[:rank] = granules(node_feat, out, rank)[minor_to_major]
    return CFG_OUTPUT + order, shape, granule, max(float(element_bytes(node_feat)[out]), 1.0)


def perdim_features(
    config_feat: np.ndarray,
    columns: np.ndarray,
    shape: np.ndarray,
    granule: np.ndarray,
    elem_bytes: float,
) -> np.ndarray:
    """`[c, 3 * SLOTS + 4 + 12]` per-dimension features of `c` configs of one kernel, from
    `output_geometry`'s slots (`columns`, `shape`, `granule`, `elem_bytes`).

    Per slot (bound b in granules g of a dim of s elements, u = ceil(s / g) units; 0 past
    the rank): log tile count log(ceil(u / b)), padding waste ceil(u / b) b g / s - 1 and
    log(b g / s); then log tiles, waste, log elements and log bytes of the whole tile; then
    log(x + 1) of the 6 kernel and 6 input bounds."""
    cfg = np.asarray(config_feat, np.float64)
    units = np.ceil(shape / granule)
    bound = np.clip(cfg[:, columns], 1.0, units)
    tiles = np.ceil(units / bound)
    extent = bound * granule
    waste = tiles * extent / shape - 1.0
    log_elems = np.log(extent).sum(axis=1)
    whole = np.column_stack(
        [
            np.log(tiles).sum(axis=1),
            np.prod(1.0 + waste, axis=1) - 1.0,
            log_elems,
            log_elems + np.log(elem_bytes),
        ]
    )
    bounds = np.concatenate(
        [cfg[:, CFG_KERNEL : CFG_KERNEL + SLOTS], cfg[:, CFG_INPUT : CFG_INPUT + SLOTS]], axis=1
    )
    return np.concatenate(
        [np.log(tiles), waste, np.log(extent / shape), whole, np.log1p(np.maximum(bounds, 0.0))],
        axis=1,
    )


def design(features: np.ndarray) -> np.ndarray:
    """`[c, 2 f]`: each feature and its square (the raw design's form)."""
    return np.concatenate([features, features**2], axis=1)


def designs(kernel: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The three designs (`FEATURE_SETS`) of one kernel's configs."""
    geometry = output_geometry(kernel["node_feat"], kernel["node_opcode"], kernel["edge_index"])
    raw = config_design(kernel["config_feat"])
    perdim = design(perdim_features(kernel["config_feat"], *geometry))
    return dict(raw=raw, perdim=perdim, both=np.concatenate([raw, perdim], axis=1))


# --------------------------------------------------------------------------------------
# The ridge and the errors.
# --------------------------------------------------------------------------------------
def fit_ridge(xs: list[np.ndarray], ys: list[np.ndarray], alpha: float = ALPHA) -> tuple:
    """A ridge for `ys` (per kernel `[c]`) on `xs` (per kernel `[c, f]`), both centred per
    kernel (only the order inside a kernel counts), each kernel weighing the same whatever its
    number of configs, on features standardised over all kernels. Returns `(weights, scale)`:
    a kernel's prediction is `(x / scale) @ weights` (`predict`)."""
    f = xs[0].shape[1]
    xtx, xty = np.zeros((f, f)), np.zeros(f)
    for x, y in zip(xs, ys):
        xc, yc = x - x.mean(axis=0), y - y.mean()
        xtx += xc.T @ xc / len(y)
        xty += xc.T @ yc / len(y)
    scale = np.sqrt(np.diag(xtx) / len(xs))
    scale[scale == 0] = 1.0  # a feature constant within every kernel: no weight
    xtx, xty = xtx / np.outer(scale, scale), xty / scale
    return np.linalg.solve(xtx + alpha * len(xs) * np.eye(f), xty), scale


def predict(model: tuple, x: np.ndarray) -> np.ndarray:
    """`[c]` scores (log runtime up to a constant; lower = faster) of a `fit_ridge` model."""
    weights, scale = model
    return (x / scale) @ weights


def own_kernel_scores(x: np.ndarray, y: np.ndarray, folds: int = FOLDS) -> np.ndarray:
    """`[c]` out-of-fold scores of a ridge fitted on one kernel's own configs: the configs in
    `folds` seeded folds, each scored by the ridge on the others (`OWN_ALPHA`). What a head
    whose weights depend on the kernel could reach with these features. Fewer than
    `MIN_OWN` configs: all 0 (file order)."""
    if len(y) < MIN_OWN:
        return np.zeros(len(y))
    fold = np.random.default_rng(0).permutation(len(y)) % folds
    scores = np.zeros(len(y))
    for j in range(folds):
        fit = fold != j
        model = fit_ridge([x[fit]], [y[fit]], OWN_ALPHA)
        # The ridge is centred: each fold's scores get its own intercept, so that the folds
        # rank against each other on one scale.
        intercept = y[fit].mean() - predict(model, x[fit]).mean()
        scores[~fit] = predict(model, x[~fit]) + intercept
    return scores


def kernel_errors(ratios: np.ndarray, scores: np.ndarray) -> dict[int, float]:
    """One kernel's top-k errors (`KS`) of ranking its configs by `scores` (lower = faster)."""
    return {k: metrics.kernel_top_k_error(ratios, scores, k) for k in KS}


def default_errors(ratios: list[np.ndarray]) -> dict[int, float]:
    """Mean top-k errors of config 0 first, the rest at random (`DRAWS` draws): the suite's
    `default` baseline, whose top-1 is config 0's alone."""
    return metrics.baseline_top_k_errors(ratios, "default", draws=DRAWS, ks=KS)


def mean_errors(per_kernel: list[dict[int, float]]) -> dict[int, float]:
    """Means over kernels (each kernel weighs the same, as every table of the project)."""
    return {k: statistics.fmean(e[k] for e in per_kernel) for k in KS}


# --------------------------------------------------------------------------------------
# Data.
# --------------------------------------------------------------------------------------
def kernels_of(root: Path, split: str) -> list[dict[str, np.ndarray]]:
    """Every kernel of `root/split` as its arrays, with `ratios`: runtime / normaliser."""
    s = data.load_split(root, split, progress=False)
    ratios = s.config_runtime / s.config_runtime_normalizers
    out = []
    for i in range(len(s)):
        n, e, c = (slice(*o[i : i + 2]) for o in (s.node_offsets, s.edge_offsets, s.config_offsets))
        out.append(
            dict(
                node_feat=s.node_feat[n],
                node_opcode=s.node_opcode[n],
                edge_index=s.edge_index[e],
                config_feat=s.config_feat[c],
                ratios=ratios[c],
            )
        )
    return out


def score_family(root: Path, family: str, generator: str, seed: int) -> list[dict]:
    """Rows (one per split) of one data set: its sizes and every ranker's top-k errors."""
    splits = {split: kernels_of(root, split) for split in ("train", "valid")}
    x = {split: [designs(k) for k in ks] for split, ks in splits.items()}
    targets = [np.log(k["ratios"]) for k in splits["train"]]
    models = {name: fit_ridge([d[name] for d in x["train"]], targets) for name in FEATURE_SETS}
    rows = []
    for split, ks in splits.items():
        ratios = [k["ratios"] for k in ks]
        errors = {}
        if not family.endswith(SHUFFLED):
            errors["default"] = default_errors(ratios)
        floor = [
            synthetic.noise_free_runtime(
                k["node_feat"], k["node_opcode"], k["edge_index"], k["config_feat"], generator
            )
            for k in ks
        ]
        errors["floor"] = mean_errors([kernel_errors(r, s) for r, s in zip(ratios, floor)])
        for name, model in models.items():
            scores = [predict(model, d[name]) for d in x[split]]
            errors[name] = mean_errors([kernel_errors(r, s) for r, s in zip(ratios, scores)])
            scores = [own_kernel_scores(d[name], np.log(r)) for d, r in zip(x[split], ratios)]
            errors[f"own_{name}"] = mean_errors(
                [kernel_errors(r, s) for r, s in zip(ratios, scores)]
            )
        row = dict(
            family=family,
            seed=seed,
            split=split,
            kernels=len(ks),
            configs=round(statistics.fmean(len(r) for r in ratios), 1),
        )
        for name, errs in errors.items():
            row.update({f"{name}_top{k}": round(v, 5) for k, v in errs.items()})
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------
# The command.
# --------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="", help="where the data sets go (kept; reused)")
    p.add_argument("--families", default=",".join(synthetic.FAMILIES))
    p.add_argument("--seeds", default="0,1,2", help="data seeds")
    p.add_argument("--train", type=int, default=SMALL["train"], help="train kernels per family")
    p.add_argument("--valid", type=int, default=SMALL["valid"], help="valid kernels per family")
    p.add_argument("--test", type=int, default=SMALL["test"], help="test kernels (written only)")
    p.add_argument("--max_configs", type=int, default=SMALL["max_configs"], help="0: all")
    p.add_argument("--out", default=str(RESULTS), help="where the results files go")
    p.add_argument("--name", default="bottleneck", help="the results files' name")
    p.add_argument(
        "--tabulate", action="store_true", help="score nothing: the table from <name>.json"
    )
    return p.parse_args(argv)


def _fail(message: str) -> None:
    """One line on standard error, exit 2 (bad input, as the `tpu-tiles` commands)."""
    print(f"bottleneck: {message}", file=sys.stderr)
    sys.exit(2)


def check(a: argparse.Namespace) -> list[int]:
    """The flags checked before any work (one line and exit 2 on the first bad one); returns
    the data seeds."""
    if not a.work:
        _fail("--work is required to score (the data sets are made and kept there)")
    unknown = [f for f in a.families.split(",") if f not in synthetic.FAMILIES]
    if unknown:
        _fail(
            f"--families: no family {', '.join(unknown)}; use some of "
            + ",".join(synthetic.FAMILIES)
        )
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        _fail(f"--seeds: give data seeds as integers, e.g. 0,1,2 (got {a.seeds!r})")
    if min(a.train, a.valid, a.test) < 1 or a.max_configs < 0:
        _fail("--train, --valid and --test need at least 1 kernel, --max_configs 0 or more")
    return seeds


def measure(a: argparse.Namespace, seeds: list[int]) -> list[dict]:
    """Every family and shuffled copy of every data seed: its data (made where missing, under
    a folder named by the budget, since the suite names a shuffled copy by family alone),
    then its rows."""
    rows = []
    for seed in seeds:
        budget = argparse.Namespace(
            families=a.families,
            train=a.train,
            valid=a.valid,
            test=a.test,
            data_seed=seed,
            max_configs=a.max_configs,
            shuffled=True,
        )
        work = Path(a.work) / f"{a.train}_{a.valid}_{a.test}_{a.max_configs}_seed{seed}"
        with warnings.catch_warnings():  # 100 valid kernels: fewer than upstream's trainer
            warnings.simplefilter("ignore", synthetic.ValidationSplitWarning)
            make_data(budget, work)
        for family, root in family_roots(budget, work).items():
            start = time.perf_counter()
            rows += score_family(root, family, family.removesuffix(SHUFFLED), seed)
            print(f"{family} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
    return sorted(rows, key=lambda r: (r["family"], r["split"], r["seed"]))


def _cell(values: list[float]) -> str:
    mean, std = mean_std(values)
    return f"{mean:.3f} +- {std:.3f}" if len(values) > 1 else f"{mean:.3f}"


def markdown(rows: list[dict], command: str) -> str:
    """Per top-k, a table of every ranker's error, mean +- std over data seeds, per family
    and split; the family's top-1 gap closed by the best ridge on valid."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["family"], r["split"])].append(r)
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        f"`{command}`",
        "",
        f"Data seeds {','.join(map(str, seeds))} (mean +- std over them); each family at "
        "the budget in the kernels column (kernels, their mean configs). Errors against "
        "runtime / normaliser, every config of every kernel. default: config 0 first, the "
        "rest at random (top-1: the compiler's pick; on a shuffled copy config 0 is no "
        "default: '-'); noise-free floor: configs ranked by the generator's noise-free "
        "runtime; ridges: fitted per family on its train kernels (train rows: in sample), "
        "log runtime / normaliser centred per kernel, on log(x + 1) of the 24 config columns "
        "(raw), on per-dimension features of the output tile from the node and config "
        "features (tile count, padding waste, log tile / shape per dimension; the whole "
        "tile's count, waste, elements and bytes; log(x + 1) of the kernel and input bounds), "
        "or on both; each feature and its square. Own-kernel ridges: the same designs, "
        "fitted on each kernel's own configs (two seeded folds, each scored by the ridge on "
        "the other; kernels under 4 configs in file order): what a head whose weights "
        "depend on the kernel could reach with them.",
    ]
    for k in KS:
        lines += [
            "",
            f"Top-{k} error:",
            "",
            "| family | split | kernels (configs) | " + " | ".join(HEADERS) + " |",
            "|---|---|---|" + "---|" * len(HEADERS),
        ]
        for (family, split), runs in sorted(groups.items()):
            cells = [
                _cell([r[f"{name}_top{k}"] for r in runs]) if f"{name}_top{k}" in runs[0] else "-"
                for name in RANKERS
            ]
            size = f"{runs[0]['kernels']} ({statistics.fmean(r['configs'] for r in runs):.0f})"
            lines.append(f"| {family} | {split} | {size} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Share of the valid top-1 gap between config 0 and the floor that each ridge closes "
        "(1: down to the floor; below 0: worse than config 0):",
        "",
    ]
    lines += [
        "| family | " + " | ".join(HEADERS[2:]) + " |",
        "|---|" + "---|" * len(RANKERS[2:]),
    ]
    for (family, split), runs in sorted(groups.items()):
        if split != "valid" or "default_top1" not in runs[0]:
            continue
        default = statistics.fmean(r["default_top1"] for r in runs)
        floor = statistics.fmean(r["floor_top1"] for r in runs)
        shares = [
            f"{(default - statistics.fmean(r[f'{n}_top1'] for r in runs)) / (default - floor):.2f}"
            if default > floor
            else "-"
            for n in RANKERS[2:]
        ]
        lines.append(f"| {family} | " + " | ".join(shares) + " |")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    """`text` into `path` whole (`safe.atomic_path`: beside it, then renamed over it)."""
    with safe.atomic_path(path) as staging:
        staging.write_text(text)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    out = Path(a.out)
    path = out / f"{a.name}.json"
    if a.tabulate:
        if not path.is_file():
            _fail(f"no results file {path}: run without --tabulate first")
        saved = json.loads(path.read_text())
        rows, command = saved["rows"], saved["command"]
    else:
        seeds = check(a)
        rows = measure(a, seeds)
        command = (
            f"python benchmarks/config_bottleneck.py --work {Path(a.work).name} --families "
            f"{a.families} --seeds {a.seeds} --train {a.train} --valid {a.valid} --test "
            f"{a.test} --max_configs {a.max_configs}"
            + (f" --name {a.name}" if a.name != "bottleneck" else "")
        )
        _write(path, json.dumps(dict(command=command, rows=rows), indent=1) + "\n")
    _write(out / f"{a.name}.md", markdown(rows, command))
    print((out / f"{a.name}.md").read_text())


if __name__ == "__main__":
    main()
