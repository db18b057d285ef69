"""The sweep's own files under `<out_dir>`, local or remote (through `files`, hence tf.io.gfile).

    sweep.csv sweep.md sweep.png                  the leaderboard (see `leaderboard`, `report`)
    sweep/plan.json                               the points of the last command
    sweep/points/<key>.json                       each point's recorded outcome
    sweep/logs/<key>.log                          each point's training output (--isolation process)
    sweep/STOP                                    present while a Ctrl-C stops the workers
    tensorboard/                                  the default --tensorboard
    ensemble_top<k>/ (sweep_ensemble.json)        the ensemble of the k best points

A point's own artifacts (`model_<h>/`, `run_<h>.jsonz`, ...) are those of `tpu-tiles train`;
what a sweep needs of them it asks `export`.
"""

from __future__ import annotations

import json
from typing import Any

from tpu_tiles_models import export, files, formats
from tpu_tiles_models.sweep.points import Point

SWEEP_DIR = "sweep"
TENSORBOARD_DIR = "tensorboard"
STOP_MARKER = "STOP"
ENSEMBLE_RECORD = "sweep_ensemble.json"
LEADERBOARD = ("csv", "md", "png")  # sweep.<ext>


def sweep_dir(out_dir: str) -> str:
    return files.join(out_dir, SWEEP_DIR)


def record_path(sweep_dir: str, key: str) -> str:
    return files.join(sweep_dir, "points", f"{key}.json")


def log_path(sweep_dir: str, key: str) -> str:
    return files.join(sweep_dir, "logs", f"{key}.log")


def stop_marker(sweep_dir: str) -> str:
    return files.join(sweep_dir, STOP_MARKER)


def plan_path(sweep_dir: str) -> str:
    return files.join(sweep_dir, "plan.json")


def ensemble_dir(out_dir: str, k: int) -> str:
    return files.join(out_dir, f"ensemble_top{k}")


def ensemble_record(ensemble_dir: str) -> str:
    """What `--ensemble_top` built there: its members and errors (reused if they are the same)."""
    return files.join(ensemble_dir, ENSEMBLE_RECORD)


def leaderboard_paths(out_dir: str) -> dict[str, str]:
    """`{"csv": <out_dir>/sweep.csv, "md": ..., "png": ...}`."""
    return {ext: files.join(out_dir, f"sweep.{ext}") for ext in LEADERBOARD}


def read_bytes(path: str) -> bytes | None:
    """The file's content, or None if it does not exist."""
    try:
        return files.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


# What the sweep reads of its records: the ensemble's (`ensemble_record`) and a point's outcome
# (`record_path`, and a child process's). Other keys are kept for people to read.
_ENSEMBLE_FIELDS: formats.Fields = dict(
    members=(list,), dir=(str,), error=(str,), run_file=(str,), results_csv=(str,)
) | {k: formats.NUMBER for k in ("score", "top1", "top5", "top10")}
_POINT_FIELDS: formats.Fields = dict(
    status=(str,), error=(str,), wall_s=(*formats.NUMBER, type(None))
)


def read_json(path: str) -> dict | None:
    """The record's JSON, or None if it does not exist or is not whole.

    Raises:
      formats.ShapeError: valid JSON, not a record (one line naming the file and the fix).
    """
    data = read_bytes(path)
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    fields = _ENSEMBLE_FIELDS if files.basename(path) == ENSEMBLE_RECORD else _POINT_FIELDS
    fix = "it is the sweep's bookkeeping: delete it and rerun the sweep"
    return formats.checked(path, value, fields, fix)


def write_json(path: str, value: Any) -> None:
    text = json.dumps(value, indent=1, allow_nan=False)
    files.write_bytes(path, text.encode(), flag="--out_dir")


def read_run_info(point: Point) -> dict | None:
    """The point's run file if the point is complete (see `export.completed_run`), else None."""
    return export.completed_run(point.args.out_dir, point.hash)


def run_file_path(point: Point) -> str:
    """The point's `run_<h>.jsonz`: it exists once the point is complete."""
    return export.run_file_path(files.expand(point.args.out_dir), point.hash)


def model_dir_path(point: Point) -> str:
    """The point's `model_<h>/`."""
    return export.model_dir_path(files.expand(point.args.out_dir), point.hash)
