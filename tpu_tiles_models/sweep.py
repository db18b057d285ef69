"""`tpu-tiles sweep`: many training runs as one Apache Beam pipeline; resumable; a leaderboard.

A sweep is a set of *points*; each point is one `train.train(args)` whose `TrainArgs` are the
base flags (every `tpu-tiles train` flag on the command line) with the point's values on top,
and a `results_csv` named after the point (`<out_dir>/results_<key>.csv`). Upstream's hash
covers `results_csv`, so every point has a stable hash: its artifacts are exactly those of
`tpu-tiles train <the point's flags>`, and a point whose run file exists is complete.

Grids (`--grid`): a YAML or JSON file (any `--grid` without "="), or an inline spec of
space-separated axes:

    model=ResidualSAGE,EarlyJoinSAGE lr=1e-3,2e-3 seed=0,1,2
    losses='ListMLELoss:1,MSE:0.02','FastFirstListMLE:1,MSE:0.02' kwargs.hidden_dim=32,64

An axis is `name=v1,v2,...` where `name` is a training flag (ours or upstream's name) or
`kwargs.<key>`, one key inside `--model_kwargs_json`. Values are split at commas outside
quotes and brackets, so JSON needs no quoting; a value with a comma or a space is quoted
('...'). Without `--random` the points are the product of the axes (first axis slowest). A
numeric axis may instead be a range, sampled by `--random N`:

    uniform(a,b)  loguniform(a,b)  int(a,b)  logint(a,b)    (bounds inclusive)

`--random N` draws N points per grid (floats rounded to 4 significant digits), seeded by
`--random_seed`, so rerunning the same command gives the same points; a `seed` list is crossed
with the draws (N x seeds points) so that every draw has its mean and std over seeds; equal
draws collapse into one point. A file holds one mapping `{axis: value | [values] | "range"}`
or a list of them (a union of grids).

Execution: a Beam pipeline, `Create(points) | Reshuffle | Map(train point)`, on any runner.
The default is the DirectRunner in multi-processing mode with `--num_workers` processes;
each point trains in a fresh child process of its worker (`--isolation process`), so a crash
or an out-of-memory kill is recorded as that point's failure. Data, output and TensorBoard
paths may be remote (`gs://...`): the points and the sweep's own files go through
`tpu_tiles_models.files`, hence tf.io.gfile. Layout under `--out_dir`:

    model_<h>/ run_<h>.jsonz results_<key>.csv train_curve_<h>.png   (each point, as train)
    sweep.csv sweep.md sweep.png                                      (leaderboard)
    sweep/plan.json sweep/points/<key>.json sweep/logs/<key>.log      (plan, outcomes, logs)
    tensorboard/run_<h>/ (per-epoch scalars and the point's hparams; default --tensorboard)
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import gzip
import hashlib
import io
import itertools
import json
import math
import os
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from tpu_tiles_models import files, interrupts, pipelines
from tpu_tiles_models.errors import FlagError, UserError
from tpu_tiles_models.train_args import UPSTREAM_FIELDS, TrainArgs, args_hash

KWARGS_PREFIX = "kwargs."
RANGE_KINDS = ("uniform", "loguniform", "int", "logint")
SEED_AXIS = "seed"
SWEEP_DIR = "sweep"
TENSORBOARD_DIR = "tensorboard"
# Set by the sweep for every point, so a grid may not vary them.
_SET_BY_SWEEP = ("out_dir", "results_csv", "tensorboard", "no_progress")
# Options that change where things are read or shown, not the model: left out of a point's key.
_NOT_IN_KEY = ("results_csv", "cache_dir", "no_progress", "tensorboard")
_EXIT_INTERRUPTED = 130
_SIGNIFICANT = 4  # digits kept of a float drawn by --random
_HPARAMS_SUFFIX = ".sweep_hparams"
_FIELDS = {f.name: f for f in dataclasses.fields(TrainArgs)}
_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


class SweepFailed(UserError):
    """Some points failed (each recorded in the leaderboard); the message names them."""

    def __init__(self, message: str, summary: SweepSummary):
        super().__init__(message)
        self.summary = summary


# =============================================================================================
# Grids
# =============================================================================================


@dataclasses.dataclass(frozen=True)
class Range:
    """A numeric range that `--random` samples: `kind(low,high)`, bounds inclusive."""

    kind: str
    low: float
    high: float

    def sample(self, rng: random.Random) -> float | int:
        """One draw: floats rounded to 4 significant digits, ints for int/logint."""
        if self.kind == "uniform":
            return float(f"{rng.uniform(self.low, self.high):.{_SIGNIFICANT}g}")
        if self.kind == "int":
            return rng.randint(int(self.low), int(self.high))
        value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        if self.kind == "logint":
            return min(max(round(value), int(self.low)), int(self.high))
        return float(f"{value:.{_SIGNIFICANT}g}")

    def __str__(self) -> str:
        fmt = (lambda v: str(int(v))) if self.kind in ("int", "logint") else repr
        return f"{self.kind}({fmt(self.low)},{fmt(self.high)})"


@dataclasses.dataclass(frozen=True)
class Axis:
    """One swept option: a list of values, or a range for `--random`."""

    name: str
    values: tuple[Any, ...] = ()
    range: Range | None = None


@dataclasses.dataclass(frozen=True)
class Grid:
    """The product of its axes (or, with `--random`, draws from them)."""

    axes: tuple[Axis, ...]


def parse_grid(text: str) -> list[Grid]:
    """`--grid`: a YAML or JSON file (local or remote; JSON if it ends in .json), or an
    inline spec.

    Raises:
      FlagError: a missing or unreadable file, or a bad axis, naming `--grid` and the fix.
    """
    if "=" not in text or files.exists(text.strip()):  # every inline axis has a "="
        return load_grid_file(text.strip())
    return [parse_inline(text)]


def parse_inline(spec: str) -> Grid:
    """`"model=A,B lr=1e-3,2e-3 seed=0,1"` -> a `Grid` (see the module docstring)."""
    axes = []
    for token in _split_top(spec, " \t\r\n", "--grid"):
        name, sep, rest = token.partition("=")
        if not sep or not rest:
            raise FlagError(f"--grid: {token!r} is not name=values; e.g. --grid 'lr=1e-3,2e-3'")
        axes.append(_parse_axis(name, rest))
    return _checked_grid(axes, "--grid")


def load_grid_file(path: str) -> list[Grid]:
    """A YAML or JSON file: one mapping `{axis: value | [values] | "range"}` or a list of them.

    Raises:
      FlagError: a missing, unreadable or malformed file, naming it.
    """
    data = _read_bytes(path)
    if data is None:
        raise FlagError(f"--grid {path}: no such file; pass a .yaml/.json grid or an inline spec")
    try:
        if path.lower().endswith(".json"):
            content = json.loads(data)
        else:
            import yaml

            content = yaml.safe_load(data)
    except Exception as e:  # yaml and json raise several types; all mean "malformed"
        raise FlagError(f"--grid {path}: not valid YAML/JSON ({_one_line(e)})") from None
    mappings = content if isinstance(content, list) else [content]
    if not mappings or not all(isinstance(m, dict) and m for m in mappings):
        raise FlagError(
            f"--grid {path}: expected a mapping of flag: [values] (or a list of mappings)"
        )
    grids = []
    for mapping in mappings:
        axes = [_file_axis(str(name), value, path) for name, value in mapping.items()]
        grids.append(_checked_grid(axes, f"--grid {path}"))
    return grids


def format_grid(grid: Grid) -> str:
    """The inline spec of `grid`; `parse_inline(format_grid(g)) == g`."""
    parts = []
    for axis in grid.axes:
        text = (
            str(axis.range)
            if axis.range
            else ",".join(_format_value(axis.name, v) for v in axis.values)
        )
        parts.append(f"{axis.name}={text}")
    return " ".join(parts)


def _file_axis(name: str, value: Any, path: str) -> Axis:
    """An axis from a file entry: a scalar, a list, or a range string."""
    name = _axis_name(name, f"--grid {path}")
    if isinstance(value, str) and _is_numeric(name) and _range_match(value):
        return _parse_axis(name, value)
    values = value if isinstance(value, list) else [value]
    if not values:
        raise FlagError(f"--grid {path}: {name} has no values")
    return Axis(name, tuple(_typed(name, v) for v in values))


def _parse_axis(raw_name: str, rest: str) -> Axis:
    name = _axis_name(raw_name, "--grid")
    match = _range_match(rest) if _is_numeric(name) else None
    if match:
        return Axis(name, range=_parse_range(name, *match))
    pieces = _split_top(rest, ",", "--grid", keep_empty=True)
    if not all(p.strip() for p in pieces):
        raise FlagError(f"--grid: {name}={rest}: an empty value; remove the extra comma")
    return Axis(name, tuple(_typed(name, _unquote(name, p.strip())) for p in pieces))


def _range_match(text: str) -> tuple[str, str, str] | None:
    kinds = "|".join(RANGE_KINDS)
    m = re.fullmatch(rf"\s*({kinds})\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)\s*", text)
    return m.groups() if m else None


def _parse_range(name: str, kind: str, low: str, high: str) -> Range:
    try:
        lo, hi = float(low), float(high)
    except ValueError:
        raise FlagError(f"--grid: {name}={kind}({low},{high}): bounds must be numbers") from None
    integer = kind in ("int", "logint")
    if integer and not (lo.is_integer() and hi.is_integer()):
        raise FlagError(f"--grid: {name}={kind}({low},{high}): bounds must be integers")
    if not lo <= hi or (kind.startswith("log") and lo <= 0):
        raise FlagError(
            f"--grid: {name}={kind}({low},{high}): need low <= high"
            + (" and low > 0 for a log range" if kind.startswith("log") else "")
        )
    if _field_type(name) is int and not integer:
        raise FlagError(f"--grid: {name} is an integer flag; use int({low},{high}) or logint")
    return Range(kind, lo, hi)


def _axis_name(raw: str, where: str) -> str:
    """Our flag name for `raw` (upstream's names accepted), or `kwargs.<key>`."""
    name = raw.strip().lstrip("-")
    if name.startswith(KWARGS_PREFIX) and len(name) > len(KWARGS_PREFIX):
        return name
    name = UPSTREAM_FIELDS.get(name, name)
    if name not in _FIELDS:
        raise FlagError(
            f"{where}: unknown flag {raw!r}; use a `tpu-tiles train` flag (see tpu-tiles train "
            "--help) or kwargs.<key> for one key of --model_kwargs_json"
        )
    if name in _SET_BY_SWEEP:
        raise FlagError(f"{where}: {name} is set by the sweep itself; remove it from the grid")
    return name


def _checked_grid(axes: list[Axis], where: str) -> Grid:
    if not axes:
        raise FlagError(f"{where}: no axes; e.g. --grid 'lr=1e-3,2e-3 seed=0,1'")
    names = [a.name for a in axes]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise FlagError(f"{where}: {', '.join(twice)} given twice; list all values in one axis")
    return Grid(tuple(axes))


def _field_type(name: str) -> type | None:
    """The Python type of flag `name`; None for `kwargs.*` (any JSON value)."""
    if name.startswith(KWARGS_PREFIX):
        return None
    kind = _FIELDS[name].type
    return _TYPES[kind] if isinstance(kind, str) else kind


def _is_numeric(name: str) -> bool:
    return _field_type(name) in (int, float, None)


def _typed(name: str, value: Any) -> Any:
    """`value` (text from a spec, or a YAML/JSON scalar) as flag `name`'s type.

    Raises:
      FlagError: a value of the wrong type, naming the axis.
    """
    kind = _field_type(name)
    if kind is None:  # kwargs.<key>: JSON text, else the text itself
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return json.loads(value)
        return value
    if name == "model_kwargs_json" and isinstance(value, dict):
        return json.dumps(value)
    try:
        return _convert(kind, value)
    except (TypeError, ValueError):
        raise FlagError(f"--grid: {name}={value!r}: --{name} takes {kind.__name__}") from None


def _convert(kind: type, value: Any) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ValueError(value)
    if isinstance(value, bool):
        raise TypeError(value)
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return int(value) if not isinstance(value, str) else int(value.strip())
    if kind is float:
        return float(value)
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _format_value(name: str, value: Any) -> str:
    """One value as inline text that `_unquote` + `_typed` turn back into `value`."""
    if name.startswith(KWARGS_PREFIX):
        text = json.dumps(value)
        return text if _safe_bare(text) else f"'{text}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str):
        return repr(value)
    if _safe_bare(value) and not _range_match(value):
        return value
    for quote in ("'", '"'):
        if quote not in value:
            return f"{quote}{value}{quote}"
    raise FlagError(f"--grid: {name} value {value!r} has both quote characters; use a file")


def _safe_bare(text: str) -> bool:
    return bool(text) and not re.search(r"[\s,'\"()\[\]{}]", text)


def _unquote(name: str, piece: str) -> str:
    """Strips one pair of outer quotes ('...' always; "..." except for kwargs, where it is JSON)."""
    quotes = "'" if name.startswith(KWARGS_PREFIX) else "'\""
    if len(piece) >= 2 and piece[0] == piece[-1] and piece[0] in quotes:
        return piece[1:-1]
    return piece


def _split_top(text: str, seps: str, where: str, *, keep_empty: bool = False) -> list[str]:
    """Splits `text` at `seps` outside quotes and brackets.

    Raises:
      FlagError: unbalanced quotes or brackets, naming `where`.
    """
    pieces, current, depth, quote = [], [], 0, ""
    chars = iter(text)
    for ch in chars:
        if quote:
            current.append(ch)
            if ch == "\\" and quote == '"':
                current.append(next(chars, ""))
            elif ch == quote:
                quote = ""
            continue
        if ch in seps and depth == 0:
            pieces.append("".join(current))
            current = []
            continue
        current.append(ch)
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                break
    if quote or depth:
        raise FlagError(f"{where}: unbalanced quotes or brackets in {text!r}")
    pieces.append("".join(current))
    return pieces if keep_empty else [p for p in pieces if p.strip()]


# =============================================================================================
# Points
# =============================================================================================


@dataclasses.dataclass(frozen=True)
class Point:
    """One training run of the sweep: its axis values and the complete `TrainArgs`."""

    key: str
    values: dict[str, Any]
    args: TrainArgs

    @property
    def hash(self) -> str:
        return self.args.hash()

    def describe(self) -> str:
        """`model=MLP lr=0.001 seed=0`: the point's axis values."""
        return " ".join(f"{k}={_show(v)}" for k, v in self.values.items()) or "(base flags)"


def expand(
    grids: Sequence[Grid], base: TrainArgs, *, random_points: int = 0, random_seed: int = 0
) -> list[Point]:
    """The points of `grids` over `base`, without duplicates, in a stable order.

    Raises:
      FlagError: a range without `--random`, or a point whose flags are invalid.
    """
    points: dict[str, Point] = {}
    for index, grid in enumerate(grids):
        if random_points:
            rng = random.Random(f"{random_seed}:{index}")
            assignments = _draws(grid, random_points, rng)
        else:
            assignments = _product(grid)
        for values in assignments:
            point = make_point(base, values)
            points.setdefault(point.key, point)
    return list(points.values())


def _product(grid: Grid) -> Iterator[dict[str, Any]]:
    ranged = [a.name for a in grid.axes if a.range]
    if ranged:
        raise FlagError(
            f"--grid: {', '.join(ranged)} is a range; add --random N to sample N points from it"
        )
    for combo in itertools.product(*(a.values for a in grid.axes)):
        yield dict(zip((a.name for a in grid.axes), combo))


def _draws(grid: Grid, n: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    """`n` draws of the non-seed axes, each crossed with the seed list if there is one."""
    seeds = next((a for a in grid.axes if a.name == SEED_AXIS and not a.range), None)
    for _ in range(n):
        drawn = {
            a.name: a.range.sample(rng) if a.range else rng.choice(a.values)
            for a in grid.axes
            if a is not seeds
        }
        for seed in seeds.values if seeds else (None,):
            values = dict(drawn)
            if seeds:
                values[SEED_AXIS] = seed
            yield {a.name: values[a.name] for a in grid.axes}  # in axis order


def make_point(base: TrainArgs, values: Mapping[str, Any]) -> Point:
    """`base` with `values` applied and a `results_csv` named after the point's key.

    Raises:
      FlagError: the values give invalid flags, naming the point.
    """
    fields = {k: v for k, v in values.items() if not k.startswith(KWARGS_PREFIX)}
    kwargs = {k[len(KWARGS_PREFIX) :]: v for k, v in values.items() if k.startswith(KWARGS_PREFIX)}
    where = " ".join(f"{k}={_show(v)}" for k, v in values.items())
    try:
        args = base.replace(**fields)
        if kwargs:
            from tpu_tiles_models import registry

            merged = {**registry.parse_model_kwargs(args.model_kwargs_json), **kwargs}
            args = args.replace(model_kwargs_json=json.dumps(merged))
    except FlagError as e:
        raise FlagError(f"--grid point {where}: {e}") from None
    key = point_key(args)
    results_csv = files.join(files.expand(args.out_dir), f"results_{key}.csv")
    return Point(key, dict(values), args.replace(results_csv=results_csv))


def point_key(args: TrainArgs) -> str:
    """16 hex digits naming a point: md5 of every option that shapes the model."""
    kept = {k: v for k, v in args.to_dict().items() if k not in _NOT_IN_KEY}
    return hashlib.md5(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


# =============================================================================================
# Files (local or remote through tf.io.gfile)
# =============================================================================================


# Every file goes through `files` (local, or remote through tf.io.gfile); short names for
# the two this module uses most.
_glob, _remove = files.glob, files.remove


def _read_bytes(path: str) -> bytes | None:
    """The file's content, or None if it does not exist."""
    try:
        return files.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _read_json(path: str) -> dict | None:
    data = _read_bytes(path)
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def _write_json(path: str, value: Any) -> None:
    files.write_bytes(path, json.dumps(value, indent=1).encode())


def read_run_info(point: Point) -> dict | None:
    """The point's run file if it exists and is whole (its args hash to its name), else None."""
    data = _read_bytes(run_file_path(point))
    if data is None:
        return None
    try:
        info = json.loads(gzip.decompress(data))
        return info if args_hash(info["args"]) == point.hash else None
    except (OSError, EOFError, ValueError, KeyError, TypeError):
        return None


def run_file_path(point: Point) -> str:
    return files.join(files.expand(point.args.out_dir), f"run_{point.hash}.jsonz")


def model_dir_path(point: Point) -> str:
    return files.join(files.expand(point.args.out_dir), f"model_{point.hash}")


def _record_path(sweep_dir: str, key: str) -> str:
    return files.join(sweep_dir, "points", f"{key}.json")


def _remove_leftovers(args: TrainArgs, h: str) -> None:
    """What a killed run of this point may have left: the model dir and its temp copies,
    the curve, the results CSV and its TensorBoard folder (the run file does not exist)."""
    out = files.expand(args.out_dir)
    for name in (f"model_{h}", f".model_{h}.tmp", f".model_{h}.old", f"train_curve_{h}.png"):
        _remove(files.join(out, name))
    _remove(files.expand(args.results_csv))
    if args.tensorboard:
        _remove(files.join(files.expand(args.tensorboard), f"run_{h}"))


# =============================================================================================
# One point (runs on a Beam worker)
# =============================================================================================

# Set in a worker once a point was interrupted: the worker starts no further point. Workers
# of other processes or machines see the driver's Ctrl-C through the marker `<sweep>/STOP`.
_STOP = threading.Event()
STOP_MARKER = "STOP"
_CHILD_CODE = (
    "import sys; from tpu_tiles_models import sweep; sys.exit(sweep._child_main(sys.argv[1:]))"
)


def train_element(element: str, sweep_dir: str, isolation: str) -> dict:
    """The Beam step: trains one point (a JSON element) and records its outcome.

    Args:
      element: `{"key": ..., "args": TrainArgs.to_dict()}` as JSON.
      sweep_dir: `<out_dir>/sweep`, where the outcome `points/<key>.json` goes.
      isolation: "process" (a fresh child process) or "none" (this worker's process).

    Returns:
      The outcome record (also written, unless the point was interrupted).
    """
    point = json.loads(element)
    args = TrainArgs.from_dict(point["args"])
    record = _train_point(args, point["key"], sweep_dir, isolation)
    if record["status"] != "interrupted":
        _write_json(_record_path(sweep_dir, point["key"]), record)
    _count(record["status"])
    return record


def _train_point(args: TrainArgs, key: str, sweep_dir: str, isolation: str) -> dict:
    h = args.hash()
    record = dict(key=key, hash=h, host=socket.gethostname(), pid=os.getpid())
    if _STOP.is_set() or files.exists(files.join(sweep_dir, STOP_MARKER)):
        return dict(record, status="interrupted", error="not started: the sweep was interrupted")
    if files.exists(files.join(files.expand(args.out_dir), f"run_{h}.jsonz")):
        return dict(record, status="skipped", error="")  # finished meanwhile (another sweep)
    _remove_leftovers(args, h)
    start = time.time()
    if isolation == "process":
        outcome = _train_in_child(args, files.join(sweep_dir, "logs", f"{key}.log"))
    else:
        outcome = _train_here(args)
    if outcome["status"] == "interrupted":
        _STOP.set()
    return dict(record, **outcome, wall_s=round(time.time() - start, 2), finished=time.time())


def _train_here(args: TrainArgs) -> dict:
    """Trains in this process; any exception (not Ctrl-C) becomes a failed outcome."""
    from tpu_tiles_models import train

    try:
        train.train(args)
    except KeyboardInterrupt:
        return dict(status="interrupted", error="interrupted")
    except Exception as e:  # failures are data: the sweep goes on with the other points
        return dict(status="failed", error=_one_line(e), traceback=traceback.format_exc())
    return dict(status="ok", error="")


def _train_in_child(args: TrainArgs, log_path: str) -> dict:
    """Trains in a fresh Python process whose output goes to `log_path`.

    The child shares this process group, so a terminal's Ctrl-C reaches it (the worker itself
    ignores it, see `_run_shielded`): it stops at its next safe point, removes what it had
    started and exits 130.
    """
    with tempfile.TemporaryDirectory(prefix="tpu_tiles_point_") as tmp:
        spec, outcome_path = Path(tmp, "args.json"), Path(tmp, "outcome.json")
        spec.write_text(json.dumps(args.to_dict()))
        remote_log = files.is_remote(log_path)
        local_log = Path(tmp, "train.log") if remote_log else Path(files.expand(log_path))
        local_log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        with open(local_log, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD_CODE, str(spec), str(outcome_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
            code = _wait(proc)
        if remote_log:
            files.write_bytes(log_path, local_log.read_bytes())
        outcome = _read_json(str(outcome_path))
    if code == _EXIT_INTERRUPTED:
        return dict(status="interrupted", error="interrupted")
    if outcome is not None:
        return outcome
    return dict(status="failed", error=f"{_death(code)}; see {log_path}")


def _wait(proc: subprocess.Popen) -> int:
    """Waits for the child, also through a KeyboardInterrupt in this process (where a Ctrl-C
    is not shielded, see `_run_shielded`): the child got it too and is cleaning up."""
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            _STOP.set()


def _death(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"the training process was killed by {name}{hint}"
    return f"the training process exited with status {code}"


def _child_main(argv: Sequence[str]) -> int:
    """Entry point of a point's child process: trains, writes the outcome JSON."""
    spec, outcome_path = argv
    args = TrainArgs.from_dict(json.loads(Path(spec).read_text()))
    with interrupts.deferred():  # SIGINT arrives ignored (see _run_shielded): handle it here
        outcome = _train_here(args)
    if outcome["status"] == "interrupted":
        print("interrupted: removed what this point had started", file=sys.stderr)
        return _EXIT_INTERRUPTED
    if outcome.get("traceback"):
        print(outcome["traceback"], file=sys.stderr)
    Path(outcome_path).write_text(json.dumps(outcome))
    return 0 if outcome["status"] == "ok" else 1


def _count(status: str) -> None:
    """A Beam counter per outcome (visible in the Dataflow/Flink UIs)."""
    from apache_beam.metrics import Metrics

    Metrics.counter("tpu_tiles_sweep", f"points_{status}").inc()


def _one_line(e: BaseException, limit: int = 400) -> str:
    text = " ".join(str(e).split())
    if not isinstance(e, UserError):
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# =============================================================================================
# Leaderboard
# =============================================================================================


@dataclasses.dataclass
class Row:
    """One point's line in the leaderboard. `status`: ok, nan, failed or not run."""

    point: Point
    status: str
    error: str = ""
    score: float | None = None
    top1: float | None = None
    top5: float | None = None
    top10: float | None = None
    opa: float | None = None
    epochs: int | None = None
    best_epoch: int | None = None
    train_s: float | None = None
    wall_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def leaderboard_row(point: Point, info: dict | None, record: dict | None) -> Row:
    """A point's row from its run file (`info`) and its recorded outcome (`record`)."""
    wall = record.get("wall_s") if record else None
    if info is None:
        status = record["status"] if record and record["status"] == "failed" else "not run"
        return Row(point, status, (record or {}).get("error", ""), wall_s=wall)
    val = info.get("final_error", {}).get("val", {})
    curve, extras = info.get("train_curve", {}), info.get("tpu_tiles") or {}
    epochs = len(curve.get("epoch", []))
    best = extras.get("best_epoch", epochs - 1)
    opas = curve.get("val_opa") or [None]
    row = Row(
        point,
        "ok",
        top1=val.get("1"),
        top5=val.get("5"),
        top10=val.get("10"),
        opa=opas[best] if 0 <= best < len(opas) else opas[-1],
        epochs=epochs,
        best_epoch=best,
        train_s=round(sum(extras.get("epoch_seconds", [])), 2),
        wall_s=wall,
    )
    row.score = 1.0 - row.top5 if row.top5 is not None else None
    bad = _non_finite(curve.get("train_loss", []), [row.top1, row.top5, row.top10])
    if bad:
        row.status, row.error = "nan", bad
    return row


def _non_finite(losses: Sequence[float], errors: Sequence[float | None]) -> str:
    for epoch, loss in enumerate(losses):
        if not _finite(loss):
            return f"non-finite training loss at epoch {epoch}; lower --lr or --clip_norm"
    if not all(_finite(e) for e in errors):
        return "non-finite validation error"
    return ""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def rank_rows(rows: list[Row]) -> list[Row]:
    """Best score first; then nan, failed and not-run points."""
    order = {"ok": 0, "nan": 1, "failed": 2, "not run": 3}
    return sorted(rows, key=lambda r: (order[r.status], -(r.score if r.ok else 0.0), r.point.key))


def axis_names(points: Sequence[Point]) -> list[str]:
    """Every axis of the sweep, in first-seen order."""
    names: dict[str, None] = {}
    for p in points:
        names.update(dict.fromkeys(p.values))
    return list(names)


CSV_COLUMNS = (
    "rank",
    "status",
    "score",
    "top1_error",
    "top5_error",
    "top10_error",
    "opa",
    "epochs",
    "best_epoch",
    "train_s",
    "wall_s",
)


def leaderboard_csv(rows: Sequence[Row], axes: Sequence[str]) -> str:
    """`sweep.csv`: one row per point; `flags` is `tpu-tiles train <flags>` of the point."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *axes, "key", "hash", "model_dir", "flags", "error"])
    for rank, r in enumerate(rows, 1):
        metrics = (r.score, r.top1, r.top5, r.top10, r.opa, r.epochs, r.best_epoch)
        writer.writerow(
            [
                rank if r.ok else "",
                r.status,
                *("" if m is None else m for m in metrics),
                "" if r.train_s is None else r.train_s,
                "" if r.wall_s is None else r.wall_s,
                *(_show(r.point.values[a]) if a in r.point.values else "" for a in axes),
                r.point.key,
                r.point.hash,
                f"model_{r.point.hash}" if r.status != "not run" else "",
                shlex.join(r.point.args.to_argv()),
                r.error,
            ]
        )
    return out.getvalue()


@dataclasses.dataclass
class Group:
    """Points that differ only by seed: mean and sample std of their scores."""

    values: dict[str, Any]
    scores: list[float]
    top5: list[float]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores)

    @property
    def std(self) -> float:
        return statistics.stdev(self.scores) if len(self.scores) > 1 else 0.0


def seed_groups(rows: Sequence[Row], axes: Sequence[str]) -> list[Group]:
    """Successful points grouped by every axis but `seed`, best mean score first."""
    keep = [a for a in axes if a != SEED_AXIS]
    groups: dict[str, Group] = {}
    for r in rows:
        if not r.ok:
            continue
        values = {a: r.point.values[a] for a in keep if a in r.point.values}
        group = groups.setdefault(
            json.dumps(values, sort_keys=True, default=str), Group(values, [], [])
        )
        group.scores.append(r.score)
        group.top5.append(r.top5)
    return sorted(groups.values(), key=lambda g: -g.mean)


def leaderboard_markdown(
    rows: Sequence[Row], axes: Sequence[str], title: str, ensemble: dict | None = None
) -> str:
    """`sweep.md`: the ranked points, mean +- std over seeds, the ensemble, what failed."""
    ok = sum(r.ok for r in rows)
    lines = [f"# Sweep {title}", "", f"{len(rows)} points: {ok} ok, {len(rows) - ok} not ok.", ""]
    lines += _md_points(rows, axes)
    groups = seed_groups(rows, axes)
    if any(len(g.scores) > 1 for g in groups):
        lines += ["", "## Mean +- std over seeds", "", *_md_groups(groups, axes)]
    if ensemble:
        lines += ["", f"## Ensemble of the {ensemble['k']} best points", "", _md_ensemble(ensemble)]
    bad = [r for r in rows if not r.ok]
    if bad:
        lines += ["", "## Not ok", ""]
        lines += [f"- `{r.point.key}` {r.point.describe()}: {r.status}: {r.error}" for r in bad]
    return "\n".join(lines) + "\n"


def _md_points(rows: Sequence[Row], axes: Sequence[str]) -> list[str]:
    head = ["rank", "score", "top-1 err", "top-5 err", "top-10 err", "OPA", "epochs", "s"]
    lines = [_md_row([*head, *axes, "status"]), _md_row(["---"] * (len(head) + len(axes) + 1))]
    for rank, r in enumerate(rows, 1):
        metrics = [_fmt(m) for m in (r.score, r.top1, r.top5, r.top10, r.opa)]
        seconds = r.wall_s if r.wall_s is not None else r.train_s
        cells = [str(rank) if r.ok else "", *metrics, _fmt(r.epochs), _fmt(seconds, 1)]
        cells += [_show(r.point.values[a]) if a in r.point.values else "" for a in axes]
        lines.append(_md_row([*cells, r.status]))
    return lines


def _md_groups(groups: Sequence[Group], axes: Sequence[str]) -> list[str]:
    keep = [a for a in axes if a != SEED_AXIS]
    lines = [_md_row([*keep, "seeds", "score", "top-5 err"]), _md_row(["---"] * (len(keep) + 3))]
    for g in groups:
        std5 = statistics.stdev(g.top5) if len(g.top5) > 1 else 0.0
        cells = [_show(g.values.get(a, "")) for a in keep]
        cells += [str(len(g.scores)), f"{g.mean:.4f} +- {g.std:.4f}"]
        lines.append(_md_row([*cells, f"{statistics.fmean(g.top5):.4f} +- {std5:.4f}"]))
    return lines


def _md_ensemble(ensemble: dict) -> str:
    members = ", ".join(f"`{k}`" for k in ensemble["members"])
    if ensemble["error"]:
        return f"Not built: {ensemble['error']}"
    return (
        f"score {ensemble['score']:.4f} (top-1 err {ensemble['top1']:.4f}, top-5 err "
        f"{ensemble['top5']:.4f}, top-10 err {ensemble['top10']:.4f}); members {members}; "
        f"`{ensemble['dir']}`"
    )


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _fmt(value: float | int | None, digits: int = 4) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:.{digits}f}"


def leaderboard_png(rows: Sequence[Row], axes: Sequence[str]) -> bytes:
    """`sweep.png`: score per point (left) and mean +- std over seeds per group (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.ok]
    groups = seed_groups(rows, axes)
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12, 0.8 + 0.3 * max(len(ok), len(groups), 4)), squeeze=True
    )
    labels = [r.point.describe() for r in ok]
    left.barh(range(len(ok)), [r.score for r in ok], color="tab:blue")
    left.set_yticks(range(len(ok)), labels, fontsize=7)
    left.invert_yaxis()
    left.set_title("score (1 - top-5 error) per point")
    keep = [a for a in axes if a != SEED_AXIS]
    names = [
        " ".join(f"{a}={_show(g.values[a])}" for a in keep if a in g.values) or "all"
        for g in groups
    ]
    right.barh(
        range(len(groups)),
        [g.mean for g in groups],
        xerr=[g.std for g in groups],
        color="tab:green",
        capsize=3,
    )
    right.set_yticks(
        range(len(groups)), [f"{n} (n={len(g.scores)})" for n, g in zip(names, groups)], fontsize=7
    )
    right.invert_yaxis()
    right.set_title("mean +- std over seeds")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


# =============================================================================================
# TensorBoard HParams
# =============================================================================================


def write_hparams(tensorboard: str, rows: Sequence[Row], axes: Sequence[str]) -> None:
    """The HParams dashboard's experiment (in `tensorboard/`) and each ok point's session
    (in `tensorboard/run_<h>/`, beside the trainer's per-epoch scalars); idempotent."""
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp

    ok = [r for r in rows if r.ok]
    if not ok:
        return
    root = files.expand(tensorboard)
    hparams = [
        hp.HParam(a, _domain(hp, [r.point.values[a] for r in ok if a in r.point.values]))
        for a in axes
    ]
    metrics = [
        hp.Metric(f"final/{m}") for m in ("score", "top1_error", "top5_error", "top10_error", "opa")
    ]
    metrics += [hp.Metric(m) for m in ("val_score", "val_opa", "train_loss")]
    for old in _glob(files.join(root, f"*{_HPARAMS_SUFFIX}")):
        _remove(old)
    with tf.summary.create_file_writer(root, filename_suffix=_HPARAMS_SUFFIX).as_default():
        hp.hparams_config(hparams=hparams, metrics=metrics)
    for r in ok:
        run_dir = files.join(root, f"run_{r.point.hash}")
        if _glob(files.join(run_dir, f"*{_HPARAMS_SUFFIX}")):
            continue
        values = {a: _hparam_value(r.point.values[a]) for a in axes if a in r.point.values}
        with tf.summary.create_file_writer(run_dir, filename_suffix=_HPARAMS_SUFFIX).as_default():
            hp.hparams(values, trial_id=r.point.key)
            finals = dict(
                score=r.score, top1_error=r.top1, top5_error=r.top5, top10_error=r.top10, opa=r.opa
            )
            for name, value in finals.items():
                if value is not None:
                    tf.summary.scalar(f"final/{name}", value, step=r.best_epoch or 0)


def _hparam_value(value: Any) -> bool | float | str:
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return json.dumps(value)


def _domain(hp, values: list[Any]):
    """A Discrete domain of the values seen (HParams needs one type: bool, float or str)."""
    typed = sorted({_hparam_value(v) for v in values}, key=str)
    kinds = {type(v) for v in typed}
    if len(kinds) > 1:
        typed = sorted({str(v) for v in typed})
    return hp.Discrete(typed)


# =============================================================================================
# The pipeline
# =============================================================================================


def _beam_parser():
    """An argparse parser of every Beam pipeline option (as Beam itself builds it)."""
    from apache_beam.options import pipeline_options as po

    parser = po._BeamArgumentParser(allow_abbrev=False)
    classes = {str(c): c for c in reversed(po.PipelineOptions.__subclasses__())}
    for cls in classes.values():
        cls._add_argparse_args(parser)

    def error(message: str) -> None:  # one line, not argparse's usage of 177 options
        raise FlagError(f"Beam pipeline option: {message}")

    parser.error = error
    return parser


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Splits the extra arguments into `tpu-tiles train` flags and Beam pipeline options.

    Raises:
      FlagError: a stray positional argument, or a flag that is neither.
    """
    bools = {f.name for f in dataclasses.fields(TrainArgs) if _field_type(f.name) is bool}
    train_names = set(_FIELDS) | {f"no{n}" for n in bools}
    train_argv: list[str] = []
    beam_argv: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-") or token in ("-", "--"):
            raise FlagError(f"unexpected argument {token!r}; flags look like --epochs=10")
        name = token.lstrip("-").split("=", 1)[0]
        can_take = "=" not in token and i + 1 < len(argv)
        if name in train_names:  # absl: booleans never take the next token
            take = can_take and name in _FIELDS and name not in bools
            train_argv += argv[i : i + 1 + take]
        else:
            take = can_take and not argv[i + 1].startswith("--")
            beam_argv += argv[i : i + 1 + take]
        i += 1 + take
    _check_beam_argv(beam_argv)
    return train_argv, beam_argv


def _check_beam_argv(beam_argv: list[str]) -> None:
    if not beam_argv:
        return
    with pipelines.quiet_beam():
        _, unknown = _beam_parser().parse_known_args(beam_argv)
    flags = [t for t in unknown if t.startswith("-")]
    if flags:
        raise FlagError(
            f"unknown flag {flags[0].split('=')[0]}: neither a `tpu-tiles train` flag "
            "(tpu-tiles train --help) nor an Apache Beam pipeline option"
        )


def pipeline_options(a: argparse.Namespace, beam_argv: Sequence[str]):
    """Beam options: the user's pass-through options, the runner, and our DirectRunner
    defaults (multi-processing, `--num_workers` processes, quiet workers)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    given = {t.lstrip("-").split("=")[0] for t in beam_argv if t.startswith("--")}
    extra: dict[str, Any] = {"runner": a.runner}
    if _is_direct(a.runner):
        defaults = dict(
            direct_running_mode="multi_processing",
            direct_num_workers=a.num_workers or pipelines.cores(),
            default_sdk_harness_log_level="ERROR",
        )
        extra.update({k: v for k, v in defaults.items() if k not in given})
    elif a.num_workers and "num_workers" not in given:
        extra["num_workers"] = a.num_workers
    return PipelineOptions(list(beam_argv), **extra)


def _is_direct(runner: str) -> bool:
    return runner.lower().removesuffix("runner") == "direct"


def _check_runner(name: str) -> None:
    try:
        with pipelines.quiet_beam():
            from apache_beam.runners.runner import create_runner

            create_runner(name)
    except ImportError as e:
        raise FlagError(f"--runner {name}: {_one_line(e)}") from None
    except (ValueError, AttributeError):
        raise FlagError(
            f"--runner {name}: not a Beam runner; use DirectRunner, DataflowRunner, "
            "FlinkRunner, SparkRunner or PortableRunner"
        ) from None


def run_pipeline(points: Sequence[Point], sweep_dir: str, options, isolation: str) -> None:
    """`Create(points) | Reshuffle | Map(train_element)`; returns when every point is done.

    The Reshuffle keeps a distributed runner from fusing all points onto one worker.
    """
    with pipelines.quiet_beam():
        import apache_beam as beam

        elements = [json.dumps(dict(key=p.key, args=p.args.to_dict())) for p in points]
        with beam.Pipeline(options=options) as pipeline:
            _ = (
                pipeline
                | "Points" >> beam.Create(elements)
                | "Spread" >> beam.Reshuffle()
                | "Train" >> beam.Map(train_element, sweep_dir=sweep_dir, isolation=isolation)
            )


class _Progress:
    """Prints a line per finished point (read from the outcome records) while the sweep runs."""

    def __init__(self, todo: Sequence[Point], sweep_dir: str, total: int, done: int):
        self.todo = {p.key: p for p in todo}
        self.sweep_dir, self.total, self.done, self.failed = sweep_dir, total, done, 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.interval = 15.0 if files.is_remote(sweep_dir) else 2.0

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        for path in sorted(_glob(_record_path(self.sweep_dir, "*"))):
            key = os.path.basename(path)[: -len(".json")]
            if key in self.seen or key not in self.todo:
                continue
            record = _read_json(path)
            if record is None:
                continue
            self.seen.add(key)
            self.done += 1
            self.failed += record["status"] == "failed"
            what = (
                f"{record.get('wall_s', 0):.0f} s"
                if record["status"] != "failed"
                else record["error"]
            )
            print(
                f"sweep: [{self.done}/{self.total}] {record['status']:<7} "
                f"{self.todo[key].describe()}  {what}  ({self.failed} failed)",
                flush=True,
            )


# =============================================================================================
# The command
# =============================================================================================


@dataclasses.dataclass
class SweepSummary:
    """What a sweep did: its ranked rows and where the leaderboard went."""

    rows: list[Row]
    trained: int
    skipped: int
    paths: dict[str, str]
    ensemble: dict[str, Any] | None = None

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]


def add_flags(p: argparse.ArgumentParser) -> None:
    """The sweep's own flags; every other flag is a `tpu-tiles train` flag or a Beam option."""
    p.add_argument(
        "--grid", required=True, help="YAML/JSON file, or inline 'model=A,B lr=1e-3,2e-3 seed=0,1'"
    )
    p.add_argument("--out_dir", required=True, help="every point's artifacts and the leaderboard")
    p.add_argument(
        "--random",
        type=int,
        default=0,
        metavar="N",
        help="draw N points per grid from its lists and ranges",
    )
    p.add_argument("--random_seed", type=int, default=0, help="seed of the --random draws")
    p.add_argument(
        "--runner",
        default="DirectRunner",
        help="Beam runner: DirectRunner, DataflowRunner, FlinkRunner, SparkRunner",
    )
    p.add_argument(
        "--num_workers",
        type=int,
        default=None,
        help="DirectRunner: parallel worker processes (default: cores); others: "
        "passed on as Beam's --num_workers",
    )
    p.add_argument(
        "--isolation",
        choices=("process", "none"),
        default="process",
        help="train each point in a fresh child process (default) or in the worker",
    )
    p.add_argument(
        "--ensemble_top",
        type=int,
        default=0,
        metavar="K",
        help="when done, build the ensemble of the K best points",
    )
    p.add_argument("--dry_run", action="store_true", help="list the points and exit")
    p.epilog = (
        "Other flags: any `tpu-tiles train` flag (the base of every point; see tpu-tiles "
        "train --help) and any Apache Beam pipeline option (--project, --region, "
        "--temp_location, --flink_master, --direct_running_mode, ...)."
    )


def run(a: argparse.Namespace) -> SweepSummary:
    """`tpu-tiles sweep`: expands the grid, trains the missing points, writes the leaderboard.

    Args:
      a: the flags of `add_flags`; `a.extra` holds the train flags and Beam options.

    Returns:
      The summary (when every point is ok).

    Raises:
      FlagError: bad flags or grid, before anything is trained.
      SweepFailed: some points failed or did not run; the leaderboard is written anyway.
      KeyboardInterrupt: Ctrl-C; running points removed what they had started.
    """
    _check_counts(a)
    train_argv, beam_argv = split_argv(list(getattr(a, "extra", None) or []))
    base = _base_args(train_argv, a.out_dir)
    points = expand(parse_grid(a.grid), base, random_points=a.random, random_seed=a.random_seed)
    if a.ensemble_top:
        _ensemble_module()  # fail now, not after hours of training
    out_dir = files.expand(base.out_dir)
    sweep_dir = files.join(out_dir, SWEEP_DIR)
    complete = {p.key for p in points if read_run_info(p) is not None}
    todo = [p for p in points if p.key not in complete]
    print(
        f"sweep: {len(points)} points, {len(complete)} already complete (skipped), "
        f"{len(todo)} to train; out_dir {out_dir}",
        flush=True,
    )
    if a.dry_run:
        for p in points:
            print(f"  {'done' if p.key in complete else 'todo'}  {p.key}  {p.describe()}")
        return SweepSummary([], 0, len(complete), {})
    if todo:
        _check_runner(a.runner)
    _write_plan(sweep_dir, a, base, points)
    error = _train_todo(todo, sweep_dir, a, beam_argv, len(points), len(complete))
    rows = collect_rows(points, sweep_dir)
    ensemble = _build_ensemble(rows, a.ensemble_top, out_dir, base) if a.ensemble_top else None
    summary = _write_outputs(rows, points, out_dir, base, {p.key for p in todo}, ensemble)
    _raise_for_failures(summary, error)
    return summary


def main(argv: Sequence[str] | None = None) -> SweepSummary:
    """`tpu-tiles sweep` without the CLI around it: parses `argv` and runs."""
    parser = argparse.ArgumentParser(prog="tpu-tiles sweep")
    add_flags(parser)
    a, extra = parser.parse_known_args(argv)
    a.extra = extra
    return run(a)


def _check_counts(a: argparse.Namespace) -> None:
    for flag, low in (("random", 0), ("num_workers", 1), ("ensemble_top", 0)):
        value = getattr(a, flag)
        if value is not None and value < low:
            raise FlagError(f"--{flag} must be at least {low}, got {value}")


def _base_args(train_argv: list[str], out_dir: str) -> TrainArgs:
    """The train flags every point starts from, with the sweep's out_dir and TensorBoard."""
    if any(t.lstrip("-").split("=")[0] == "results_csv" for t in train_argv):
        raise FlagError("--results_csv is named per point by the sweep; remove it")
    base = TrainArgs.from_argv(train_argv, prog="tpu-tiles sweep").replace(
        out_dir=out_dir, no_progress=True
    )
    if not base.tensorboard:
        base = base.replace(tensorboard=files.join(files.expand(out_dir), TENSORBOARD_DIR))
    # Paths may be remote (gs://): the trainer goes through tf.io.gfile. Not --models, a
    # Python file imported by every point, and the trainer checks it only once data is read.
    files.require_local(base.models, flag="--models")
    return base


def _write_plan(sweep_dir: str, a: argparse.Namespace, base: TrainArgs, points: list[Point]):
    plan = dict(
        grid=a.grid,
        random=a.random,
        random_seed=a.random_seed,
        base=base.to_argv(),
        points=[
            dict(key=p.key, hash=p.hash, values=p.values, flags=p.args.to_argv()) for p in points
        ],
    )
    _write_json(files.join(sweep_dir, "plan.json"), plan)


def _train_todo(todo, sweep_dir, a, beam_argv, total: int, done: int) -> str:
    """Runs the pipeline over `todo`; returns the pipeline's error ('' if it finished)."""
    if not todo:
        return ""
    options = pipeline_options(a, beam_argv)
    for p in todo:  # outcomes of earlier attempts: these points are tried again
        _remove(_record_path(sweep_dir, p.key))
    _STOP.clear()
    stop = files.join(sweep_dir, STOP_MARKER)
    _remove(stop)
    error, pressed = "", False
    try:
        with _Progress(todo, sweep_dir, total, done):
            pressed = _run_shielded(
                lambda: run_pipeline(todo, sweep_dir, options, a.isolation), stop
            )
    except Exception as e:  # a failed job: record what is missing, keep what finished
        error = _one_line(e)
    finally:
        _remove(stop)
    if pressed or _STOP.is_set():
        raise KeyboardInterrupt
    return error


def _run_shielded(fn: Callable[[], None], stop_marker: str) -> bool:
    """Runs `fn` (the pipeline) so that Ctrl-C stops the sweep cleanly (see
    `pipelines.run_shielded`); returns whether Ctrl-C was pressed.

    Ctrl-C reaches the points' child processes, which stop at a safe point and remove what
    they had started. The first one writes `stop_marker`, so no worker starts another point,
    and is passed to the previous handler (a point training in this process stops too); a
    second one stops waiting at once.
    """

    def on_ctrl_c(previous) -> None:
        files.write_bytes(stop_marker, b"")
        print("sweep: Ctrl-C: no new point starts; running points stop at a safe point")
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C is handled as usual
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signal.SIGINT, None)

    return pipelines.run_shielded(fn, on_ctrl_c)[1]


def collect_rows(points: Sequence[Point], sweep_dir: str) -> list[Row]:
    """Every point's row from its run file and recorded outcome, best first."""
    return rank_rows(
        [
            leaderboard_row(p, read_run_info(p), _read_json(_record_path(sweep_dir, p.key)))
            for p in points
        ]
    )


def _write_outputs(rows, points, out_dir, base, todo: set[str], ensemble) -> SweepSummary:
    """Writes the leaderboard (csv, md, png) and the HParams summary; prints the summary."""
    axes = axis_names(points)
    paths = {name: files.join(out_dir, f"sweep.{name}") for name in ("csv", "md", "png")}
    files.write_bytes(paths["csv"], leaderboard_csv(rows, axes).encode())
    markdown = leaderboard_markdown(rows, axes, out_dir, ensemble)
    files.write_bytes(paths["md"], markdown.encode())
    files.write_bytes(paths["png"], leaderboard_png(rows, axes))
    write_hparams(base.tensorboard, rows, axes)
    paths["tensorboard"] = files.expand(base.tensorboard)
    trained = sum(1 for r in rows if r.status in ("ok", "nan") and r.point.key in todo)
    summary = SweepSummary(rows, trained, len(points) - len(todo), paths, ensemble)
    _print_summary(summary)
    return summary


def _print_summary(summary: SweepSummary) -> None:
    rows = summary.rows
    print(
        f"sweep: {len(rows)} points: {summary.trained} trained, {summary.skipped} skipped "
        f"(already complete), {len(summary.failed)} not ok"
    )
    print("wrote " + ", ".join(summary.paths[k] for k in ("csv", "md", "png")))
    print(f"TensorBoard (HParams): tensorboard --logdir {summary.paths['tensorboard']}")
    best = next((r for r in rows if r.ok), None)
    if best:
        print(f"best: score {best.score:.4f}  {best.point.describe()}  model_{best.point.hash}")
    ens = summary.ensemble
    if ens and not ens["error"]:
        print(f"ensemble of the {len(ens['members'])} best: score {ens['score']:.4f}  {ens['dir']}")


def _raise_for_failures(summary: SweepSummary, pipeline_error: str) -> None:
    bad = summary.failed
    ensemble_error = (summary.ensemble or {}).get("error", "")
    if not bad and not pipeline_error and not ensemble_error:
        return
    if not bad and not pipeline_error:
        raise SweepFailed(f"--ensemble_top: {ensemble_error}", summary)
    named = "; ".join(
        f"{r.point.key} ({r.point.describe()}): {r.status}: {r.error}" for r in bad[:3]
    )
    more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
    stopped = f"the pipeline failed ({pipeline_error}); " if pipeline_error else ""
    retry = (
        "; rerun the same command to retry the failed ones"
        if any(r.status in ("failed", "not run") for r in bad)
        else "; a nan point keeps its run: change its flags (e.g. a lower --lr)"
    )
    raise SweepFailed(
        f"{stopped}{len(bad)} of {len(summary.rows)} points not ok: {named}{more}; see "
        f"{summary.paths['md']}{retry}",
        summary,
    )


# -- ensemble ------------------------------------------------------------------------------
# HOOK(ensemble, issue 13): `tpu_tiles_models.ensemble.build_ensemble` builds, validates and
# writes the ensemble; without that module, --ensemble_top is refused before any training.


def _ensemble_module():
    import importlib
    import importlib.util

    if importlib.util.find_spec("tpu_tiles_models.ensemble") is None:
        raise FlagError(
            "--ensemble_top: ensembles are not available yet (tpu_tiles_models.ensemble, "
            "issue 13); run without --ensemble_top"
        )
    return importlib.import_module("tpu_tiles_models.ensemble")


def _build_ensemble(rows: list[Row], k: int, out_dir: str, base: TrainArgs) -> dict[str, Any]:
    """The ensemble of the `k` best ok points in `<out_dir>/ensemble_top<k>`; its errors, or
    the one-line reason it could not be built (the leaderboard is written either way).

    The same members as last time reuse the ensemble already there; new members replace it.
    """
    best = [r for r in rows if r.ok][:k]
    target = files.join(out_dir, f"ensemble_top{k}")
    info: dict[str, Any] = dict(k=k, dir=target, members=[r.point.key for r in best], error="")
    if len(best) < 2:
        return dict(info, error=f"{len(best)} ok point(s); an ensemble needs at least 2")
    record = files.join(target, "sweep_ensemble.json")
    previous = _read_json(record)
    if previous and previous["members"] == info["members"] and files.exists(previous["run_file"]):
        return previous
    print(f"sweep: building the ensemble of the {len(best)} best points", flush=True)
    try:
        result = _ensemble_module().build_ensemble(
            [model_dir_path(r.point) for r in best],
            target,
            data_root=base.data_root,
            cache_dir=base.cache_dir or None,
            progress=False,
        )
    except UserError as e:
        return dict(info, error=_one_line(e))
    errors = {int(n): v for n, v in result.val_errors.items()}
    info.update(dir=str(result.model_dir), run_file=str(result.run_file), top1=errors[1])
    info.update(top5=errors[5], top10=errors[10], score=1.0 - errors[5])
    info["results_csv"] = str(result.results_csv or "")
    if previous:  # the ensemble of other members, replaced by this one
        for key in ("dir", "run_file", "results_csv"):
            if previous.get(key) and previous[key] != info[key]:
                _remove(previous[key])
    _write_json(record, info)
    return info
