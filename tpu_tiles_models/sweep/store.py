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

from tpu_tiles_models import export, files
from tpu_tiles_models.sweep.points import Point

SWEEP_DIR = "sweep"
TENSORBOARD_DIR = "tensorboard"
STOP_MARKER = "STOP"
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
    return files.join(ensemble_dir, "sweep_ensemble.json")


def leaderboard_paths(out_dir: str) -> dict[str, str]:
    """`{"csv": <out_dir>/sweep.csv, "md": ..., "png": ...}`."""
    return {ext: files.join(out_dir, f"sweep.{ext}") for ext in LEADERBOARD}


def read_bytes(path: str) -> bytes | None:
    """The file's content, or None if it does not exist."""
    try:
        return files.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def read_json(path: str) -> dict | None:
    """The file's JSON, or None if it does not exist or is not whole."""
    data = read_bytes(path)
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def write_json(path: str, value: Any) -> None:
    files.write_bytes(path, json.dumps(value, indent=1).encode(), flag="--out_dir")


def read_run_info(point: Point) -> dict | None:
    """The point's run file if the point is complete (see `export.completed_run`), else None."""
    return export.completed_run(point.args.out_dir, point.hash)


def run_file_path(point: Point) -> str:
    """The point's `run_<h>.jsonz`: it exists once the point is complete."""
    return export.run_file_path(files.expand(point.args.out_dir), point.hash)


def model_dir_path(point: Point) -> str:
    """The point's `model_<h>/`."""
    return export.model_dir_path(files.expand(point.args.out_dir), point.hash)
