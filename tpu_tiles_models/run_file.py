"""A run file's content (`run_<h>.jsonz`): its keys, the hash it names, and its shape.

Upstream's trainer writes `args` (its 15 argument fields), `train_curve`, `final_error` and,
ranking the test split, `test_predictions`; ours adds everything else under one key,
`EXTRAS_KEY`. `run_info_problem` is the one check of that shape, which `export.read_run` (every
reader's way in) applies before any value is used; `run_info_hash` is the `h` a content names.
Writing and reading the file itself is `export`'s. Imports no TensorFlow.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from tpu_tiles_models.formats import NUMBER, is_json, json_kind, json_wrong
from tpu_tiles_models.train_args import UPSTREAM_FIELDS, args_hash

EXTRAS_KEY = "tpu_tiles"
# Under EXTRAS_KEY: our options that entered the hash (`TrainArgs.identity`), so that a run
# file's name can be checked against its content (`run_info_hash`).
IDENTITY_KEY = "identity"
# Under `EXTRAS_KEY`: the ranking rule the run's validation chose (config 0's margin, whether
# to keep config 0 in the top 5) with the errors every way (`scoring.KeepDefault.to_json`);
# `predict` follows it by default.
KEEP_DEFAULT_KEY = "keep_default"
# Under `EXTRAS_KEY`: every keyword the model was built with, its class defaults included
# (`registry.resolved_kwargs`), so that a later change of a default does not change how the run
# reloads. A run file of ours without it was written before: `registry.earlier_kwargs`.
MODEL_KWARGS_KEY = "model_kwargs"


def run_info_hash(run_info: Mapping) -> str:
    """The `h` a run file's content names: its args with the options it says entered the hash.

    Raises:
      KeyError, TypeError, ValueError: not a run file's content.
    """
    extras = run_info.get(EXTRAS_KEY) or {}
    return args_hash(run_info["args"], extras.get(IDENTITY_KEY))


# What each key of a run file holds, when it is there (`run_info_problem`). `args` holds
# upstream's 15 fields; of those, the ones readers use are typed here.
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
    reader uses has the shape it expects (upstream's keys, and ours under `EXTRAS_KEY`).

    The one check of the format's shape: every reader goes through `read_run`, which calls it.
    """
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
