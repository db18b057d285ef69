"""`tpu-tiles synth`: its flags, `SynthArgs`, the `--scale` presets, and what it prints."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from typing import Any

from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.synthetic.autotuner import MAX_CONFIGS
from tpu_tiles_models.synthetic.families import DEFAULT_FAMILY, FAMILIES
from tpu_tiles_models.synthetic.features import MAX_NODES
from tpu_tiles_models.synthetic.writer import (
    PARALLEL_MIN_KERNELS,
    REAL_SPLIT_SIZES,
    UPSTREAM_BATCH,
    UPSTREAM_CONFIGS,
    ValidationSplitWarning,
    generate,
)

SCALES = ("custom", "full")
# Flags that `--scale full` fixes itself, so giving one with it is refused.
FIXED_BY_FULL = ("train", "valid", "test", "max_configs")
_GIVEN = "_given_flags"  # the Namespace attribute listing the flags typed on the line


class _Given(argparse.Action):
    """Stores the value like argparse does, and notes that the flag was typed."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, _GIVEN, {*getattr(namespace, _GIVEN, ()), self.dest})


@dataclasses.dataclass(frozen=True)
class SynthArgs:
    """Every option of `tpu-tiles synth` (`add_flags` documents each and holds the defaults).
    In code, call `generate` instead."""

    out: str
    scale: str
    train: int
    valid: int
    test: int
    seed: int
    max_configs: int | None
    num_workers: int | None
    family: str
    test_ids_from: str | None
    overwrite: bool
    no_progress: bool
    given: frozenset[str]  # the FIXED_BY_FULL flags typed on the line, not left at defaults

    @classmethod
    def from_namespace(cls, a: argparse.Namespace) -> SynthArgs:
        names = [f.name for f in dataclasses.fields(cls) if f.name != "given"]
        return cls(**{n: getattr(a, n) for n in names}, given=frozenset(getattr(a, _GIVEN, ())))


def resolve_scale(args: SynthArgs) -> dict[str, Any]:
    """`generate`'s `train`, `valid`, `test` and `max_configs` for `args.scale`: the flags as
    given (`custom`), or the real collection's split sizes and the family's own config cap
    (`full`, which refuses the flags it sets)."""
    if args.scale == "custom":
        return dict(
            train=args.train, valid=args.valid, test=args.test, max_configs=args.max_configs
        )
    clash = [f"--{name}" for name in FIXED_BY_FULL if name in args.given]
    if clash:
        raise FlagError(
            f"--scale full sets the split sizes and config cap itself; drop {', '.join(clash)} "
            "or use --scale custom"
        )
    return dict(**REAL_SPLIT_SIZES, max_configs=None)


def add_flags(parser: argparse.ArgumentParser) -> None:
    families = "; ".join(f"{f.name}: {f.summary}" for f in FAMILIES.values())
    sizes = "/".join(str(n) for n in REAL_SPLIT_SIZES.values())
    parser.add_argument("out", help="folder to write {train,valid,test}/<tile_id>.npz into")
    parser.add_argument(
        "--scale",
        choices=SCALES,
        default="custom",
        help="custom (default): the --train/--valid/--test/--max_configs below; full: the "
        f"real collection's {sizes} train/valid/test kernels (the test count is "
        "--test_ids_from's when given), config counts from 2 up to the real collection's "
        f"{MAX_CONFIGS:,} (as the kernel's tile search space sets them) and graphs of up to "
        f"{MAX_NODES} nodes; --scale full refuses "
        "--train, --valid, --test and --max_configs rather than mixing them in",
    )
    parser.add_argument(
        "--train", type=int, default=300, action=_Given, help="train kernels (default 300)"
    )
    parser.add_argument(
        "--valid",
        type=int,
        default=60,
        action=_Given,
        help=f"validation kernels (default 60); upstream's trainer needs {UPSTREAM_BATCH} "
        f"with >= {UPSTREAM_CONFIGS} configs",
    )
    parser.add_argument(
        "--test", type=int, default=60, action=_Given, help="test kernels (default 60)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the data set is a function of it")
    parser.add_argument(
        "--max_configs",
        type=int,
        default=None,
        action=_Given,
        help=f"cap on configs per kernel (default {MAX_CONFIGS:,}, the real collection's most)",
    )
    parser.add_argument(
        "--num_workers",
        type=int,
        default=None,
        help="processes making kernels: 1 makes them here; more runs an Apache Beam pipeline "
        "(multi-processing DirectRunner); default: the cores for "
        f"{PARALLEL_MIN_KERNELS} kernels or more, else 1. The files are the same either way",
    )
    parser.add_argument("--family", default=DEFAULT_FAMILY, help=f"generator family ({families})")
    parser.add_argument(
        "--test_ids_from",
        default=None,
        help="sample_submission.csv: the test split takes its tile:xla ids (default: none, "
        "--test made-up ids)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the npz files of a data set already in OUT",
    )
    parser.add_argument("--no_progress", action="store_true", help="no progress bar")


def run(args: SynthArgs) -> None:
    """Generates the data set `args` describe and prints what it wrote, in one line."""
    sizes = resolve_scale(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ValidationSplitWarning)
        summary = generate(
            args.out,
            **sizes,
            seed=args.seed,
            family=args.family,
            test_ids_from=args.test_ids_from,
            overwrite=args.overwrite,
            progress=not args.no_progress,
            num_workers=args.num_workers,
        )
    replaced = f"; replaced {summary['replaced']} old npz files" if summary["replaced"] else ""
    print(
        f"wrote {summary['kernels']} kernels ({summary['configs']} configs) of family "
        f"{summary['family']}, seed {summary['seed']}, to {summary['out_dir']}: "
        f"train {summary['train']}, valid {summary['valid']} ({summary['usable_valid']} with "
        f">= {UPSTREAM_CONFIGS} configs), test {summary['test']}{replaced}"
    )
    for w in caught:
        if issubclass(w.category, ValidationSplitWarning):
            print(f"tpu-tiles synth: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
