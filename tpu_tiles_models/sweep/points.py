"""Points: the training runs of a sweep, each the base flags with its grid values on top.

Without `--random` a grid's points are the product of its axes (first axis slowest). With
`--random N` they are N draws per grid, seeded by `--random_seed` (the same command gives the
same points); a `seed` list is crossed with the draws (N x seeds points), so that every draw
has its mean and std over seeds. A point's `key` names it (an md5 of every option that shapes
the model); equal points collapse into one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import random
from typing import Any, Iterator, Mapping, Sequence

from tpu_tiles_models import export, files
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.sweep.grid import Grid
from tpu_tiles_models.sweep.values import KWARGS_PREFIX
from tpu_tiles_models.train_args import ADDED_FLAGS, NOT_IN_HASH, TrainArgs

SEED_AXIS = "seed"
# Options that change where things are cached or shown, not the run (`train_args.NOT_IN_HASH`),
# and the results CSV, named after the key: left out of a point's key.
NOT_IN_KEY = frozenset({"results_csv", *NOT_IN_HASH})


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
        return " ".join(f"{k}={show(v)}" for k, v in self.values.items()) or "(base flags)"


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
    where = " ".join(f"{k}={show(v)}" for k, v in values.items())
    try:
        args = base.replace(**fields)
        if kwargs:
            from tpu_tiles_models import registry

            merged = {**registry.parse_model_kwargs(args.model_kwargs_json), **kwargs}
            args = args.replace(model_kwargs_json=json.dumps(merged))
    except FlagError as e:
        raise FlagError(f"--grid point {where}: {e}") from None
    key = point_key(args)
    results_csv = export.results_csv_path(files.expand(args.out_dir), key)
    return Point(key, dict(values), args.replace(results_csv=results_csv))


def point_key(args: TrainArgs) -> str:
    """16 hex digits naming a point: md5 of every option that shapes the model (an option in
    `ADDED_FLAGS` only when it is not at its "as before" value)."""
    kept = {
        k: v
        for k, v in args.to_dict().items()
        if k not in NOT_IN_KEY and not (k in ADDED_FLAGS and v == ADDED_FLAGS[k])
    }
    return hashlib.md5(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)
