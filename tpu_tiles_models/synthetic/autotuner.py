"""One kernel's autotuning log, as XLA's autotuner made the real collection's, for every
family: from a kernel's tile search space (`Space`), `tune` times as many tiles as the space
warrants, only tiles that compile, row 0 the compiler's default (`compiler_default`), every
row's normaliser the default measured again, with noise and re-measured rows. What it is
calibrated to: docs/synthetic.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MAX_CONFIGS = 10_000  # the most configs of one real kernel
DUPLICATE_RATE = 0.02  # share of rows that re-measure another row
# Measurement noise: lognormal sigma, per kernel about NOISE (0.03% to 2%), so two runs of
# one tile differ by 0.03% to about 4% as in the real fixture.
NOISE = 0.004
# Search space -> timed tiles: about COUNT_SCALE * grid**COUNT_POWER (lognormal spread),
# saturating towards MAX_CONFIGS. A flat power keeps huge convolution grids from piling up at
# the 10,000 ceiling (real: 2.1% of valid kernels above 9,000 configs).
COUNT_SCALE = 400.0
COUNT_POWER = 0.35
COUNT_SIGMA = 0.3
# The real collection holds few kernels with a tiny search space (84 of 5,709 train kernels
# have fewer than 10 configs): a kernel whose grid is smaller than SMALL_GRID is kept with
# probability SMALL_KEPT, else the family draws another.
SMALL_GRID = 10
SMALL_KEPT = 0.1
# The compiler's default must fit this share of the scratchpad.
COMPILER_VMEM_SHARE = 1.0
SWEEPS = 3  # passes over the knobs of the compiler's greedy search


@dataclass(frozen=True)
class Space:
    """A kernel's tile search space and how its points cost."""

    choices: Sequence[np.ndarray]  # one array of option values per knob (output bounds first)
    rows: Callable[[np.ndarray], np.ndarray]  # `[c, knobs]` option values -> `[c, 24]` configs
    # `[c, 24]` configs -> (`[c]` noise-free runtime in ns, `[c]` working set in bytes)
    cost: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    vmem: float  # scratchpad bytes; a tile with a larger working set does not compile
    start: np.ndarray  # `[knobs]` option values the compiler's search starts from
    # `[c, knobs]` -> `[c]` bool: the points the autotuner tries at all (all when None)
    tried: Callable[[np.ndarray], np.ndarray] | None = None
    # the compiler's own estimate of `[c, 24]` configs (`[c]` ns); `cost`'s runtime when None
    compiler_cost: Callable[[np.ndarray], np.ndarray] | None = None

    def tries(self, points: np.ndarray) -> np.ndarray:
        """`[c]` bool: which of `[c, knobs]` points the autotuner tries."""
        return np.ones(len(points), bool) if self.tried is None else self.tried(points)

    @property
    def size(self) -> int:
        """Points in the grid."""
        return math.prod(len(c) for c in self.choices)

    def tried_size(self) -> int:
        """About how many points of the grid the autotuner tries (all of a small grid
        counted, a large one estimated on 4,096 evenly spaced points)."""
        total = self.size
        flat = np.unique(np.linspace(0, total - 1, min(total, 4096)).astype(np.int64))
        share = float(np.mean(self.tries(_points(self, flat))))
        return int(round(share * total))


def explored_count(grid: int, rng: np.random.Generator) -> int:
    """How many tiles the autotuner times for a search space of `grid` points: the whole of a
    small one, a shrinking share of a large one (see `COUNT_SCALE`); at least 2."""
    raw = COUNT_SCALE * grid**COUNT_POWER * math.exp(COUNT_SIGMA * rng.standard_normal())
    count = MAX_CONFIGS * -math.expm1(-raw / MAX_CONFIGS)
    return int(np.clip(round(count), 2, max(min(grid, MAX_CONFIGS), 2)))


MAX_DRAWS = 20  # kernels drawn for one place in the collection before the last is kept


def draw_kernel(
    draw: Callable[[], tuple[dict[str, np.ndarray], Space]],
    rng: np.random.Generator,
    *,
    max_configs: int | None,
    min_configs: int,
    labelled: bool,
) -> dict[str, np.ndarray]:
    """One kernel of the collection with its log, its six npz arrays: `draw()` makes a kernel
    (its graph arrays and search space) from `rng`, again while the search space is tiny or
    almost nothing in it compiles (see `SMALL_GRID`), at most `MAX_DRAWS` times."""
    for attempt in range(MAX_DRAWS):
        graph, space = draw()
        last = attempt == MAX_DRAWS - 1
        if not last and not (space.tried_size() >= SMALL_GRID or rng.random() < SMALL_KEPT):
            continue
        log = tune(
            space,
            rng,
            max_configs=max_configs,
            min_configs=min_configs,
            labelled=labelled,
            keep=last,
        )
        if log is not None:
            return {**graph, **log}
    raise AssertionError("unreachable: the last draw is always kept")


def _points(space: Space, flat: np.ndarray) -> np.ndarray:
    """Flat grid indices -> `[c, knobs]` option values."""
    idx = np.unravel_index(flat, tuple(len(c) for c in space.choices))
    return np.stack([np.asarray(c)[i] for c, i in zip(space.choices, idx)], axis=1)


def compiler_default(space: Space, fallback: np.ndarray | None = None) -> np.ndarray:
    """The compiler's default tile: `[knobs]` option values.

    A greedy search on the compiler's estimate from two starts, `space.start` and the
    largest option of every knob, each shrunk one option at a time on its largest knob until
    its working set fits `COMPILER_VMEM_SHARE` of the scratchpad: each knob in turn is set to
    the option the estimate finds fastest with the others held, `SWEEPS` times over, among
    the options that fit that share. The faster of the two results is the default; when
    neither start leads to a tile that fits, the search starts from the fastest of the
    `fallback` points `[c, knobs]` (the tiles the autotuner found to compile).
    """
    limit = COMPILER_VMEM_SHARE * space.vmem
    largest = np.array([np.max(c) for c in space.choices], np.float64)
    found = [
        _greedy(space, _fitting_start(space, start, limit), limit)
        for start in (space.start, largest)
    ]
    point, time = min(found, key=lambda point_time: point_time[1])
    if np.isfinite(time) or fallback is None or not len(fallback):
        return point
    # Neither start led to a tile that fits: from the fastest known tile that does.
    runtime = _estimate(space, fallback, limit)
    if not np.isfinite(runtime).any():
        return point
    return _greedy(space, fallback[int(np.argmin(runtime))], limit)[0]


def _estimate(space: Space, points: np.ndarray, limit: float) -> np.ndarray:
    """The compiler's estimate of `[c, knobs]` points: `[c]` ns, inf where the working set
    does not fit `limit`."""
    cfg = space.rows(points)
    runtime, ws = space.cost(cfg)
    if space.compiler_cost is not None:
        runtime = space.compiler_cost(cfg)
    return np.where(ws <= limit, runtime, np.inf)


def _greedy(space: Space, point: np.ndarray, limit: float) -> tuple[np.ndarray, float]:
    """Coordinate descent on the compiler's estimate from `point`: (the point, its time)."""
    best = np.inf
    for _ in range(SWEEPS):
        for knob, options in enumerate(space.choices):
            trial = np.repeat(point[None, :], len(options), axis=0)
            trial[:, knob] = options
            trial = trial[space.tries(trial)]
            if not len(trial):
                continue
            runtime = _estimate(space, trial, limit)
            if np.isfinite(runtime).any():
                point, best = trial[int(np.argmin(runtime))], float(runtime.min())
    return point, best


def _fitting_start(space: Space, start: np.ndarray, limit: float) -> np.ndarray:
    """`start`, its largest knob stepped down one option at a time until the working set
    fits `limit` (or every knob is at its smallest option)."""
    index = np.array(
        [int(np.argmin(np.abs(np.asarray(c) - v))) for c, v in zip(space.choices, start)]
    )
    while True:
        point = np.array([c[i] for c, i in zip(space.choices, index)], np.float64)
        fits = space.cost(space.rows(point[None, :]))[1][0] <= limit
        if (fits and space.tries(point[None, :])[0]) or not index.any():
            return point
        value = [c[i] if i else -1 for c, i in zip(space.choices, index)]
        index[int(np.argmax(value))] -= 1


def tune(
    space: Space,
    rng: np.random.Generator,
    *,
    max_configs: int | None,
    min_configs: int,
    labelled: bool,
    keep: bool = False,
) -> dict[str, np.ndarray] | None:
    """One kernel's log: `config_feat` `[c, 24]` float32, `config_runtime` (zeros unless
    `labelled`) and `config_runtime_normalizers` `[c]` int64; row 0 is the default tile;
    `max_configs` None is `MAX_CONFIGS`; re-measured copies fill up to `min_configs` rows.

    None (the family draws another kernel) when fewer than `SMALL_GRID` tiles compile, unless
    `keep` or the kernel is kept anyway (odds `SMALL_KEPT`): kernels where almost nothing fits
    are rare in the real collection.
    """
    cap = MAX_CONFIGS if max_configs is None else max_configs
    want = max(min(explored_count(space.tried_size(), rng), cap), min_configs)
    n_dup = int(rng.binomial(want - 1, DUPLICATE_RATE))
    points, costs = _timed_tiles(space, want - n_dup, rng)
    default = compiler_default(space, fallback=points)
    other = ~np.all(points == default[None, :], axis=1)
    room = max(want - 1 - n_dup, 0)  # rows beside the default and the copies
    points, costs = points[other][:room], costs[other][:room]
    if not keep and len(points) + 1 < min(SMALL_GRID, want) and rng.random() >= SMALL_KEPT:
        return None
    rows = space.rows(np.concatenate([default[None, :], points]))
    runtime = np.concatenate([space.cost(rows[:1])[0], costs])
    # Re-measured copies of random rows (the default's too) anywhere but row 0; they also
    # fill up a search space with fewer compilable tiles than `min_configs`.
    total = max(min(want, len(rows) + n_dup), min_configs)
    copies = rng.integers(len(rows), size=max(total - len(rows), 0))
    tail = np.concatenate([np.arange(1, len(rows)), copies])
    order = np.concatenate([[0], tail[rng.permutation(len(tail))]]).astype(np.int64)
    sigma = float(np.clip(NOISE * math.exp(0.9 * rng.standard_normal()), 3e-4, 0.02))
    measured = runtime[order] * np.exp(sigma * rng.standard_normal(len(order)))
    normalizer = runtime[0] * np.exp(sigma * rng.standard_normal(len(order)))
    return {
        "config_feat": rows[order].astype(np.float32),
        "config_runtime": np.maximum(np.round(measured), 1).astype(np.int64) * int(labelled),
        "config_runtime_normalizers": np.maximum(np.round(normalizer), 1).astype(np.int64),
    }


def _timed_tiles(
    space: Space, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Up to `count` distinct compilable grid points, in the random order the autotuner drew
    them (`[c, knobs]`), and their noise-free runtimes `[c]`."""
    total = space.size
    kept, costs = [np.zeros((0, len(space.choices)))], [np.zeros(0)]
    if count <= 0:
        return kept[0], costs[0]
    draw = min(total, 20 * count + 1000)  # distinct flat grid indices, in random order
    if total <= 3 * draw:
        order = rng.permutation(total)[:draw]
    else:
        draws = rng.integers(total, size=draw + draw // 4 + 16)
        _, first = np.unique(draws, return_index=True)
        order = draws[np.sort(first)][:draw]
    found, pos, rate = 0, 0, 1.0
    while found < count and pos < len(order):
        step = int(min(len(order) - pos, math.ceil((count - found) / rate * 1.15) + 8))
        points = _points(space, order[pos : pos + step])
        pos += step
        points = points[space.tries(points)]
        runtime, ws = space.cost(space.rows(points))
        ok = ws <= space.vmem
        kept.append(points[ok])
        costs.append(runtime[ok])
        found += int(ok.sum())
        rate = max(found / pos, 0.02)
    return np.concatenate(kept)[:count], np.concatenate(costs)[:count]
