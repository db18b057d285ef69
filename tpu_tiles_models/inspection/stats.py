"""Streaming figures of a split that never holds it: column moments, a log-spaced histogram
for values that grow with the configs, and exact summaries of per-kernel values.

Every summary is a dict with the same keys (`distribution`): `count`, `mean`, `std`
(population), `min`, `p1`, `p10`, `p25`, `p50`, `p75`, `p90`, `p99`, `max`.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

QUANTILES = {"min": 0.0, **{f"p{q}": q / 100 for q in (1, 10, 25, 50, 75, 90, 99)}, "max": 1.0}
# Bins of the histograms over all configs: 1e-6 .. 1e6, 1,000 per decade (0.23% wide).
_LOG10_LO, _LOG10_HI, _PER_DECADE = -6, 6, 1000
COARSE_PER_DECADE = 20  # the histogram kept in a summary (and drawn)


class Moments:
    """Streaming count, mean, variance (Chan et al.'s pairwise merge), min and max of `[d]`
    columns (or of scalars, with `width` None)."""

    def __init__(self, width: int | None = None) -> None:
        shape = () if width is None else (width,)
        self.n = 0
        self.mean = np.zeros(shape)
        self.m2 = np.zeros(shape)
        self.lo = np.full(shape, np.inf)
        self.hi = np.full(shape, -np.inf)

    def add(self, x: np.ndarray) -> None:
        """Adds rows `x`, `[k, d]` (or `[k]`)."""
        x = np.asarray(x, np.float64)
        k = len(x)
        if not k:
            return
        mean = x.mean(axis=0)
        m2 = np.square(x - mean).sum(axis=0)
        n = self.n + k
        delta = mean - self.mean
        self.mean = self.mean + delta * (k / n)
        self.m2 = self.m2 + m2 + np.square(delta) * (self.n * k / n)
        self.n = n
        self.lo = np.minimum(self.lo, x.min(axis=0))
        self.hi = np.maximum(self.hi, x.max(axis=0))

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation (numpy's default, ddof 0)."""
        return np.sqrt(self.m2 / max(self.n, 1))


class Columns(Moments):
    """`Moments` of feature columns `[d]`, also counting the rows at each column's min and
    max: a column whose every row is at one or the other takes only two values."""

    def __init__(self, width: int) -> None:
        super().__init__(width)
        self.at_lo = np.zeros(width, np.int64)
        self.at_hi = np.zeros(width, np.int64)

    def add(self, x: np.ndarray) -> None:
        """Adds rows `x` `[k, d]`."""
        x = np.asarray(x, np.float64)
        if not len(x):
            return
        lo, hi = x.min(axis=0), x.max(axis=0)
        at_lo, at_hi = (x == lo).sum(axis=0), (x == hi).sum(axis=0)
        self.at_lo = np.where(lo < self.lo, at_lo, self.at_lo + np.where(lo == self.lo, at_lo, 0))
        self.at_hi = np.where(hi > self.hi, at_hi, self.at_hi + np.where(hi == self.hi, at_hi, 0))
        super().add(x)

    def summary(self, tail_sigmas: float) -> dict[str, Any]:
        """`rows`, `columns`; the `constant`, `two_valued` and `heavy_tailed` column indices
        (heavy-tailed: more than two values and an extreme more than `tail_sigmas` stds from
        the mean); per column `min`, `max`, `mean`, `std` and `tail_sigmas` (the farther
        extreme's distance from the mean in stds, None when constant)."""
        width = len(self.mean)
        if not self.n:
            return dict(rows=0, columns=width, constant=[], two_valued=[], heavy_tailed=[])
        std = self.std
        constant = (self.lo == self.hi) | (std == 0)
        two_valued = ~constant & (self.at_lo + self.at_hi == self.n)
        with np.errstate(divide="ignore", invalid="ignore"):
            tail = np.where(
                constant, np.nan, np.maximum(self.hi - self.mean, self.mean - self.lo) / std
            )
        heavy = ~constant & ~two_valued & (np.nan_to_num(tail) > tail_sigmas)
        return {
            "rows": self.n,
            "columns": width,
            "constant": np.flatnonzero(constant).tolist(),
            "two_valued": np.flatnonzero(two_valued).tolist(),
            "heavy_tailed": np.flatnonzero(heavy).tolist(),
            "min": self.lo.tolist(),
            "max": self.hi.tolist(),
            "mean": self.mean.tolist(),
            "std": std.tolist(),
            "tail_sigmas": [None if np.isnan(t) else float(t) for t in tail],
        }


class LogHistogram:
    """Streaming distribution of values >= 0 whose count grows with the configs: exact count,
    mean, std, min and max, percentiles from 1,000 log-spaced bins per decade."""

    _BINS = (_LOG10_HI - _LOG10_LO) * _PER_DECADE

    def __init__(self) -> None:
        self.moments = Moments()
        # [under (zeros included), the bins, over]
        self.counts = np.zeros(self._BINS + 2, np.int64)

    def add(self, x: np.ndarray) -> None:
        """Adds values `x` `[k]`, all >= 0."""
        x = np.asarray(x, np.float64)
        if not len(x):
            return
        self.moments.add(x)
        with np.errstate(divide="ignore"):
            pos = np.floor((np.log10(x) - _LOG10_LO) * _PER_DECADE)
        index = np.clip(pos, -1, self._BINS).astype(np.intp) + 1
        self.counts += np.bincount(index, minlength=self.counts.size)

    def quantile(self, q: float) -> float:
        """The `q` quantile (numpy's linear rule, within one bin of it); exact at 0 and 1."""
        m = self.moments
        if q <= 0 or q >= 1:
            return float(m.lo if q <= 0 else m.hi)
        rank = q * (m.n - 1)
        cum = np.cumsum(self.counts)
        b = int(np.searchsorted(cum, rank, side="right"))
        if b == 0 or b == self.counts.size - 1:  # below or above the bins' range
            return float(m.lo if b == 0 else m.hi)
        inside = (rank - cum[b - 1] + 0.5) / self.counts[b]
        value = 10.0 ** (_LOG10_LO + (b - 1 + inside) / _PER_DECADE)
        return float(min(max(value, m.lo), m.hi))

    def summary(self) -> dict[str, Any]:
        """`distribution`'s keys, and `histogram`: 20 bins per decade over the values' span."""
        m = self.moments
        if not m.n:
            return {**empty_distribution(), "histogram": None}
        out = {"count": m.n, "mean": float(m.mean), "std": float(m.std)}
        out.update({name: self.quantile(q) for name, q in QUANTILES.items()})
        group = _PER_DECADE // COARSE_PER_DECADE
        coarse = self.counts[1:-1].reshape(-1, group).sum(axis=1)
        used = np.flatnonzero(coarse)
        lo, hi = (int(used[0]), int(used[-1]) + 1) if len(used) else (0, 0)
        out["histogram"] = {
            "log10_edges": [round(_LOG10_LO + i / COARSE_PER_DECADE, 4) for i in range(lo, hi + 1)],
            "counts": [int(c) for c in coarse[lo:hi]],
            "under": int(self.counts[0]),  # below 1e-6, zeros included
            "over": int(self.counts[-1]),  # 1e6 or more
        }
        return out


def empty_distribution() -> dict[str, Any]:
    return {"count": 0, "mean": None, "std": None, **dict.fromkeys(QUANTILES)}


def distribution(values: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """`{"count", "mean", "std", "min", "p1", ..., "p99", "max"}` of `values`, exact (numpy's
    linear percentiles, population std); None for each figure when empty."""
    x = np.asarray(values, np.float64)
    if not len(x):
        return empty_distribution()
    q = np.quantile(x, list(QUANTILES.values()))
    out = {"count": int(len(x)), "mean": float(x.mean()), "std": float(x.std())}
    out.update({name: float(v) for name, v in zip(QUANTILES, q)})
    return out


def binned(values: Sequence[int] | np.ndarray, lows: Sequence[int]) -> list[dict[str, Any]]:
    """`[{"lo", "hi", "kernels"}]`: how many `values` fall in each bin `lo..hi` (inclusive;
    the last bin's `hi` is None: no upper bound). `lows` are the bins' lower bounds."""
    x = np.asarray(values, np.int64)
    out = []
    for lo, nxt in itertools.zip_longest(lows, lows[1:]):
        inside = (x >= lo) if nxt is None else (x >= lo) & (x < nxt)
        hi = None if nxt is None else int(nxt) - 1
        out.append({"lo": int(lo), "hi": hi, "kernels": int(inside.sum())})
    return out


def log_bins(values: Sequence[float]) -> dict[str, Any] | None:
    """`LogHistogram.summary`'s `histogram` of per-kernel values >= 1 (20 bins per decade
    from 1); None when empty."""
    x = np.log10(np.asarray(values, np.float64))
    if not len(x):
        return None
    top = max(1, int(np.ceil(x.max() * COARSE_PER_DECADE)))
    edges = np.arange(top + 1) / COARSE_PER_DECADE
    counts, _ = np.histogram(np.clip(x, 0, edges[-1]), bins=edges)
    return dict(log10_edges=edges.round(4).tolist(), counts=counts.tolist(), under=0, over=0)


def share(kernels: int, total: int) -> dict[str, Any]:
    """`{"kernels", "share"}`: a count of kernels and its share of `total` (None when 0)."""
    return {"kernels": int(kernels), "share": kernels / total if total else None}
