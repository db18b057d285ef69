"""CSV tools for the Kaggle competition "Fast or Slow? Predict AI Model Runtime".

Two formats are involved:

* the predictions CSV (``predictions_model_output.csv``, upstream's ``results_*.csv``):
  header ``ID,TopConfigs`` then one ``tile:xla:<id>,i1;i2;...`` row per kernel, rows joined
  by ``\\n`` with no trailing newline, exactly as upstream ``write_least_runtimes_csv``
  writes it;
* the Kaggle submission (``predictions_kaggle.csv``): every row of the competition's
  ``sample_submission.csv``, in its order, with the ``tile:xla:*`` rows replaced by ours
  and the ``layout:*`` rows left byte-identical; it ends with a newline, as pandas'
  ``to_csv`` (used by the course script) writes it.

This module imports no TensorFlow (a test checks it), so ``tpu-tiles kaggle`` and
``create_kaggle_csv.py`` start in well under a second. Errors name the flags of both
front ends, which are the same: ``--inputcsv``, ``--sample`` and ``--out``.
"""

from __future__ import annotations

import operator
import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Sequence, Union

from tpu_tiles_models import files, safe
from tpu_tiles_models.errors import UserError
from tpu_tiles_models.formats import TILE_PREFIX

TOP_K = 5
UPSTREAM_TOP = 10  # upstream writes this many indices per kernel into results_*.csv
HEADER = "ID,TopConfigs"
SAMPLE_HELP = (
    "download sample_submission.csv from the Kaggle competition 'predict-ai-model-runtime' "
    "data page, or copy it from the course scripts repo ADAPT-uiuc/tpu_graphs_scripts, "
    "and pass --sample PATH"
)
_INTEGER = re.compile(r"\s*-?[0-9]+\s*")
# How many offending ids an error message lists before summarising the rest.
_SHOWN_IDS = 3

PathLike = Union[str, "os.PathLike[str]"]


class KaggleError(UserError, ValueError):
    """A CSV is missing or malformed, or --out is unusable; one line naming the file and fix."""


def _describe(ids: Sequence[str]) -> str:
    """'2 ids (a, b)' or '7 ids (a, b, c, ...)': the first few offenders and their count."""
    shown = ", ".join(ids[:_SHOWN_IDS])
    more = ", ..." if len(ids) > _SHOWN_IDS else ""
    noun = "id" if len(ids) == 1 else "ids"
    return f"{len(ids)} {noun} ({shown}{more})"


def tile_id_problem(tile_id: str) -> str:
    """Why ``tile_id`` (an npz file stem) cannot be a predictions CSV row's id; '' if it can."""
    if not tile_id:
        return "is empty"
    if tile_id.startswith(TILE_PREFIX):
        return f"starts with {TILE_PREFIX!r}"
    bad = sorted({c for c in tile_id if c in ",;\n\r"})
    return f"holds {', '.join(map(repr, bad))}, which split a CSV row" if bad else ""


def format_predictions_csv(rows: Iterable[tuple[str, Sequence[int]]]) -> str:
    """Returns the text upstream ``write_least_runtimes_csv`` writes for ``rows``.

    Args:
      rows: ``(tile_id, ranked_config_indices)`` pairs; ``tile_id`` is the npz file stem,
        without the ``tile:xla:`` prefix, which is added here.

    Returns:
      ``ID,TopConfigs\\n`` followed by the rows joined with ``\\n``, no trailing newline.
    """
    lines = []
    for tile_id, indices in rows:
        problem = tile_id_problem(tile_id)
        if problem:
            raise KaggleError(
                f"bad tile id {tile_id!r}: it {problem}; pass the npz file stem, without "
                f"{TILE_PREFIX!r}, commas, semicolons or newlines"
            )
        # operator.index accepts numpy integers but refuses floats, which would print as '1.0'.
        values = ";".join(str(operator.index(i)) for i in indices)
        lines.append(f"{TILE_PREFIX}{tile_id},{values}")
    return HEADER + "\n" + "\n".join(lines)


def _write_atomic(path: PathLike, text: str, flag: str) -> None:
    """Writes ``text`` to ``path`` through :func:`safe.atomic_path` (``flag`` chose it).

    A reader never sees a half-written CSV, and an interrupted run leaves the old file.
    """
    with safe.atomic_path(path, flag=flag) as tmp:
        # newline="" so that '\n' is written as-is on every platform (byte-exact output).
        with open(tmp, "w", encoding="utf-8", newline="") as out:
            out.write(text)


def write_predictions_csv(
    path: PathLike, rows: Iterable[tuple[str, Sequence[int]]], *, flag: str = "--out"
) -> None:
    """Writes :func:`format_predictions_csv` of ``rows`` to ``path`` atomically.

    Args:
      path: the CSV to write.
      rows: ``(tile_id, ranked_config_indices)`` pairs, as for :func:`format_predictions_csv`.
      flag: the command-line flag that chose ``path``, named when it cannot be written.

    Raises:
      files.WriteError: ``path`` is a folder or cannot be written (a ``UserError``).
    """
    _write_atomic(path, format_predictions_csv(rows), flag)


def _read_rows(path: PathLike, what: str, help_text: str = "") -> list[tuple[str, str]]:
    """Reads ``ID,value`` rows (text kept as-is) after checking the header.

    Args:
      path: the CSV file.
      what: a name for the file in messages ('predictions', 'sample submission').
      help_text: appended to the message when the file does not exist.

    Raises:
      KaggleError: the file is missing, a folder, unreadable, not UTF-8 or malformed.
    """
    path = Path(path)
    kind = files.not_a_file(path)
    if kind == "not found":
        hint = f"; {help_text}" if help_text else ""
        raise KaggleError(f"{what} file {path} not found{hint}")
    if kind:
        raise KaggleError(f"{what} file {path} is {kind}; pass the CSV file itself")
    try:
        # utf-8-sig drops the byte-order mark some editors (and Excel) prepend.
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as err:
        raise KaggleError(
            f"{path}: not a UTF-8 text file (byte {err.start}); expected an {HEADER} CSV"
        ) from err
    except OSError as err:
        raise KaggleError(f"cannot read {what} file {path} ({err.strerror})") from err
    if not lines or lines[0].strip() != HEADER:
        got = repr(lines[0][:60]) if lines else "an empty file"
        raise KaggleError(f"{path}: header is {got}, expected {HEADER!r}")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue  # Tolerate blank lines, e.g. a trailing one added by an editor.
        row_id, sep, value = line.partition(",")
        if not sep or not row_id or "," in value:
            raise KaggleError(
                f"{path}:{number}: expected 'ID,i1;i2;...' with one comma, got {line[:60]!r}"
            )
        rows.append((row_id, value))
    return rows


def _check_unique(path: PathLike, rows: Sequence[tuple[str, str]]) -> None:
    """Raises if an ID appears on more than one row."""
    seen: set[str] = set()
    duplicates: list[str] = []
    for row_id, _ in rows:
        if row_id in seen and row_id not in duplicates:
            duplicates.append(row_id)
        seen.add(row_id)
    if duplicates:
        raise KaggleError(
            f"{path}: {_describe(duplicates)} appear on more than one row; keep one row per id"
        )


def _parse_indices(value: str) -> list[int] | None:
    """'3;0;7' -> [3, 0, 7]; None when any entry is not a plain decimal integer."""
    parts = value.split(";")
    if not all(_INTEGER.fullmatch(p) for p in parts):
        return None
    return [int(p) for p in parts]


def read_predictions_csv(path: PathLike) -> dict[str, list[int]]:
    """Reads a predictions CSV into ``{'tile:xla:<id>': [i1, i2, ...]}`` (file order).

    Accepts upstream's format with or without a trailing newline. Raises
    :class:`KaggleError` naming the file and the offending ids on a bad header, a
    malformed row, an id on several rows or a value that is not ``;``-separated integers.
    """
    rows = _read_rows(path, "predictions")
    _check_unique(path, rows)
    parsed: dict[str, list[int]] = {}
    bad: list[str] = []
    for row_id, value in rows:
        indices = _parse_indices(value)
        if indices is None:
            bad.append(row_id)
        else:
            parsed[row_id] = indices
    if bad:
        raise KaggleError(
            f"{path}: {_describe(bad)} have TopConfigs that are not ';'-separated integers"
        )
    return parsed


def pad_top_k(indices: Sequence[int], num_configs: int, k: int = TOP_K) -> list[int]:
    """Returns exactly ``k`` distinct non-negative config indices, best first.

    The rule: keep the first ``k`` distinct entries of ``indices`` in their order, then
    append the smallest non-negative integers not yet listed. While the kernel has
    configs left, those are real (unranked) configs; only a kernel with fewer than ``k``
    configs gets indices ``>= num_configs``, i.e. ``num_configs, num_configs + 1, ...``.

    Why: Kaggle scores a kernel by the best runtime among the listed configs, so once all
    of a kernel's configs are listed the extra entries cannot change its score if the
    scorer skips indices that do not exist -- and the competition's own
    ``sample_submission.csv`` lists ``0;1;2;3;4`` for every kernel whatever its number of
    configs (kernels have from 2 configs up), so the scorer accepts such indices -- an
    inference: we found no published scorer code to confirm it. Upstream instead pads
    with zeros, repeating index 0; distinct indices keep every row valid for checkers that
    reject repeats. Repeats in ``indices`` (e.g. upstream's zero padding) are dropped.

    Raises:
      KaggleError: an index is negative or ``>= num_configs``, or ``k``/``num_configs``
        is negative.
    """
    if k < 0 or num_configs < 0:
        raise KaggleError(f"pad_top_k needs k >= 0 and num_configs >= 0, got {k}, {num_configs}")
    chosen: list[int] = []
    for raw in indices:
        index = operator.index(raw)
        if not 0 <= index < num_configs:
            raise KaggleError(f"config index {index} out of range for {num_configs} configs")
        if index not in chosen:
            chosen.append(index)
    chosen = chosen[:k]
    used = set(chosen)
    candidate = 0
    while len(chosen) < k:
        if candidate not in used:
            chosen.append(candidate)
        candidate += 1
    return chosen


def validate_predictions(
    predictions: Mapping[str, Sequence[int]],
    expected_ids: Iterable[str],
    *,
    source: str = "predictions",
    k: int = TOP_K,
) -> None:
    """Checks ``predictions`` covers ``expected_ids`` exactly, each with ``k`` valid indices.

    Raises :class:`KaggleError` on the first failed check (missing ids, unknown ids,
    wrong count, negative indices, repeated indices within a row), naming the first
    few offending ids and their count, and ``source`` (usually a file name).
    """
    expected = list(expected_ids)
    expected_set = set(expected)
    missing = [i for i in expected if i not in predictions]
    if missing:
        raise KaggleError(
            f"{source}: {_describe(missing)} of the sample submission have no prediction; "
            "predict every test kernel"
        )
    unknown = [i for i in predictions if i not in expected_set]
    if unknown:
        raise KaggleError(
            f"{source}: {_describe(unknown)} are not tile:xla ids of the sample submission; "
            "predict the test split only"
        )
    # The fix for each: predictions written again by our prediction step, which lists k
    # distinct configs per kernel (padding a kernel with fewer configs, unlike upstream).
    again = (
        f"write them again with tpu-tiles predict --top_k {k} (or our "
        "tiles_gen_predictions_csv.py), which lists that many distinct configs per kernel"
    )
    checks = (
        (lambda v: len(v) != k, f"do not list exactly {k} configs; {again}"),
        (lambda v: any(i < 0 for i in v), "list negative config indices"),
        (
            lambda v: len(set(v)) != len(v),
            f"repeat a config index (upstream's zero padding?); {again}",
        ),
    )
    for failed, problem in checks:
        offenders = [i for i in expected if failed(predictions[i])]
        if offenders:
            raise KaggleError(f"{source}: {_describe(offenders)} {problem}")


def _read_sample(path: PathLike) -> list[tuple[str, str]]:
    """The sample submission's rows, with the download hint when it is missing."""
    rows = _read_rows(path, "sample submission", SAMPLE_HELP)
    _check_unique(path, rows)
    return rows


def _tile_ids(rows: Sequence[tuple[str, str]]) -> list[str]:
    return [row_id for row_id, _ in rows if row_id.startswith(TILE_PREFIX)]


def _kaggle_text(rows: Iterable[tuple[str, str]]) -> str:
    """The submission text: header, rows, trailing newline (like pandas' to_csv)."""
    return "".join(f"{line}\n" for line in [HEADER, *(f"{i},{v}" for i, v in rows)])


def _check_out(out_path: PathLike, inputs: Mapping[str, PathLike]) -> None:
    """Refuses an ``--out`` that is a folder, one of ``inputs`` or on a disk without room for
    it (``safe.claim``).

    Args:
      out_path: the submission to write.
      inputs: ``{flag: path}`` of the files read; "same" follows symlinks and hard links.
    """
    if Path(out_path).is_dir():
        example = Path(out_path) / "predictions_kaggle.csv"
        raise KaggleError(f"--out {out_path} is a folder; pass a file path, e.g. --out {example}")
    safe.claim(
        [safe.Output(out_path, "--out", example="predictions_kaggle.csv")],
        [safe.Input(path, f"{flag} file") for flag, path in inputs.items()],
    )


def merge_kaggle(sample_path: PathLike, predictions_path: PathLike, out_path: PathLike) -> dict:
    """Writes the Kaggle submission: the sample with its tile:xla rows replaced by ours.

    Rows are matched by ID (the course script matched by position, which silently
    mislabels a shuffled or filtered predictions file); the output keeps the sample's
    order and its other (layout) rows byte-identical. Nothing is written unless the
    predictions pass :func:`validate_predictions`, and never over an input.

    Args:
      sample_path: Kaggle's ``sample_submission.csv`` (flag ``--sample``).
      predictions_path: our ``ID,TopConfigs`` predictions (flag ``--inputcsv``).
      out_path: the submission to write (flag ``--out``).

    Returns:
      ``{"rows": all rows written, "tile_rows": rows replaced, "kept_rows": rows copied}``.

    Raises:
      KaggleError: an input is missing or malformed, or ``out_path`` is a folder or one of
        the inputs (a ``UserError``; the message names the flag).
      files.WriteError: ``out_path`` cannot be written (also a ``UserError``).
    """
    _check_out(out_path, {"--sample": sample_path, "--inputcsv": predictions_path})
    sample = _read_sample(sample_path)
    predictions = read_predictions_csv(predictions_path)
    validate_predictions(predictions, _tile_ids(sample), source=str(predictions_path))
    merged = [
        (i, ";".join(map(str, predictions[i])) if i in predictions else value)
        for i, value in sample
    ]
    _write_atomic(out_path, _kaggle_text(merged), "--out")
    tile_rows = len(predictions)
    return {"rows": len(merged), "tile_rows": tile_rows, "kept_rows": len(merged) - tile_rows}


def validate_submission(sample_path: PathLike, submission_path: PathLike) -> dict:
    """Checks a finished Kaggle CSV against the sample submission.

    Its ids must be the sample's (each once, none extra), its tile:xla rows must list
    ``TOP_K`` distinct non-negative integers and its other rows must equal the sample's.

    Returns:
      ``{"rows": ..., "tile_rows": ..., "kept_rows": ...}`` as :func:`merge_kaggle` does.
    """
    sample = _read_sample(sample_path)
    rows = _read_rows(submission_path, "submission")
    _check_unique(submission_path, rows)
    submitted = dict(rows)
    sample_ids = [i for i, _ in sample]
    missing = [i for i in sample_ids if i not in submitted]
    unknown = [i for i in submitted if i not in set(sample_ids)]
    for ids, problem in ((missing, "are missing"), (unknown, "are not in the sample")):
        if ids:
            raise KaggleError(f"{submission_path}: {_describe(ids)} {problem}")
    changed = [i for i, v in sample if not i.startswith(TILE_PREFIX) and submitted[i] != v]
    if changed:
        raise KaggleError(
            f"{submission_path}: {_describe(changed)} differ from the sample; keep non-tile rows"
        )
    tiles = _tile_ids(sample)
    bad = [i for i in tiles if _parse_indices(submitted[i]) is None]
    if bad:
        raise KaggleError(f"{submission_path}: {_describe(bad)} are not ';'-separated integers")
    parsed = {i: _parse_indices(submitted[i]) or [] for i in tiles}
    validate_predictions(parsed, tiles, source=str(submission_path))
    return {"rows": len(rows), "tile_rows": len(tiles), "kept_rows": len(rows) - len(tiles)}
