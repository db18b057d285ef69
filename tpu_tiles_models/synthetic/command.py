"""`tpu-tiles synth`: its flags and what it prints."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from tpu_tiles_models.synthetic.families import DEFAULT_FAMILY, FAMILIES
from tpu_tiles_models.synthetic.writer import (
    UPSTREAM_BATCH,
    UPSTREAM_CONFIGS,
    ValidationSplitWarning,
    generate,
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Adds the `synth` flags to `parser`."""
    families = "; ".join(f"{f.name}: {f.summary}" for f in FAMILIES.values())
    parser.add_argument("out", help="folder to write {train,valid,test}/<tile_id>.npz into")
    parser.add_argument("--train", type=int, default=300, help="train kernels (default 300)")
    parser.add_argument(
        "--valid",
        type=int,
        default=60,
        help=f"validation kernels (default 60); upstream's trainer needs {UPSTREAM_BATCH} "
        f"with >= {UPSTREAM_CONFIGS} configs",
    )
    parser.add_argument("--test", type=int, default=60, help="test kernels (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="the data set is a function of it")
    parser.add_argument(
        "--max_configs",
        type=int,
        default=None,
        help="cap on configs per kernel (default: the family's, 6000 or 8000)",
    )
    parser.add_argument("--family", default=DEFAULT_FAMILY, help=f"generator family ({families})")
    parser.add_argument(
        "--test_ids_from",
        default=None,
        help="sample_submission.csv: the test split takes its tile:xla ids",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the npz files of a data set already in OUT",
    )
    parser.add_argument("--no_progress", action="store_true", help="no progress bar")


def format_summary(summary: dict[str, Any]) -> str:
    """What `run` prints about a `generate` result, one line."""
    replaced = f"; replaced {summary['replaced']} old npz files" if summary["replaced"] else ""
    return (
        f"wrote {summary['kernels']} kernels ({summary['configs']} configs) of family "
        f"{summary['family']}, seed {summary['seed']}, to {summary['out_dir']}: "
        f"train {summary['train']}, valid {summary['valid']} ({summary['usable_valid']} with "
        f">= {UPSTREAM_CONFIGS} configs), test {summary['test']}{replaced}"
    )


def run(args: argparse.Namespace) -> None:
    """Generates the data set `args` describe and prints what it wrote.

    Raises:
        UserError: a flag value that makes no data set, or OUT holds one without
            `--overwrite` (see `generate`).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ValidationSplitWarning)
        summary = generate(
            args.out,
            train=args.train,
            valid=args.valid,
            test=args.test,
            seed=args.seed,
            max_configs=args.max_configs,
            family=args.family,
            test_ids_from=args.test_ids_from,
            overwrite=args.overwrite,
            progress=not args.no_progress,
        )
    print(format_summary(summary))
    for w in caught:
        if issubclass(w.category, ValidationSplitWarning):
            print(f"tpu-tiles synth: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
