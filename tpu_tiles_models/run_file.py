"""The run-file format: a run's artifacts' paths, `run_<h>.jsonz`'s bytes, keys, hash, reading.

A run file is gzip JSON named by `h`, the md5 of upstream's 15 argument fields and our
non-default options (`train_args.args_hash`). It holds `args`, `train_curve`, `final_error`
and, ranking the test split, `test_predictions`; ours adds the rest under `EXTRAS_KEY`.
`read_run`, every reader's way in, checks that shape (`run_info_problem`) first. Paths may
be remote (`gs://...`). Imports no TensorFlow (the sweep uses it).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tpu_tiles_models import files, formats, safe
from tpu_tiles_models.errors import UserError
from tpu_tiles_models.formats import NUMBER, is_json, json_kind, json_wrong
from tpu_tiles_models.train_args import UPSTREAM_FIELDS, TrainArgs, args_hash

EXTRAS_KEY = "tpu_tiles"
# Under EXTRAS_KEY: our options that entered the hash (`TrainArgs.identity`), so that a run
# file's name can be checked against its content (`run_info_hash`).
IDENTITY_KEY = "identity"
# Under EXTRAS_KEY: the ranking rule the run's validation chose, with its errors every way
# (`margin.KeepDefault.to_json`).
KEEP_DEFAULT_KEY = "keep_default"
# Under EXTRAS_KEY: every keyword the model was built with, class defaults included
# (`registry.resolved_kwargs`), so that a later change of a default does not change how the run
# reloads (older runs: `registry.earlier_kwargs`).
MODEL_KWARGS_KEY = "model_kwargs"


def run_info_hash(run_info: Mapping) -> str:
    """The `h` a run file's content names (KeyError, TypeError, ValueError if it is not one)."""
    extras = run_info.get(EXTRAS_KEY) or {}
    return args_hash(run_info["args"], extras.get(IDENTITY_KEY))


# The kinds of the keys readers use, when they are there (`run_info_problem`).
_ARGS_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "model_kwargs_json": (str,),
    "configs": (int,),
    "results_csv": (str,),
    "test_mode": (str,),
}
_EXTRAS_TYPES: dict[str, tuple[type, ...]] = {
    IDENTITY_KEY: (dict,),
    KEEP_DEFAULT_KEY: (dict,),
    "feature_stats": (dict,),
    "train_args": (dict,),
    "members": (dict,),  # an ensemble's: each member's folder -> its validation errors
    "epoch_seconds": (list,),
    "epoch_cpu_seconds": (list,),
    "val_score": (list,),
    "best_epoch": (int,),
    MODEL_KWARGS_KEY: (dict,),
    "select_by": (str,),
    "data_root": (str,),
    "toy_data": (bool,),
}


def _number_map_problem(where: str, value: Any) -> str | None:
    """A problem of a `{"1": 0.3, "5": ...}` map (top-k errors), or None."""
    if not isinstance(value, dict):
        return json_wrong(where, value, (dict,))
    bad = [k for k, v in value.items() if not is_json(v, NUMBER)]
    return f"{where}[{bad[0]!r}] is {json_kind(value[bad[0]])}, not a number" if bad else None


def run_info_problem(info: Any) -> str | None:
    """What makes `info` not a run file's content, in a few words; None when every key a
    reader uses has the shape it expects."""
    if not isinstance(info, dict):
        return f"its content is {json_kind(info)}, not an object"
    args = info.get("args")
    if not isinstance(args, dict):
        return "it has no 'args'" if args is None else json_wrong("'args'", args, (dict,))
    missing = [f for f in UPSTREAM_FIELDS if f not in args]
    if missing:
        return f"'args' lacks {', '.join(missing)}"
    for key, kinds in _ARGS_TYPES.items():
        if not is_json(args[key], kinds):
            return json_wrong(f"args.{key}", args[key], kinds)
    if not args["model"]:
        return "args.model is empty"
    try:
        kwargs = json.loads(args["model_kwargs_json"] or "{}")
    except ValueError:
        return "args.model_kwargs_json is not JSON"
    if not isinstance(kwargs, dict):
        return json_wrong("args.model_kwargs_json", kwargs, (dict,))
    for key in ("train_curve", "final_error", "test_predictions"):
        if key in info and not isinstance(info[key], dict):
            return json_wrong(f"'{key}'", info[key], (dict,))
    for split, errors in (info.get("final_error") or {}).items():
        if errors is not None and (problem := _number_map_problem(f"final_error.{split}", errors)):
            return problem
    for tile_id, top in (info.get("test_predictions") or {}).items():
        if not isinstance(top, list) or not all(is_json(i, (int,)) for i in top):
            return f"test_predictions[{tile_id!r}] is not a list of config indices"
    extras = info.get(EXTRAS_KEY)
    if extras is None:
        return None
    if not isinstance(extras, dict):
        return json_wrong(f"'{EXTRAS_KEY}'", extras, (dict,))
    for key, kinds in _EXTRAS_TYPES.items():
        if extras.get(key) is not None and not is_json(extras[key], kinds):
            return json_wrong(f"{EXTRAS_KEY}.{key}", extras[key], kinds)
    keep = extras.get(KEEP_DEFAULT_KEY)
    if keep is not None:
        if not isinstance(keep.get("chosen"), bool):
            return f"{EXTRAS_KEY}.{KEEP_DEFAULT_KEY}.chosen is not true or false"
        if "margin" in keep and not is_json(keep["margin"], NUMBER):
            return json_wrong(f"{EXTRAS_KEY}.{KEEP_DEFAULT_KEY}.margin", keep["margin"], NUMBER)
        for key in ("val", "val_kept", "val_margin", "val_rule"):
            if key in keep and (
                problem := _number_map_problem(f"{KEEP_DEFAULT_KEY}.{key}", keep[key])
            ):
                return problem
    return None


class ExportError(UserError, RuntimeError):
    """A model directory or run file that cannot be used; the message says why and the fix."""


# -- where the artifacts go ------------------------------------------------------------------
# Each path is `files.join(folder, name)`: a string, local or remote, spelled as the folder is
# (a point's results_csv is part of its hash, so its spelling must not change).


def model_dir_path(out_dir: str | os.PathLike, h: str) -> str:
    return files.join(out_dir, formats.model_dir_name(h))


def run_file_path(out_dir: str | os.PathLike, h: str) -> str:
    return files.join(out_dir, formats.run_file_name(h))


def curve_path(out_dir: str | os.PathLike, h: str) -> str:
    return files.join(out_dir, formats.curve_name(h))


def results_csv_path(out_dir: str | os.PathLike, tag: str | int) -> str:
    return files.join(out_dir, formats.results_csv_name(tag))


def tensorboard_dir(tensorboard: str | os.PathLike, h: str) -> str:
    """The run's folder of per-epoch scalars under `--tensorboard`."""
    return files.join(tensorboard, formats.tensorboard_run_name(h))


def run_file_for(model_dir: str | os.PathLike) -> Path | str:
    """`.../model_<h>` -> `.../run_<h>.jsonz`, as the course script derives it."""
    h = formats.run_hash(files.basename(model_dir))
    if h is None:
        raise ExportError(f"{model_dir}: a model directory is named model_<hash>")
    return files.with_name(model_dir, formats.run_file_name(h))


@dataclass(frozen=True)
class RunPaths:
    """Where a run's artifacts go, worked out once from its options (`of`)."""

    out_dir: str  # `--out_dir`, `~` expanded (a URL when remote)
    hash: str  # the run's `h` (`TrainArgs.hash`)
    model_dir: str
    run_file: str
    curve: str
    results_csv: str  # `--results_csv`, `~` expanded
    tensorboard: str | None  # the run's folder under `--tensorboard`, if any

    @classmethod
    def of(cls, args: TrainArgs) -> RunPaths:
        """The places of a run of `args` (resolved: `results_csv` named)."""
        out, h = files.expand(args.out_dir), args.hash()
        board = tensorboard_dir(files.expand(args.tensorboard), h) if args.tensorboard else None
        return cls(
            out_dir=out,
            hash=h,
            model_dir=model_dir_path(out, h),
            run_file=run_file_path(out, h),
            curve=curve_path(out, h),
            results_csv=files.expand(args.results_csv),
            tensorboard=board,
        )


# -- the run file ----------------------------------------------------------------------------


def run_bytes(run_info: Mapping) -> bytes:
    """A run file's bytes: its content as gzip JSON (no NaN: JSON has none)."""
    return gzip.compress(json.dumps(run_info, allow_nan=False).encode())


def read_run_bytes(path: str | os.PathLike) -> Any:
    """The run file's JSON content, of any shape (`run_info_problem` checks it), read within
    `formats.RUN_FILE_LIMIT`. Raises OSError, EOFError, zlib.error, ValueError or
    RecursionError if it is not whole."""
    with files.open_read(path) as f:
        return formats.run_file_content(f)


def read_run(model_dir: str | Path) -> dict:
    """Reads the `run_<h>.jsonz` beside `model_dir`, checking that it belongs to it.

    Raises:
      ExportError: missing, truncated or corrupt run file, or one of another model.
    """
    run_file = run_file_for(model_dir)
    if files.isdir(run_file):
        raise ExportError(
            f"{run_file} is a folder, not a run file: copy the run file of "
            f"{files.basename(model_dir)} again from the training --out_dir"
        )
    if not files.isfile(run_file):
        raise ExportError(
            f"{run_file} not found: {files.basename(model_dir)} needs its run file beside it "
            "(tiles_train.py writes both into --out_dir; copy them together)"
        )
    try:
        run_info = read_run_bytes(run_file)
    except RecursionError:
        reason = "nested deeper than a run file is"
    except (OSError, EOFError, zlib.error, ValueError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
    else:
        reason = run_info_problem(run_info)
    if reason is None:
        try:
            expected = run_info_hash(run_info)
        except (ValueError, TypeError) as e:  # a value JSON cannot hash
            reason = " ".join(str(e).split()) or type(e).__name__
    if reason is not None:
        raise ExportError(
            f"{run_file}: not a readable run file ({reason}); it is truncated or corrupt, "
            "copy it again from the training --out_dir"
        ) from None
    if files.basename(run_file) != formats.run_file_name(expected):
        raise ExportError(
            f"{run_file}: its args hash to {expected}, not to this name; it belongs to another "
            "model directory"
        )
    return run_info


def completed_run(out_dir: str | os.PathLike, h: str) -> dict | None:
    """The run file of run `h` in `out_dir` if the whole run is there (see `whole_run`)."""
    return whole_run(model_dir_path(files.expand(out_dir), h))


def whole_run(model_dir: str | os.PathLike) -> dict | None:
    """The run file of `model_dir`'s run if the whole run is there, else None: a run file
    that reads and names it, everything `load_model` reads (`saved_model.pb`, the variables'
    index and every data shard), and its results CSV when it ranked the test split."""
    try:
        info = read_run(model_dir)
    except ExportError:
        return None
    variables = files.join(model_dir, *formats.VARIABLES_PREFIX)
    shards = files.glob(variables + ".data-*-of-*")
    if not (
        files.isfile(files.join(model_dir, formats.SAVED_MODEL_FILE))
        and files.isfile(variables + ".index")
        and shards
        and len(shards) == int(files.basename(shards[0]).rsplit("-of-", 1)[1])
    ):
        return None
    csv = info["args"]["results_csv"]
    if "test_predictions" in info and csv:
        # Found from the run's own folder, not the working folder (a relative --results_csv).
        places = results_csv_place(os.path.dirname(os.fspath(model_dir)), info["args"])
        if not files.isfile(places[0] if places else files.expand(csv)):
            return None
    return info


def results_csv_place(out: str, args: Mapping) -> list[str]:
    """Where the run in local folder `out` put its results CSV: the `results_csv` its run
    file names, if relative then to the folder the run was started in, which `out` shows
    (it ends with the run's relative `out_dir`); none if remote or not to be told."""
    csv, given = (files.expand(str(args.get(key) or "")) for key in ("results_csv", "out_dir"))
    if not csv or files.is_remote(csv) or os.path.isabs(csv):
        return [csv] if os.path.isabs(csv) else []
    here, names = Path(os.path.abspath(out)).parts, Path(os.path.normpath(given)).parts
    if os.path.isabs(given) or here[len(here) - len(names) :] != names:  # (`..`: never)
        return []
    return [os.path.join(*here[: len(here) - len(names)], csv)]


def run_inputs(model_dir: str | os.PathLike, flag: str = "--dir") -> list[safe.Input]:
    """A trained run's model dir and run file, as inputs for `safe.claim`."""
    return [
        safe.Input(model_dir, f"model directory of {flag}", folder=True),
        safe.Input(run_file_for(model_dir), f"run file of {flag}"),
    ]
