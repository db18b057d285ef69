"""The grid syntax: `--grid` (inline text or a YAML/JSON file) into axes, and axes into points,
as docs/sweeps.md ("The grid") describes. No TensorFlow here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import random
import re
from typing import Any, Iterator, Mapping, Sequence

from tpu_tiles_models import files, run_file
from tpu_tiles_models.errors import FlagError, one_line
from tpu_tiles_models.train_args import (
    ADDED_FLAGS,
    FLAG_TYPES,
    NOT_IN_HASH,
    UPSTREAM_FIELDS,
    TrainArgs,
)

KWARGS = "kwargs."
RANGE_KINDS = ("uniform", "loguniform", "int", "logint")
SEED_AXIS = "seed"
SIGNIFICANT = 4  # digits kept of a float drawn by --random
SET_BY_SWEEP = ("out_dir", "results_csv", "tensorboard", "no_progress")
# Not in a point's key: where things are cached or shown, and the results CSV named after it.
NOT_IN_KEY = frozenset({"results_csv", *NOT_IN_HASH})
EXAMPLE = "e.g. --grid 'lr=1e-3,2e-3 seed=0,1'"
# The most points a sweep expands (each is a training run): more is a mistake, refused before
# any point is made (a million took 84 s, then all of memory).
MAX_POINTS = 10_000


@dataclasses.dataclass(frozen=True)
class Range:
    """A numeric range that `--random` samples: `kind(low,high)`, bounds inclusive."""

    kind: str
    low: float
    high: float

    def sample(self, rng: random.Random) -> float | int:
        if self.kind == "int":
            return rng.randint(int(self.low), int(self.high))
        if self.kind == "uniform":
            value = rng.uniform(self.low, self.high)
        else:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        if self.kind == "logint":
            return min(max(round(value), int(self.low)), int(self.high))
        return float(f"{value:.{SIGNIFICANT}g}")


@dataclasses.dataclass(frozen=True)
class Axis:
    """One swept option: a list of values, or a range for `--random`."""

    name: str
    values: tuple[Any, ...] = ()
    range: Range | None = None


@dataclasses.dataclass(frozen=True)
class Grid:
    axes: tuple[Axis, ...]


@dataclasses.dataclass(frozen=True)
class Point:
    """One training run of the sweep: its axis values and its complete `TrainArgs`."""

    key: str
    values: dict[str, Any]
    args: TrainArgs

    @property
    def hash(self) -> str:
        return self.args.hash()

    def describe(self) -> str:
        """`model=MLP lr=0.001 seed=0`."""
        return " ".join(f"{k}={show(v)}" for k, v in self.values.items()) or "(base flags)"


def parse_grid(text: str) -> list[Grid]:
    """`--grid`: a YAML/JSON file (JSON if it ends in .json; local or remote) or inline text."""
    if not text.strip():
        raise FlagError(
            f"--grid is empty; pass a .yaml/.json grid file or an inline spec, {EXAMPLE}"
        )
    if "=" not in text or files.exists(text.strip()):  # every inline axis has a "="
        return _load_file(text.strip())
    axes = []
    for token in _split(text, " \t\r\n", "--grid"):
        name, _, rest = token.partition("=")
        if not rest:
            raise FlagError(f"--grid: {token!r} is not name=values; {EXAMPLE}")
        axes.append(_axis(_axis_name(name, "--grid"), rest, "--grid", inline=True))
    return [_checked(axes, "--grid")]


def _load_file(path: str) -> list[Grid]:
    where = f"--grid {path}"
    try:
        data = files.read_bytes(path)
    except OSError as err:  # what is there instead, as every input names it (`not_a_file`)
        kind = "" if files.is_remote(path) else files.not_a_file(path)
        what = {"not found": "no such file", "": f"unreadable ({err.strerror or err})"}.get(
            kind, f"{kind}, not a grid file"
        )
        raise FlagError(f"{where}: {what}; pass a .yaml/.json grid or an inline spec") from None
    try:
        if path.lower().endswith(".json"):
            content = json.loads(data)
        else:
            import yaml

            content = yaml.safe_load(data)
    except Exception as e:  # yaml and json raise several types; all mean "malformed"
        raise FlagError(f"{where}: not valid YAML/JSON ({one_line(e)})") from None
    mappings = content if isinstance(content, list) else [content]
    if not mappings or not all(isinstance(m, dict) and m for m in mappings):
        raise FlagError(f"{where}: expected a mapping of flag: [values] (or a list of mappings)")
    return [
        _checked([_axis(_axis_name(str(k), where), v, where) for k, v in m.items()], where)
        for m in mappings
    ]


def _axis(name: str, value: Any, where: str, *, inline: bool = False) -> Axis:
    """An axis from a file's value (a scalar, a list or a range) or inline text."""
    ranged = _range_axis(name, value, where) if isinstance(value, str) else None
    if ranged:
        return ranged
    if inline:
        pieces = [p.strip() for p in _split(value, ",", where, keep_empty=True)]
        if not all(pieces):
            raise FlagError(f"{where}: {name}={value}: an empty value; remove the extra comma")
        value = [_unquote(name, p) for p in pieces]
    values = value if isinstance(value, list) else [value]
    if not values:
        raise FlagError(f"{where}: {name} has no values")
    return Axis(name, tuple(_typed(name, v) for v in values))


def _range_axis(name: str, text: str, where: str) -> Axis | None:
    """`text` as a range of numeric flag `name`, such as `loguniform(1e-4,1e-2)`; None if it
    does not start like one."""
    if not (name.startswith(KWARGS) or FLAG_TYPES[name] in (int, float)):
        return None
    kinds = "|".join(RANGE_KINDS)
    m = re.fullmatch(rf"\s*({kinds})\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)\s*", text)
    if m:
        return Axis(name, range=_range(name, *m.groups()))
    kind = re.match(rf"\s*({kinds})\s*\(", text)
    if kind:
        example = "1,8" if kind.group(1).endswith("int") else "1e-4,1e-2"
        raise FlagError(
            f"{where}: {name}={text}: a range takes two bounds, low and high, e.g. "
            f"{kind.group(1)}({example})"
        )
    return None


def _range(name: str, kind: str, low: str, high: str) -> Range:
    where = f"--grid: {name}={kind}({low},{high})"
    try:
        lo, hi = float(low), float(high)
    except ValueError:
        raise FlagError(f"{where}: bounds must be numbers") from None
    bad = [text for text, v in ((low, lo), (high, hi)) if not math.isfinite(v)]
    if bad:  # nan or inf: no range to draw from
        raise FlagError(f"{where}: {bad[0].strip()} is not a finite number; give two finite bounds")
    integer = kind.endswith("int")
    if integer and not (lo.is_integer() and hi.is_integer()):
        raise FlagError(f"{where}: bounds must be integers")
    if not lo <= hi or (kind.startswith("log") and lo <= 0):
        log = " and low > 0 for a log range" if kind.startswith("log") else ""
        raise FlagError(f"{where}: need low <= high{log}")
    if FLAG_TYPES.get(name) is int and not integer:
        raise FlagError(f"--grid: {name} is an integer flag; use int({low},{high}) or logint")
    return Range(kind, lo, hi)


def _axis_name(raw: str, where: str) -> str:
    """Our flag name for `raw` (upstream's names accepted), or `kwargs.<key>`."""
    name = raw.strip().lstrip("-")
    if name.startswith(KWARGS) and len(name) > len(KWARGS):
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


def _checked(axes: list[Axis], where: str) -> Grid:
    if not axes:
        raise FlagError(f"{where}: no axes; {EXAMPLE}")
    names = [a.name for a in axes]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise FlagError(f"{where}: {', '.join(twice)} given twice; list all values in one axis")
    return Grid(tuple(axes))


def _split(text: str, seps: str, where: str, *, keep_empty: bool = False) -> list[str]:
    """`text` split at `seps` outside quotes and brackets."""
    pieces, current, depth, quote = [], [], 0, ""
    chars = iter(text)
    for ch in chars:
        if quote:
            current.append(ch)
            if ch == "\\" and quote == '"':
                current.append(next(chars, ""))
            elif ch == quote:
                quote = ""
        elif ch in seps and depth == 0:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
            if ch in "'\"":
                quote = ch
            depth += (ch in "([{") - (ch in ")]}")
            if depth < 0:
                break
    if quote or depth:
        raise FlagError(f"{where}: unbalanced quotes or brackets in {text!r}")
    pieces.append("".join(current))
    return pieces if keep_empty else [p for p in pieces if p.strip()]


def _unquote(name: str, piece: str) -> str:
    """One pair of outer quotes off ('...' always; "..." except for kwargs, where it is JSON)."""
    quotes = "'" if name.startswith(KWARGS) else "'\""
    quoted = len(piece) >= 2 and piece[0] == piece[-1] and piece[0] in quotes
    return piece[1:-1] if quoted else piece


def _typed(name: str, value: Any) -> Any:
    """`value` (inline text or a YAML/JSON scalar) as flag `name`'s type; kwargs: any JSON."""
    if name.startswith(KWARGS):
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return json.loads(value)
        return value
    kind = FLAG_TYPES[name]
    if name == "model_kwargs_json" and isinstance(value, dict):
        return json.dumps(value)
    with contextlib.suppress(TypeError, ValueError):
        if kind is bool:
            text = str(value).strip().lower()
            if isinstance(value, bool) or text in ("true", "1", "yes", "false", "0", "no"):
                return value if isinstance(value, bool) else text in ("true", "1", "yes")
        elif isinstance(value, bool):
            pass  # not a number, not text
        elif kind is int and not (isinstance(value, float) and not value.is_integer()):
            return int(value)
        elif kind is float:
            return float(value)
        elif kind is str and isinstance(value, str):
            return value
    raise FlagError(f"--grid: {name}={value!r}: --{name} takes {kind.__name__}")


def show(value: Any) -> str:
    """A value as the leaderboard shows it."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def expand(
    grids: Sequence[Grid], base: TrainArgs, *, random_points: int = 0, random_seed: int = 0
) -> list[Point]:
    """The points of `grids` over `base`, without duplicates, in a stable order; more than
    `MAX_POINTS` (counted before any is made) raise `FlagError`."""
    counts = [_count(grid, random_points) for grid in grids]
    total = sum(n for n, _ in counts)
    if total > MAX_POINTS:
        how = " + ".join(f"({shown})" for _, shown in counts)
        fix = "lower --random" if random_points else "draw some of them with --random N"
        raise FlagError(
            f"--grid: {total:,} points, {how}, past the {MAX_POINTS:,} a sweep runs; {fix}"
        )
    points: dict[str, Point] = {}
    for index, grid in enumerate(grids):
        if random_points:
            rng = random.Random(f"{random_seed}:{index}")
            assignments = _draws(grid, random_points, rng)
        else:
            ranged = [a.name for a in grid.axes if a.range]
            if ranged:
                raise FlagError(
                    f"--grid: {', '.join(ranged)} is a range; add --random N to sample N "
                    "points from it"
                )
            names = [a.name for a in grid.axes]
            assignments = (
                dict(zip(names, c)) for c in itertools.product(*(a.values for a in grid.axes))
            )
        for values in assignments:
            point = make_point(base, values)
            points.setdefault(point.key, point)
    return list(points.values())


def _seed_axis(grid: Grid) -> Axis | None:
    """The axis of seeds that `--random` crosses each draw with, if there is one."""
    return next((a for a in grid.axes if a.name == SEED_AXIS and not a.range), None)


def _count(grid: Grid, random_points: int) -> tuple[int, str]:
    """How many points `grid` makes (before duplicates go), and how, for a message:
    `lr 10 x seed 3`, or `--random 5 x 3 seeds`."""
    if random_points:
        seeds = len(_seed_axis(grid).values) if _seed_axis(grid) else 1
        return random_points * seeds, f"--random {random_points:,} x {seeds} seeds"
    sizes = [len(a.values) for a in grid.axes]
    return math.prod(sizes), " x ".join(f"{a.name} {n:,}" for a, n in zip(grid.axes, sizes))


def _draws(grid: Grid, n: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    """`n` draws of the non-seed axes, each crossed with the seed list if there is one."""
    seeds = _seed_axis(grid)
    for _ in range(n):
        drawn = {
            a.name: a.range.sample(rng) if a.range else rng.choice(a.values)
            for a in grid.axes
            if a is not seeds
        }
        for seed in seeds.values if seeds else (None,):
            values = dict(drawn, **({SEED_AXIS: seed} if seeds else {}))
            yield {a.name: values[a.name] for a in grid.axes}  # in axis order


def make_point(base: TrainArgs, values: Mapping[str, Any]) -> Point:
    """`base` with `values` applied and a `results_csv` named after the point's key."""
    fields = {k: v for k, v in values.items() if not k.startswith(KWARGS)}
    kwargs = {k[len(KWARGS) :]: v for k, v in values.items() if k.startswith(KWARGS)}
    try:
        args = base.replace(**fields)
        if kwargs:
            from tpu_tiles_models import registry

            merged = {**registry.parse_model_kwargs(args.model_kwargs_json), **kwargs}
            args = args.replace(model_kwargs_json=json.dumps(merged))
    except FlagError as e:
        where = " ".join(f"{k}={show(v)}" for k, v in values.items())
        raise FlagError(f"--grid point {where}: {e}") from None
    key = point_key(args)
    results_csv = run_file.results_csv_path(files.expand(args.out_dir), key)
    return Point(key, dict(values), args.replace(results_csv=results_csv))


# Options removed after sweeps began, at the value every point had: still in the key.
KEPT_IN_KEY = {"score_sample": 1.0, "pad_configs": False}


def point_key(args: TrainArgs) -> str:
    """16 hex digits naming a point: md5 of every option that shapes the model (one of
    `ADDED_FLAGS` only off its "as before" value; `KEPT_IN_KEY` as they were). Frozen: the
    resume needs it (a point's results CSV, in its hash, is named by it)."""
    kept = {
        k: v
        for k, v in args.to_dict().items()
        if k not in NOT_IN_KEY and not (k in ADDED_FLAGS and v == ADDED_FLAGS[k])
    }
    kept.update(KEPT_IN_KEY)
    return hashlib.md5(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]
