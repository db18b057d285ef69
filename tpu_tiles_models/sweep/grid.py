"""Grids: `--grid` as inline text or a YAML/JSON file, parsed into axes of values or ranges.

An axis is `name=v1,v2,...` where `name` is a training flag (ours or upstream's name) or
`kwargs.<key>`, one key inside `--model_kwargs_json`; a numeric axis may instead be a range
that `--random` samples (`uniform`, `loguniform`, `int`, `logint`; bounds inclusive). A file
holds one mapping `{axis: value | [values] | "range"}` or a list of them (a union of grids).
The package docstring shows the syntax; `values` converts each value.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from typing import Any

from tpu_tiles_models import files
from tpu_tiles_models.errors import FlagError, one_line
from tpu_tiles_models.sweep.values import (
    KWARGS_PREFIX,
    RANGE_KINDS,
    format_value,
    is_numeric,
    range_match,
    split_top,
    typed,
    unquote,
    value_type,
)
from tpu_tiles_models.train_args import FLAG_TYPES, UPSTREAM_FIELDS

SIGNIFICANT = 4  # digits kept of a float drawn by --random
# Set by the sweep for every point, so a grid may not vary them.
SET_BY_SWEEP = ("out_dir", "results_csv", "tensorboard", "no_progress")


@dataclasses.dataclass(frozen=True)
class Range:
    """A numeric range that `--random` samples: `kind(low,high)`, bounds inclusive."""

    kind: str
    low: float
    high: float

    def sample(self, rng: random.Random) -> float | int:
        """One draw: floats rounded to 4 significant digits, ints for int/logint."""
        if self.kind == "uniform":
            return float(f"{rng.uniform(self.low, self.high):.{SIGNIFICANT}g}")
        if self.kind == "int":
            return rng.randint(int(self.low), int(self.high))
        value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        if self.kind == "logint":
            return min(max(round(value), int(self.low)), int(self.high))
        return float(f"{value:.{SIGNIFICANT}g}")

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
    if not text.strip():
        raise FlagError(
            "--grid is empty; pass a .yaml/.json grid file or an inline spec, e.g. --grid "
            "'lr=1e-3,2e-3 seed=0,1'"
        )
    if "=" not in text or files.exists(text.strip()):  # every inline axis has a "="
        return load_grid_file(text.strip())
    return [parse_inline(text)]


def parse_inline(spec: str) -> Grid:
    """`"model=A,B lr=1e-3,2e-3 seed=0,1"` -> a `Grid` (see the module docstring)."""
    axes = []
    for token in split_top(spec, " \t\r\n", "--grid"):
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
    try:
        data = files.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise FlagError(
            f"--grid {path}: no such file; pass a .yaml/.json grid or an inline spec"
        ) from None
    try:
        if path.lower().endswith(".json"):
            content = json.loads(data)
        else:
            import yaml

            content = yaml.safe_load(data)
    except Exception as e:  # yaml and json raise several types; all mean "malformed"
        raise FlagError(f"--grid {path}: not valid YAML/JSON ({one_line(e)})") from None
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
            else ",".join(format_value(axis.name, v) for v in axis.values)
        )
        parts.append(f"{axis.name}={text}")
    return " ".join(parts)


def _file_axis(name: str, value: Any, path: str) -> Axis:
    """An axis from a file entry: a scalar, a list, or a range string."""
    name = _axis_name(name, f"--grid {path}")
    if isinstance(value, str) and is_numeric(name) and range_match(value):
        return _parse_axis(name, value)
    if isinstance(value, str):
        _refuse_bad_range(name, value, f"--grid {path}")
    values = value if isinstance(value, list) else [value]
    if not values:
        raise FlagError(f"--grid {path}: {name} has no values")
    return Axis(name, tuple(typed(name, v) for v in values))


def _parse_axis(raw_name: str, rest: str) -> Axis:
    name = _axis_name(raw_name, "--grid")
    match = range_match(rest) if is_numeric(name) else None
    if match:
        return Axis(name, range=_parse_range(name, *match))
    _refuse_bad_range(name, rest)
    pieces = split_top(rest, ",", "--grid", keep_empty=True)
    if not all(p.strip() for p in pieces):
        raise FlagError(f"--grid: {name}={rest}: an empty value; remove the extra comma")
    return Axis(name, tuple(typed(name, unquote(name, p.strip())) for p in pieces))


def _refuse_bad_range(name: str, text: str, where: str = "--grid") -> None:
    """A value that starts like a range (`loguniform(...`) but is not one: say so, rather
    than that the flag takes another type."""
    kind = re.match(rf"\s*({'|'.join(RANGE_KINDS)})\s*\(", text)
    if kind and is_numeric(name):
        raise FlagError(
            f"{where}: {name}={text}: a range takes two bounds, low and high, e.g. "
            f"{kind.group(1)}({'1,8' if kind.group(1).endswith('int') else '1e-4,1e-2'})"
        )


def _parse_range(name: str, kind: str, low: str, high: str) -> Range:
    try:
        lo, hi = float(low), float(high)
    except ValueError:
        raise FlagError(f"--grid: {name}={kind}({low},{high}): bounds must be numbers") from None
    bad = [text for text, v in ((low, lo), (high, hi)) if not math.isfinite(v)]
    if bad:  # nan or inf: no range to draw from
        raise FlagError(
            f"--grid: {name}={kind}({low},{high}): {bad[0].strip()} is not a finite number; "
            "give two finite bounds"
        )
    integer = kind in ("int", "logint")
    if integer and not (lo.is_integer() and hi.is_integer()):
        raise FlagError(f"--grid: {name}={kind}({low},{high}): bounds must be integers")
    if not lo <= hi or (kind.startswith("log") and lo <= 0):
        raise FlagError(
            f"--grid: {name}={kind}({low},{high}): need low <= high"
            + (" and low > 0 for a log range" if kind.startswith("log") else "")
        )
    if value_type(name) is int and not integer:
        raise FlagError(f"--grid: {name} is an integer flag; use int({low},{high}) or logint")
    return Range(kind, lo, hi)


def _axis_name(raw: str, where: str) -> str:
    """Our flag name for `raw` (upstream's names accepted), or `kwargs.<key>`."""
    name = raw.strip().lstrip("-")
    if name.startswith(KWARGS_PREFIX) and len(name) > len(KWARGS_PREFIX):
        return name
    name = UPSTREAM_FIELDS.get(name, name)
    if name not in FLAG_TYPES:
        raise FlagError(
            f"{where}: unknown flag {raw!r}; use a `tpu-tiles train` flag (see tpu-tiles train "
            "--help) or kwargs.<key> for one key of --model_kwargs_json"
        )
    if name in SET_BY_SWEEP:
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
