"""The sweep's own files under `<out_dir>`, local or remote (through `files`, hence tf.io.gfile).

    sweep.csv sweep.md sweep.png                  the leaderboard (see `leaderboard`, `report`)
    sweep/plan.json                               the points of the last command
    sweep/points/<key>.json                       each point's recorded outcome
    sweep/logs/<key>.log                          each point's training output (--isolation process)
    sweep/STOP                                    present while a Ctrl-C stops the workers
    tensorboard/                                  the default --tensorboard
    ensemble_top<k>/ (sweep_ensemble.json)        the ensemble of the k best points

A point's own artifacts (`model_<h>/`, `run_<h>.jsonz`, ...) are those of `tpu-tiles train`;
what a sweep needs of them it asks here, and this module asks `export`.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

from tpu_tiles_models import files
from tpu_tiles_models.sweep.points import Point
from tpu_tiles_models.train_args import TrainArgs, args_hash

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
    files.write_bytes(path, json.dumps(value, indent=1).encode())


def read_run_info(point: Point) -> dict | None:
    """The point's run file if it exists and is whole (its args hash to its name), else None."""
    data = read_bytes(run_file_path(point))
    if data is None:
        return None
    try:
        info = json.loads(gzip.decompress(data))
        return info if args_hash(info["args"]) == point.hash else None
    except (OSError, EOFError, ValueError, KeyError, TypeError):
        return None


def run_file_path(point: Point) -> str:
    """The point's `run_<h>.jsonz`: it exists once the point is complete."""
    return files.join(files.expand(point.args.out_dir), f"run_{point.hash}.jsonz")


def model_dir_path(point: Point) -> str:
    """The point's `model_<h>/`."""
    return files.join(files.expand(point.args.out_dir), f"model_{point.hash}")


def remove_leftovers(args: TrainArgs, h: str) -> None:
    """What a killed run of this point may have left: the model dir and its temp copies,
    the curve, the results CSV and its TensorBoard folder (the run file does not exist)."""
    out = files.expand(args.out_dir)
    for name in (f"model_{h}", f".model_{h}.tmp", f".model_{h}.old", f"train_curve_{h}.png"):
        files.remove(files.join(out, name))
    files.remove(files.expand(args.results_csv))
    if args.tensorboard:
        files.remove(files.join(files.expand(args.tensorboard), f"run_{h}"))
