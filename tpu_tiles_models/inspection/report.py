"""`inspect_root`: one pass over each split of a data root into the report's figures (the
package docstring says what they mean; `inspect_root` documents the keys)."""

from __future__ import annotations

import collections
import itertools
import math
import os
import re
from typing import Any, Sequence

import numpy as np
import tqdm

from tpu_tiles_models import defaults, files, interrupts
from tpu_tiles_models.errors import FlagError, UserError
from tpu_tiles_models.formats import CONFIG_FEAT_DIM, NODE_FEAT_DIM, SPLITS
from tpu_tiles_models.inspection.stats import (
    Columns,
    LogHistogram,
    binned,
    distribution,
    log_bins,
    share,
)
from tpu_tiles_models.kernel_files import DataError, benchmark_of, iter_kernels, tile_id_of

FORMAT = "tpu_tiles_models.inspect/1"
DEFAULT_ROOT = defaults.HOME_DATA_ROOT  # named in messages; the flag's default: defaults
# Inclusive lower bounds of the configs-per-kernel bins: the published histogram of the real
# valid split (1-1000, ..., 9001-10000), then everything above.
CONFIG_BINS = (1, 1001, 2001, 3001, 4001, 5001, 6001, 7001, 8001, 9001, 10001)
# Nodes or edges per kernel: zero (edges only), then bins doubling in width.
SIZE_BINS = (0, 1, 11, 21, 41, 81, 161, 321, 641)
FEW_CONFIGS = 10  # upstream's trainer leaves out train kernels with fewer (its --configs)
OUTPUT_SUM_COLUMN = 14  # `config_feat`'s sum of the output bounds: the output tile's size
FALLS_BELOW = -0.17
DEFAULT_TOLERANCE = 0.05
TAIL_SIGMAS = 10.0
_ANONYMISED = re.compile(r"[0-9a-f]{32}")


class InspectError(UserError, ValueError):
    """Nothing to inspect there; one line with the fix."""


class _Split:
    """Everything `inspect_root` reports of one split, filled one kernel at a time."""

    def __init__(self, files_found: int) -> None:
        self.files = files_found
        self.bad: list[str] = []
        self.tile_ids: list[str] = []
        self.nodes: list[int] = []
        self.edges: list[int] = []
        self.configs: list[int] = []
        # One value per kernel with runtimes.
        self.worst_over_best: list[float] = []
        self.best_ratio: list[float] = []
        self.config0_ratio: list[float] = []
        self.config0_over_best: list[float] = []
        self.normaliser_spread: list[float] = []
        self.output_corr: list[float] = []  # kernels where both vary
        self.ratio = LogHistogram()
        self.gaps = LogHistogram()
        self.duplicate_rows = 0
        self.duplicate_kernels = 0
        self.node_columns = Columns(NODE_FEAT_DIM)
        self.config_columns = Columns(CONFIG_FEAT_DIM)

    def add(self, tile_id: str, k: dict[str, np.ndarray]) -> None:
        """Adds one validated kernel (`formats.REQUIRED_KEYS` arrays)."""
        runtime = k["config_runtime"].astype(np.float64)
        normaliser = k["config_runtime_normalizers"].astype(np.float64)
        self.tile_ids.append(tile_id)
        self.nodes.append(len(k["node_opcode"]))
        self.edges.append(len(k["edge_index"].reshape(-1, 2)))
        self.configs.append(len(runtime))
        self.node_columns.add(k["node_feat"])
        self.config_columns.add(k["config_feat"])
        labelled = runtime.min() > 0 and normaliser.min() > 0  # test files hold zeros
        first = self._duplicates(k["config_feat"])
        if labelled:
            ratio = runtime / normaliser
            best = runtime.min()
            self.ratio.add(ratio)
            self.worst_over_best.append(runtime.max() / best)
            self.best_ratio.append(ratio.min())
            self.config0_ratio.append(ratio[0])
            self.config0_over_best.append(runtime[0] / best)
            self.normaliser_spread.append(normaliser.max() / normaliser.min() - 1.0)
            tile = k["config_feat"][:, OUTPUT_SUM_COLUMN].astype(np.float64)
            if len(runtime) >= 3 and np.ptp(tile) > 0 and np.ptp(runtime) > 0:
                self.output_corr.append(float(np.corrcoef(tile, runtime)[0, 1]))
            copies = np.flatnonzero(first != np.arange(len(first)))
            base = runtime[first[copies]]
            self.gaps.add(np.abs(runtime[copies] - base) / base)

    def _duplicates(self, config_feat: np.ndarray) -> np.ndarray:
        """`[c]` the index of each row's first copy (its own for a first); counts repeats."""
        rows = np.ascontiguousarray(config_feat + np.float32(0))  # -0.0 becomes 0.0
        as_bytes = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
        # Byte-equal rows are equal values (no NaN after validation); the stable sort that
        # return_index uses makes `firsts` the earliest copy of each.
        _, firsts, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
        first = firsts[inverse.reshape(-1)]
        repeats = int((first != np.arange(len(first))).sum())
        self.duplicate_rows += repeats
        self.duplicate_kernels += repeats > 0
        return first

    def result(self, tail_sigmas: float) -> dict[str, Any]:
        kernels = len(self.tile_ids)
        configs = np.asarray(self.configs, np.int64)
        return {
            "files": self.files,
            "kernels": kernels,
            "bad_files": list(self.bad),
            "nodes": _counted(self.nodes, SIZE_BINS),
            "edges": _counted(self.edges, SIZE_BINS),
            "configs": {
                **_counted(self.configs, CONFIG_BINS),
                "fewer_than_10": share(int((configs < FEW_CONFIGS).sum()), kernels),
            },
            "labelled_kernels": len(self.config0_ratio),
            "runtimes": self._runtimes(),
            "duplicates": {
                "rows": self.duplicate_rows,
                "share": self.duplicate_rows / int(configs.sum()) if kernels else None,
                "kernels": self.duplicate_kernels,
                "gap": self.gaps.summary() if self.config0_ratio else None,
            },
            "programs": self._programs(),
            "features": {
                "node_feat": self.node_columns.summary(tail_sigmas),
                "config_feat": self.config_columns.summary(tail_sigmas),
            },
        }

    def _runtimes(self) -> dict[str, Any] | None:
        if not self.config0_ratio:
            return None
        c0 = np.asarray(self.config0_ratio)
        over = np.asarray(self.config0_over_best)
        n = len(c0)
        return {
            "ratio": self.ratio.summary(),
            "worst_over_best": {
                **distribution(self.worst_over_best),
                "histogram": log_bins(self.worst_over_best),
            },
            "best_ratio": distribution(self.best_ratio),
            "normaliser_spread": distribution(self.normaliser_spread),
            "config0": {
                "is_default": share(int((np.abs(c0 - 1.0) <= DEFAULT_TOLERANCE).sum()), n),
                "fastest": share(int((over <= 1.0).sum()), n),
                "ratio": distribution(c0),
                "over_best": distribution(over),
                "default_top1_error": float(over.mean() - 1.0),
            },
            "output_tile": {
                "corr": distribution(self.output_corr),
                "runtime_falls": share(
                    sum(c < FALLS_BELOW for c in self.output_corr), len(self.output_corr)
                ),
            },
        }

    def _programs(self) -> dict[str, Any]:
        named = [t for t in self.tile_ids if not _ANONYMISED.fullmatch(t)]  # test ids: none
        counts = collections.Counter(map(benchmark_of, named))
        return {
            "count": len(counts),
            "anonymised_kernels": len(self.tile_ids) - len(named),
            "kernels_per_program": distribution(list(counts.values())),
            "kernels": dict(sorted(counts.items())),
        }


def _counted(values: list[int], lows: Sequence[int]) -> dict[str, Any]:
    """Total, distribution and histogram of a per-kernel count."""
    return {"total": int(sum(values)), **distribution(values), "histogram": binned(values, lows)}


def _split_paths(root: str, splits: Sequence[str] | None) -> dict[str, list[str]]:
    """The npz files of each split to inspect, by name; every split folder there by default."""
    for split in splits or ():
        if split not in SPLITS:
            raise FlagError(f"--splits: unknown split {split!r}; use some of {', '.join(SPLITS)}")
    if not files.isdir(root):
        raise InspectError(
            f"{root}: data root not found; pass the folder holding {'/, '.join(SPLITS)}/ "
            f"(e.g. {DEFAULT_ROOT})"
        )
    wanted = list(splits) if splits else [s for s in SPLITS if files.isdir(files.join(root, s))]
    if not wanted:
        raise InspectError(
            f"{root}: no {'/, '.join(SPLITS)}/ folder in it; pass the folder holding them "
            f"(e.g. {DEFAULT_ROOT})"
        )
    out = {}
    for split in wanted:
        folder = files.join(root, split)
        if not files.isdir(folder):
            raise InspectError(f"{folder}: split folder not found; leave {split} out of --splits")
        out[split] = sorted(files.glob(files.join(folder, "*.npz")), key=files.basename)
    return out


def inspect_root(
    root: str | os.PathLike = DEFAULT_ROOT,
    *,
    splits: Sequence[str] | None = None,
    skip_bad: bool = False,
    tail_sigmas: float = TAIL_SIGMAS,
    progress: bool = True,
) -> dict[str, Any]:
    """The data report of `root` (`{train,valid,test}/*.npz`, local or `gs://...`): of the
    `splits` (None: every split folder there); `skip_bad` lists bad files in `bad_files` and
    reads the rest; config 0 "is the default" when |runtime / normaliser - 1| <=
    `DEFAULT_TOLERANCE`. Returns a JSON-ready dict (a "distribution" is `stats.distribution`'s):
      - `format` (`tpu_tiles_models.inspect/1`), `data_root`, `settings` (the arguments);
      - `totals`: `files`, `kernels`, `configs`, `bad_files` over the splits read;
      - `splits`: per split name, `files` (npz files found), `kernels` (read), `bad_files`
        (messages), `labelled_kernels` (with runtimes; 0 on the real test split) and:
        - `nodes`, `edges`, `configs` per kernel: `total`, a distribution and `histogram`
          (`[{"lo", "hi", "kernels"}]`, inclusive bounds, `hi` None on the last; configs on
          the real valid histogram's bins); `configs.fewer_than_10` (`{"kernels", "share"}`);
        - `runtimes` (None without runtimes): `ratio` (runtime / normaliser over all configs:
          a distribution plus `histogram` `{"log10_edges", "counts", "under", "over"}`), per
          kernel `worst_over_best` (with such a histogram), `best_ratio` (best runtime /
          normaliser) and `normaliser_spread` (max / min normaliser - 1); `config0`:
          `is_default` and `fastest` (`{"kernels", "share"}`), `ratio` (its runtime /
          normaliser), `over_best` (its runtime / the kernel's best), `default_top1_error`
          (mean `over_best` - 1); `output_tile`: `corr` (over kernels where both vary, of
          runtime with `config_feat` column 14) and `runtime_falls` (`corr` < -0.17);
        - `duplicates`: `rows` (repeating an earlier row of their kernel), `share` (of all
          config rows), `kernels` (with one), `gap` (a distribution of the relative runtime
          gaps to the first copy; None without runtimes);
        - `programs`: `count`, `anonymised_kernels`, `kernels_per_program` (distribution),
          `kernels` (`{program: kernels}`);
        - `features`: `node_feat` and `config_feat`, each `Columns.summary`'s.
      - `program_overlap`: per pair of splits read (`"train-valid"`, ...), `count` and the
        sorted `programs` in both.

    Raises:
      InspectError: no data root or split folder there.
      FlagError: a bad option.
      DataError: a bad file, without `skip_bad`.
    """
    if not (math.isfinite(tail_sigmas) and tail_sigmas > 0):  # nan would flag no column
        raise FlagError(f"--tail_sigmas must be a finite number above 0, got {tail_sigmas}")
    where = files.canonical(root)
    paths = _split_paths(where, splits)
    result: dict[str, Any] = {}
    for split, split_files in paths.items():
        stats = _Split(len(split_files))
        kernels = iter_kernels(split_files, split, skip_bad=skip_bad)
        desc = f"inspecting {split}"
        bar = tqdm.tqdm(
            kernels, total=len(split_files), desc=desc, unit="file", disable=not progress
        )
        try:
            for path, arrays in bar:
                interrupts.check()
                if isinstance(arrays, DataError):
                    stats.bad.append(str(arrays))
                else:
                    stats.add(tile_id_of(path), arrays)
        except DataError as err:
            raise DataError(f"{err} (or inspect the rest with --skip_bad)") from None
        finally:
            bar.close()
            kernels.close()
        if split_files and len(stats.bad) == len(split_files):
            raise DataError(f"{files.join(where, split)}: every file is bad, e.g. {stats.bad[0]}")
        result[split] = stats.result(tail_sigmas)
    return {
        "format": FORMAT,
        "data_root": where,
        "settings": {
            "splits": list(paths),
            "skip_bad": skip_bad,
            "tail_sigmas": tail_sigmas,
            "default_tolerance": DEFAULT_TOLERANCE,
        },
        "totals": {
            "files": sum(s["files"] for s in result.values()),
            "kernels": sum(s["kernels"] for s in result.values()),
            "configs": sum(s["configs"]["total"] for s in result.values()),
            "bad_files": sum(len(s["bad_files"]) for s in result.values()),
        },
        "splits": result,
        "program_overlap": _overlap(result),
    }


def _overlap(splits: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Programs in both splits of each pair."""
    out = {}
    for a, b in itertools.combinations(splits, 2):
        both = sorted(set(splits[a]["programs"]["kernels"]) & set(splits[b]["programs"]["kernels"]))
        out[f"{a}-{b}"] = {"count": len(both), "programs": both}
    return out
