"""Writes predictions_kaggle.csv for the Kaggle competition 'predict-ai-model-runtime'.

Usage (same as the course script): ``python create_kaggle_csv.py [--inputcsv F]``, run
where ``sample_submission.csv`` is, or with ``--sample PATH`` / ``--out PATH``. The
sample's ``tile:xla:*`` rows are replaced by the predictions of the same ID; its layout
rows, and its order, are kept. Exit code 1 with a one-line message on any problem; the
inputs are never overwritten and nothing half-written is left behind.

This is a front end over ``tpu_tiles_models.kaggle``. It is also copied alone into an
upstream tpu_graphs checkout, where that package may not be installed (or may not import,
e.g. on an unsupported TensorFlow), so it carries a minimal standard-library fallback
producing the same bytes. Set TPU_TILES_STANDALONE=1 to force the fallback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import stat
import sys
from typing import Callable

TOP_K = 5
HELP = (
    "download sample_submission.csv from the Kaggle competition 'predict-ai-model-runtime' "
    "data page, or copy it from the course scripts repo ADAPT-uiuc/tpu_graphs_scripts, "
    "and pass --sample PATH"
)


def _read(path: str, what: str, hint: str = "") -> list[tuple[str, str]]:
    """Fallback reader: ``(ID, value)`` rows of an ``ID,TopConfigs`` CSV, header checked."""
    if os.path.isdir(path):
        raise ValueError(f"{what} file {path} is a folder; pass the CSV file itself")
    if not os.path.isfile(path):
        raise ValueError(f"{what} file {path} not found" + (f"; {hint}" if hint else ""))
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}: not a UTF-8 text file (byte {err.start}); expected an ID,TopConfigs CSV"
        ) from err
    except OSError as err:
        raise ValueError(f"cannot read {what} file {path} ({err.strerror})") from err
    if not lines or lines[0].strip() != "ID,TopConfigs":
        raise ValueError(f"{path}: header must be 'ID,TopConfigs'")
    rows = [tuple(line.split(",", 1)) for line in lines[1:] if line.strip()]
    if any(len(r) != 2 for r in rows):
        raise ValueError(f"{path}: every row must be 'ID,i1;i2;...'")
    ids = [r[0] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: {len(ids) - len(set(ids))} ids appear on several rows")
    return rows  # type: ignore[return-value]


def _top_k(value: str) -> str | None:
    """Fallback check: '3; 0;7;1;2' -> '3;0;7;1;2', or None unless TOP_K distinct ints >= 0."""
    parts = value.split(";")
    if not all(re.fullmatch(r"\s*[0-9]+\s*", p) for p in parts):
        return None
    indices = [int(p) for p in parts]
    return ";".join(map(str, indices)) if len(set(indices)) == len(indices) == TOP_K else None


def _check_out(out_path: str, inputs: dict[str, str]) -> None:
    """Fallback check: ``--out`` is no folder and not the file of a flag in ``inputs``."""
    if os.path.isdir(out_path):
        raise ValueError(f"--out {out_path} is a folder; pass the path of a file to write")
    for flag, path in inputs.items():
        try:
            same = os.path.samefile(out_path, path)
        except OSError:  # One of them does not exist (yet): not the same file.
            continue
        if same:
            raise ValueError(
                f"--out {out_path} is the {flag} file {path}; writing it would destroy that "
                "input, so pass another --out (e.g. predictions_kaggle.csv)"
            )


def _write(out_path: str, text: str) -> None:
    """Fallback writer: a temp file beside ``out_path`` renamed onto it, removed on failure."""
    folder = os.path.dirname(os.path.abspath(out_path))
    tmp = os.path.join(folder, f".{os.path.basename(out_path)}.{os.getpid()}.tmp")
    try:
        os.makedirs(folder, exist_ok=True)
        # open() applies the umask as for any new file; a rewrite keeps the old permissions.
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        if os.path.isfile(out_path):
            os.chmod(tmp, stat.S_IMODE(os.stat(out_path).st_mode))
        os.replace(tmp, out_path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if not isinstance(err, OSError):
            raise
        # Its own text would show the temp name, or a bare '[Errno 17] File exists'.
        reason = err.strerror or type(err).__name__
        if isinstance(err, (FileExistsError, NotADirectoryError)):
            reason = "a folder on its path is a file"
        raise OSError(f"cannot write --out {out_path} ({reason}); pass another --out") from err


def _fallback_merge(sample_path: str, predictions_path: str, out_path: str) -> dict:
    """Merge by ID with the package's checks, without the package (see module docstring)."""
    _check_out(out_path, {"--sample": sample_path, "--inputcsv": predictions_path})
    sample = _read(sample_path, "sample submission", HELP)
    ours = dict(_read(predictions_path, "predictions"))
    tiles = [i for i, _ in sample if i.startswith("tile:xla:")]
    problems = {
        "have no prediction": [i for i in tiles if i not in ours],
        "are not tile:xla ids of the sample": sorted(set(ours) - set(tiles)),
        f"are not {TOP_K} distinct non-negative integers": [
            i for i in tiles if i in ours and _top_k(ours[i]) is None
        ],
    }
    for problem, ids in problems.items():
        if ids:
            shown = ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
            raise ValueError(f"{predictions_path}: {len(ids)} ids ({shown}) {problem}")
    merged = [(i, _top_k(ours[i]) if i in ours else v) for i, v in sample]
    _write(out_path, "ID,TopConfigs\n" + "".join(f"{i},{v}\n" for i, v in merged))
    return {"rows": len(merged), "tile_rows": len(tiles), "kept_rows": len(merged) - len(tiles)}


def _merge_function() -> tuple[Callable[[str, str, str], dict], str]:
    """The package's merge when it imports, else the fallback; and which one it is."""
    if os.environ.get("TPU_TILES_STANDALONE") != "1":
        try:  # Imports no TensorFlow: fast, and no TensorFlow log before our line.
            from tpu_tiles_models import kaggle
        except ImportError:
            pass
        else:
            return kaggle.merge_kaggle, "tpu_tiles_models"
    return _fallback_merge, "standalone"


def main(argv: list[str] | None = None) -> int:
    """Parses arguments, merges, prints one summary (or error) line; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--inputcsv",
        default="predictions_model_output.csv",
        help="predictions CSV (ID,TopConfigs) written by tiles_gen_predictions_csv.py",
    )
    parser.add_argument("--sample", default="sample_submission.csv", help="Kaggle's sample CSV")
    parser.add_argument("--out", default="predictions_kaggle.csv", help="submission to write")
    args = parser.parse_args(argv)
    merge, mode = _merge_function()
    try:
        counts = merge(args.sample, args.inputcsv, args.out)
    except (ValueError, OSError) as err:  # KaggleError is a ValueError, WriteError an OSError.
        print(f"create_kaggle_csv.py: error: {err}", file=sys.stderr)
        return 2  # like argparse and tpu-tiles: the user can fix it
    except KeyboardInterrupt:
        print(f"create_kaggle_csv.py: interrupted; {args.out} left as it was", file=sys.stderr)
        return 130
    print(
        f"Wrote {args.out}: {counts['rows']} rows, {counts['tile_rows']} tile:xla rows "
        f"from {args.inputcsv}, {counts['kept_rows']} kept from {args.sample} ({mode})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
