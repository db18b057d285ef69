"""`tpu-tiles inspect`: its flags, the checks of its outputs, and what it prints."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from tpu_tiles_models import defaults, files, locks, safe
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.inspection.render import draw, format_table
from tpu_tiles_models.inspection.report import DEFAULT_ROOT, TAIL_SIGMAS, inspect_root

EPILOG = (
    "Per split: kernels; nodes, edges and configs per kernel (percentiles; configs on the real "
    "valid histogram's bins); runtime / normaliser over all configs; worst / best runtime per "
    "kernel; config 0 as the default (runtime within 5% of its normaliser) and as the fastest, "
    "and its runtime / the best; duplicate config rows and their runtime gap; programs (tile "
    "id without its last _part) and those in two splits; constant, two-valued and heavy-tailed "
    "feature columns. Reads one kernel at a time, validated as training does."
)


def check_outputs(
    root: str | os.PathLike, outputs: dict[str, str | None], *, overwrite: bool = False
) -> None:
    """Refuses, before any reading, an output (`{flag: path or None}`) that would harm an input
    or another output, is named `*.npz`, or exists (unless `overwrite`)."""
    given = {flag: files.expand(p) for flag, p in outputs.items() if p}
    for flag, path in given.items():
        if path.endswith(".npz"):
            raise FlagError(f"{flag} {path}: an .npz name is a kernel's; name the report otherwise")
    writes = [safe.Output(path, flag) for flag, path in given.items()]
    safe.claim(writes, safe.split_inputs(root, flag="ROOT"))
    for flag, path in given.items():
        if files.exists(path) and not overwrite:
            raise FlagError(
                f"{flag} {path} already exists; pass --overwrite to replace it, or another {flag}"
            )


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "root",
        nargs="?",
        default=defaults.data_root(),
        help="data root holding {train,valid,test}/*.npz, local or gs:// (default "
        f"{DEFAULT_ROOT}, or the competition's copy under /kaggle/input when only that exists)",
    )
    parser.add_argument(
        "--splits",
        default="",
        help="comma-separated splits to read (default: every split folder the root has)",
    )
    parser.add_argument(
        "--json", default=None, help="also write the report as JSON here (default none)"
    )
    parser.add_argument("--png", default=None, help="also draw its histograms here (default none)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace existing --json / --png files (default: refuse them)",
    )
    parser.add_argument(
        "--skip_bad",
        action="store_true",
        help="list bad npz files and read the rest (default: stop at the first, naming it)",
    )
    parser.add_argument(
        "--tail_sigmas",
        type=float,
        default=TAIL_SIGMAS,
        help="a feature column is heavy-tailed when its min or max lies more than this many "
        f"standard deviations from its mean (default {TAIL_SIGMAS:g}; a normal column of 13 "
        "million rows stays within about 6)",
    )
    parser.add_argument(
        "--no_progress", action="store_true", help="no progress bar (default: shown)"
    )


def run(args: argparse.Namespace) -> None:
    """`tpu-tiles inspect`: claims and checks the outputs, reads the root, writes the report's
    files, then prints it (a reader that stops reading, `| head`, loses no file)."""
    splits = [s.strip() for s in args.splits.split(",") if s.strip()] or None
    outputs = {"--json": args.json, "--png": args.png}
    given = {flag: files.expand(p) for flag, p in outputs.items() if p}
    with contextlib.ExitStack() as claims:
        claimed = set()
        for flag, path in given.items():  # one path named twice is check_outputs' to refuse
            if files.canonical(path, what=flag) not in claimed:
                claimed.add(files.canonical(path, what=flag))
                claims.enter_context(locks.claim(path, flag=flag, command="inspect"))
        check_outputs(args.root, outputs, overwrite=args.overwrite)
        options = dict(skip_bad=args.skip_bad, tail_sigmas=args.tail_sigmas)
        result = inspect_root(args.root, splits=splits, progress=not args.no_progress, **options)
        with safe.atomic_paths([(path, flag) for flag, path in given.items()]) as tmps:
            for (flag, _), tmp in zip(given.items(), tmps):
                if flag == "--json":
                    text = json.dumps(result, indent=1, allow_nan=False) + "\n"
                    tmp.write_text(text, encoding="utf-8")
                else:
                    draw(result, tmp)
    print(format_table(result))
    for path in given.values():
        print(f"wrote {path}")
    if result["totals"]["bad_files"]:
        print(
            f"tpu-tiles inspect: warning: skipped {result['totals']['bad_files']} bad file(s); "
            "re-download or delete them",
            file=sys.stderr,
        )
