"""TpuGraphs tile:xla data pipeline: npz files -> validated arrays -> `tfgnn.GraphTensor`s.

One npz file holds one kernel (file stem = tile id); `kernel_files` lists, reads and validates
them. A split is read once, in parallel, into concatenated arrays plus per-kernel offsets
(`Split`), cached under `--cache_dir` (in `cache`'s format); per-kernel GraphTensors are then
built from cheap numpy slices, normalised as they are taken (so only the raw arrays are held).

The GraphTensor schema is exactly upstream's (`tpu_graphs/baselines/tiles/data.py`), so one
model runs under both pipelines:

- node set `op`: `op` [n] int32 opcode, `feats` [n, stats.node_width] float32;
- node set `config`: `feats` [c, stats.config_width] float32, `runtimes` [c] float32
  (runtime / normalizer), `normalizers` [c] float32;
- node set `g`: one node, `tile_id` [1] string;
- edge sets `feed` (op -> op; source = edge_index[:, 0], target = edge_index[:, 1]),
  `g_op` (g -> every op), `g_config` (g -> every config).

Dtypes differ slightly from upstream (which passes uint8 opcodes and float64 runtimes and
normalizers through unchanged); models cast their inputs, so both work.

The preprocessing math is upstream's: node and config features drop the columns that are
constant on train and min-max scale the rest with train's float32 min and max, computed as
`(x - min) / (max - min)` in float32 (bit-identical to upstream's TF ops); `num_ops` is 1 + the
largest opcode over all loaded splits. Unlike upstream, these statistics are a `FeatureStats`
object saved with every model, so prediction reproduces them without the train split.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import itertools
import json
import os
import warnings
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_gnn as tfgnn
import tqdm

from tpu_tiles_models import cache, files, interrupts, kernel_files, safe
from tpu_tiles_models.formats import CONFIG_FEAT_DIM, NODE_FEAT_DIM, REQUIRED_KEYS, SPLITS
from tpu_tiles_models.kernel_files import DataError, runtime_ratios, split_files, tile_id_of

# 2: the `cache` module's compressed format; 3: numbers validated in float32, known members
_CACHE_VERSION = 3
_SHOWN_NAMES = 3  # how many bad file names a skip_bad warning lists


# ---------------------------------------------------------------------------------------------
# Split: one partition in memory
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Split:
    """One partition, raw (un-normalised) arrays of its K kernels concatenated.

    Kernel i owns rows `node_offsets[i]:node_offsets[i + 1]` of `node_feat` / `node_opcode`,
    and likewise for edges and configs. `edge_index` holds kernel-local node indices.
    """

    name: str
    tile_ids: list[str]
    files: list[str]
    node_feat: np.ndarray  # [N, 140] float32
    node_opcode: np.ndarray  # [N] int32
    edge_index: np.ndarray  # [E, 2] int32, kernel-local
    config_feat: np.ndarray  # [C, 24] float32
    config_runtime: np.ndarray  # [C] float64, raw ns (zeros on test)
    config_runtime_normalizers: np.ndarray  # [C] float64
    node_offsets: np.ndarray  # [K + 1] int64
    edge_offsets: np.ndarray  # [K + 1] int64
    config_offsets: np.ndarray  # [K + 1] int64

    def __len__(self) -> int:
        return len(self.tile_ids)

    def num_configs(self, i: int) -> int:
        """Number of configs of kernel i."""
        return int(self.config_offsets[i + 1] - self.config_offsets[i])

    def config_counts(self) -> np.ndarray:
        """[K] int64: configs per kernel."""
        return np.diff(self.config_offsets)


def _concat(name: str, files: list[str], kernels: list[dict[str, np.ndarray]]) -> Split:
    """Concatenates validated per-kernel arrays into one `Split`."""

    def cat(key: str, dtype: Any, width: int | None = None) -> np.ndarray:
        parts = [k[key].reshape(-1, width) if width else k[key] for k in kernels]
        if not parts:
            return np.zeros((0, width) if width else (0,), dtype)
        return np.concatenate(parts).astype(dtype, copy=False)

    def offsets(key: str) -> np.ndarray:
        sizes = [
            len(k[key].reshape(-1, 2)) if key == "edge_index" else len(k[key]) for k in kernels
        ]
        return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)

    return Split(
        name=name,
        tile_ids=[tile_id_of(f) for f in files],
        files=list(files),
        node_feat=cat("node_feat", np.float32, NODE_FEAT_DIM),
        node_opcode=cat("node_opcode", np.int32),
        edge_index=cat("edge_index", np.int32, 2),
        config_feat=cat("config_feat", np.float32, CONFIG_FEAT_DIM),
        config_runtime=cat("config_runtime", np.float64),
        config_runtime_normalizers=cat("config_runtime_normalizers", np.float64),
        node_offsets=offsets("node_opcode"),
        edge_offsets=offsets("edge_index"),
        config_offsets=offsets("config_runtime"),
    )


_ARRAY_FIELDS = REQUIRED_KEYS + (
    "node_offsets",
    "edge_offsets",
    "config_offsets",
)


def _cache_path(cache_dir: str, split: str, paths: list[str], key_extra: dict) -> str:
    """Cache file name keyed by each file's absolute path (or URL), size and mtime, plus
    options."""
    stamp = [[files.canonical(p), *files.size_and_mtime(p)] for p in paths]
    blob = json.dumps({"v": _CACHE_VERSION, "files": stamp, **key_extra}, sort_keys=True)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:20]
    return files.join(cache_dir, f"tiles-{split}-{digest}.cache")


def _save_cache(path: str, split: Split, skipped: list[str]) -> None:
    """Writes the split atomically (see `safe.atomic_path`) in the `cache` format. The cache
    only saves time: when its disk is full or cannot be written, a one-line warning says so
    and loading goes on."""
    arrays = {f: getattr(split, f) for f in _ARRAY_FIELDS}
    try:
        with safe.atomic_path(path, flag="--cache_dir") as tmp, open(tmp, "wb") as out:
            cache.write(out, arrays, {"files": split.files, "skipped": skipped})
    except files.WriteError as err:
        warnings.warn(f"{err}; loaded without caching", stacklevel=3)


def _load_cache(path: str, name: str) -> tuple[Split, list[str]] | None:
    """The cached split and its skipped-file messages, or None if unreadable."""
    try:
        with files.open_read(path) as f:
            arrays, meta = cache.read(f)
        paths = [str(p) for p in meta["files"]]
        skipped = [str(s) for s in meta["skipped"]]
        split = Split(name=name, tile_ids=[tile_id_of(p) for p in paths], files=paths, **arrays)
    except (OSError, cache.CacheFormatError, KeyError, TypeError):
        return None  # a damaged cache is rebuilt, never trusted
    return split, skipped


def _warn_skipped(split: str, skipped: list[str]) -> None:
    if skipped:
        shown = " | ".join(skipped[:_SHOWN_NAMES])
        more = f" (and {len(skipped) - _SHOWN_NAMES} more)" if len(skipped) > _SHOWN_NAMES else ""
        warnings.warn(f"skipped {len(skipped)} bad file(s) in {split}: {shown}{more}", stacklevel=3)


def _warn_single_config(split: str, paths: list[str]) -> None:
    if split == "train" and paths:
        shown = ", ".join(tile_id_of(p) for p in paths[:_SHOWN_NAMES])
        more = f" and {len(paths) - _SHOWN_NAMES} more" if len(paths) > _SHOWN_NAMES else ""
        warnings.warn(
            f"train: left out {len(paths)} kernel(s) with a single config ({shown}{more}); "
            "a ranking needs two",
            stacklevel=3,
        )


def load_split(
    root: str | os.PathLike,
    split: str,
    *,
    min_configs: int = -1,
    cache_dir: str | os.PathLike | None = None,
    toy_data: bool = False,
    skip_bad: bool = False,
    skip_hint: str = "",
    workers: int | None = None,
    progress: bool = True,
) -> Split:
    """Reads and validates `root/split/*.npz` into one `Split`.

    Kernels with fewer than `min_configs` configs are left out (like upstream). Bad files raise
    `DataError`, or with `skip_bad` are left out with a warning giving their count and first
    names. `skip_hint` is how the calling command could leave them out (`train with
    --skip_bad`), added to the message of a bad train or valid file; '' for a command that
    cannot, so that no message offers a flag the command rejects. With `cache_dir`, the result
    is cached under a key made of every file's path, size and mtime and the options, so changed
    files are re-read and unchanged ones are not. `root` and `cache_dir` may be remote
    (`gs://...`).
    """
    paths = split_files(root, split, toy_data=toy_data)
    cache = None
    if cache_dir is not None:
        extra = {"min_configs": min_configs, "toy": toy_data, "skip_bad": skip_bad}
        cache = _cache_path(files.expand(cache_dir), split, paths, extra)
        hit = _load_cache(cache, split) if files.exists(cache) else None
        if hit is not None:
            _warn_skipped(split, hit[1])
            return hit[0]

    results: list[dict[str, np.ndarray] | None] = [None] * len(paths)
    errors: dict[int, str] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(kernel_files.read_members, p): i for i, p in enumerate(paths)}
        done = concurrent.futures.as_completed(futures)
        if progress:
            done = tqdm.tqdm(done, total=len(paths), desc=f"loading {split}", unit="file")
        try:
            for future in done:
                interrupts.check()
                i = futures[future]
                try:
                    results[i] = kernel_files.check_members(paths[i], future.result(), split)
                except DataError as err:
                    if not skip_bad:
                        # Only training may leave kernels out: every test kernel needs a row.
                        hint = "" if split == "test" or not skip_hint else f" (or {skip_hint})"
                        raise DataError(f"{err}{hint}") from None
                    errors[i] = str(err)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)  # do not read the rest first
            raise

    skipped = [errors[i] for i in sorted(errors)]
    if len(skipped) == len(paths):
        raise DataError(f"{os.path.dirname(paths[0])}: every file is bad, e.g. {skipped[0]}")
    loaded = [i for i, arrays in enumerate(results) if arrays is not None]
    # A single config cannot be ranked; upstream leaves such train kernels out too.
    fewest = max(min_configs, 2) if split == "train" else min_configs
    kept = [i for i in loaded if len(results[i]["config_runtime"]) >= fewest]
    if loaded and not kept and min_configs > 2:  # what upstream's trainer would fail on later
        most = max(len(results[i]["config_runtime"]) for i in loaded)
        raise DataError(
            f"{os.path.dirname(paths[0])}: no kernel has --configs={min_configs} configs (the "
            f"most is {most}); lower --configs, the configs sampled per kernel in training"
        )
    out = _concat(split, [paths[i] for i in kept], [results[i] for i in kept])
    _warn_skipped(split, skipped)
    _warn_single_config(split, [paths[i] for i in loaded if len(results[i]["config_runtime"]) < 2])
    if cache is not None:
        _save_cache(cache, out, skipped)
    return out


# ---------------------------------------------------------------------------------------------
# Feature statistics
# ---------------------------------------------------------------------------------------------


def _scale(x: np.ndarray, keep: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """[n, kept] float32: upstream's `(x - min) / (max - min)` on the kept columns."""
    x = np.asarray(x, dtype=np.float32)[:, keep]
    return (x - lo) / (hi - lo)


@dataclasses.dataclass
class FeatureStats:
    """Fitted preprocessing: kept columns, their train min/max, `num_ops`, and provenance.

    JSON-serialisable and saved with every exported model, so prediction reproduces the
    training-time features exactly without the train split.
    """

    node_keep: np.ndarray  # [140] bool: column not constant on train
    node_min: np.ndarray  # [node_width] float32
    node_max: np.ndarray  # [node_width] float32
    config_keep: np.ndarray  # [24] bool
    config_min: np.ndarray  # [config_width] float32
    config_max: np.ndarray  # [config_width] float32
    num_ops: int  # 1 + largest opcode over the splits seen when fitting
    train_files: list[str]  # file names (no directory) the statistics came from
    source: str = ""  # free text: where and how they were fitted

    @classmethod
    def fit(cls, train: Split, others: Sequence[Split] = (), *, source: str = "") -> FeatureStats:
        """Fits on `train` like upstream; `num_ops` also covers `others` (upstream: all splits)."""
        if len(train) == 0:
            raise DataError(f"split {train.name!r} has no kernels; cannot fit feature statistics")

        def columns(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            lo, hi = x.min(axis=0), x.max(axis=0)
            keep = lo != hi
            return keep, lo[keep].astype(np.float32), hi[keep].astype(np.float32)

        node_keep, node_min, node_max = columns(train.node_feat)
        config_keep, config_min, config_max = columns(train.config_feat)
        max_op = max(int(s.node_opcode.max()) for s in (train, *others) if len(s.node_opcode))
        return cls(
            node_keep=node_keep,
            node_min=node_min,
            node_max=node_max,
            config_keep=config_keep,
            config_min=config_min,
            config_max=config_max,
            num_ops=max_op + 1,
            train_files=[os.path.basename(f) for f in train.files],
            source=source,
        )

    @property
    def node_width(self) -> int:
        return int(self.node_keep.sum())

    @property
    def config_width(self) -> int:
        return int(self.config_keep.sum())

    def node(self, x: np.ndarray) -> np.ndarray:
        """[n, 140] raw node features -> [n, node_width] float32."""
        return _scale(x, self.node_keep, self.node_min, self.node_max)

    def config(self, x: np.ndarray) -> np.ndarray:
        """[c, 24] raw config features -> [c, config_width] float32."""
        return _scale(x, self.config_keep, self.config_min, self.config_max)

    def ops(self, opcodes: np.ndarray) -> np.ndarray:
        """[n] opcodes as int32, those >= num_ops mapped to 0 (the 'unknown' opcode).

        Only matters for statistics fitted on a subset (toy data) applied to the full set;
        an out-of-range id would otherwise index past the model's embedding table.
        """
        ops = np.asarray(opcodes, dtype=np.int32)
        return np.where(ops < self.num_ops, ops, 0).astype(np.int32)

    def same_features(self, other: FeatureStats) -> bool:
        """Whether `other` turns raw features into the same model inputs (provenance aside)."""
        a, b = self.to_json(), other.to_json()
        return all(a[k] == b[k] for k in a if k not in ("train_files", "source"))

    def fingerprint(self) -> str:
        """Hex digest of the JSON form: equal statistics, equal fingerprint."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON dict; float32 values survive the round trip exactly."""
        return {
            "format": "tpu_tiles_models.FeatureStats/1",
            "node_keep": [bool(v) for v in self.node_keep],
            "node_min": [float(v) for v in self.node_min],
            "node_max": [float(v) for v in self.node_max],
            "config_keep": [bool(v) for v in self.config_keep],
            "config_min": [float(v) for v in self.config_min],
            "config_max": [float(v) for v in self.config_max],
            "num_ops": int(self.num_ops),
            "train_files": list(self.train_files),
            "source": self.source,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FeatureStats:
        """Inverse of `to_json`; inconsistent input raises `DataError`."""
        try:
            stats = cls(
                node_keep=np.array(d["node_keep"], dtype=bool),
                node_min=np.array(d["node_min"], dtype=np.float32),
                node_max=np.array(d["node_max"], dtype=np.float32),
                config_keep=np.array(d["config_keep"], dtype=bool),
                config_min=np.array(d["config_min"], dtype=np.float32),
                config_max=np.array(d["config_max"], dtype=np.float32),
                num_ops=int(d["num_ops"]),
                train_files=[str(f) for f in d.get("train_files", [])],
                source=str(d.get("source", "")),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(f"feature statistics are malformed ({err!r})") from None
        ok = (
            stats.node_keep.shape == (NODE_FEAT_DIM,)
            and stats.config_keep.shape == (CONFIG_FEAT_DIM,)
            and stats.node_min.shape == stats.node_max.shape == (stats.node_width,)
            and stats.config_min.shape == stats.config_max.shape == (stats.config_width,)
            and stats.num_ops >= 1
        )
        if not ok:
            raise DataError("feature statistics are inconsistent (keep masks vs min/max lengths)")
        bounds = (stats.node_min, stats.node_max, stats.config_min, stats.config_max)
        if not all(np.isfinite(b).all() for b in bounds):  # every feature would be NaN
            raise DataError("feature statistics hold NaN or infinite minima or maxima")
        return stats

    def save(self, path: str | os.PathLike) -> None:
        """Writes JSON atomically (see `safe.atomic_path`)."""
        with safe.atomic_path(path) as tmp:
            tmp.write_text(json.dumps(self.to_json(), allow_nan=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> FeatureStats:
        """Reads a file written by `save`; problems raise `DataError` naming the file."""
        path = os.fspath(path)
        try:
            return cls.from_json(json.loads(files.read_bytes(path)))
        except (OSError, json.JSONDecodeError, DataError) as err:
            raise DataError(
                f"{path}: cannot read feature statistics ({err}); re-export the model"
            ) from None


# ---------------------------------------------------------------------------------------------
# Whole data set
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Dataset:
    """The loaded splits (None when not requested) and the statistics to apply to them."""

    train: Split | None
    valid: Split | None
    test: Split | None
    stats: FeatureStats

    @property
    def num_ops(self) -> int:
        return self.stats.num_ops


def load_dataset(
    root: str | os.PathLike,
    *,
    min_train_configs: int = -1,
    cache_dir: str | os.PathLike | None = None,
    toy_data: bool = False,
    splits: Sequence[str] = SPLITS,
    stats: FeatureStats | None = None,
    skip_bad: bool = False,
    skip_hint: str = "",
    progress: bool = True,
) -> Dataset:
    """Loads `splits` of `root`; fits `FeatureStats` on train unless `stats` is given.
    `skip_bad` and `skip_hint`: as `load_split`'s.

    `min_train_configs` filters train only. Upstream also drops valid/test kernels with fewer
    than 2 configs; we keep them so every test kernel gets a prediction (real data has none).
    """
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise DataError(f"unknown split(s) {unknown}; use some of {', '.join(SPLITS)}")
    if stats is None and "train" not in splits:
        raise DataError("no feature statistics: load the train split or pass the model's stats")
    loaded: dict[str, Split | None] = {name: None for name in SPLITS}
    for name in splits:
        loaded[name] = load_split(
            root,
            name,
            min_configs=min_train_configs if name == "train" else -1,
            cache_dir=cache_dir,
            toy_data=toy_data,
            skip_bad=skip_bad,
            skip_hint=skip_hint,
            progress=progress,
        )
    if stats is None:
        train = loaded["train"]
        others = [s for n, s in loaded.items() if n != "train" and s is not None]
        where = files.canonical(root)
        stats = FeatureStats.fit(train, others, source=f"{where} toy_data={toy_data}")
    else:
        for split in loaded.values():
            _warn_unknown_ops(split, stats)
    return Dataset(stats=stats, **loaded)


def _warn_unknown_ops(split: Split | None, stats: FeatureStats) -> None:
    if split is None or not len(split.node_opcode):
        return
    unknown = int((split.node_opcode >= stats.num_ops).sum())
    if unknown:
        warnings.warn(
            f"{split.name}: {unknown} node(s) have opcodes >= num_ops={stats.num_ops} of the "
            "model's statistics; they are fed as opcode 0 (unknown)",
            stacklevel=3,
        )


# ---------------------------------------------------------------------------------------------
# GraphTensors
# ---------------------------------------------------------------------------------------------


def _pick_configs(
    c0: int,
    c1: int,
    num_configs: int,
    rng: np.random.Generator,
    spread: int | None = None,
    fill: bool = False,
    default_first: bool = False,
) -> np.ndarray:
    """Row indices of one kernel's configs: all in file order (-1), else `num_configs` drawn
    uniformly without replacement (all of them, shuffled, when the kernel has fewer).

    `spread` (with -1): at most that many, evenly spaced in file order from the first, the
    same every time (a fixed subset; no draw). `fill`: a kernel with fewer than `num_configs`
    configs gets all of them, shuffled, then repeats drawn from them up to `num_configs` (see
    `_FILLER`).

    `default_first`: config 0 (the compiler's default) at position 0 of every draw, the rest
    drawn from the other configs. Only for models that read position 0 as the default
    (`default_first` of models.py): for the others, which score a config the same wherever it
    stands, it would only change how often config 0 is drawn, so they keep upstream's draw
    and their runs stay as they were.
    """
    if num_configs < 0:
        if spread is not None and c1 - c0 > spread:
            return c0 + np.unique(np.linspace(0, c1 - c0 - 1, spread).round().astype(np.int64))
        return np.arange(c0, c1)
    size = min(num_configs, c1 - c0)
    if default_first and size > 0:
        rest = 1 + rng.choice(c1 - c0 - 1, size=size - 1, replace=False)
        picked = c0 + np.concatenate([[0], rest])
    else:
        picked = c0 + rng.choice(c1 - c0, size=size, replace=False)
    if fill and len(picked) < num_configs:
        picked = np.concatenate([picked, rng.choice(picked, size=num_configs - len(picked))])
    return picked


# The runtime label of a `fill` repeat: every loss leaves negative labels out (losses.py).
_FILLER = -1.0


def _components(
    split: Split,
    stats: FeatureStats,
    kernels: Sequence[int],
    num_configs: int,
    rng: np.random.Generator,
    spread: int | None = None,
    pad: bool = False,
    fill: bool = False,
    default_first: bool = False,
    rows: Sequence[np.ndarray] | None = None,
) -> dict[str, Any]:
    """Numpy pieces of `kernels` merged as components of one graph (B = len(kernels)).

    Node, edge and config rows are concatenated; edge indices are shifted to index the
    merged `op` node set, as `GraphTensor.merge_batch_to_components` would do. Features are
    normalised here, on the rows taken (elementwise, so bit for bit what normalising the
    whole split would give): no normalised copy of a split is ever held. With `pad`, every
    kernel's configs are padded to the most any of them has by repeating its first one. With
    `fill`, the repeats that fill up a short kernel (see `_pick_configs`) carry the runtime
    `_FILLER`. `rows`: one array per kernel, the split's config indices to take in place of
    the draw.
    """
    no, eo, co = split.node_offsets, split.edge_offsets, split.config_offsets
    if rows is None:
        rows = [
            _pick_configs(int(co[i]), int(co[i + 1]), num_configs, rng, spread, fill, default_first)
            for i in kernels
        ]
    picks = list(rows)
    if pad:
        most = max(len(p) for p in picks)
        picks = [np.concatenate([p, np.repeat(p[:1], most - len(p))]) for p in picks]
    node_sizes = np.array([no[i + 1] - no[i] for i in kernels], np.int32)
    edge_sizes = np.array([eo[i + 1] - eo[i] for i in kernels], np.int32)
    shift = np.repeat(np.cumsum(node_sizes) - node_sizes, edge_sizes).astype(np.int32)
    nodes = np.concatenate([np.arange(no[i], no[i + 1]) for i in kernels])
    edges = np.concatenate([split.edge_index[eo[i] : eo[i + 1]] for i in kernels])
    configs = np.concatenate(picks)
    normalizers = split.config_runtime_normalizers[configs]
    runtimes = runtime_ratios(split.config_runtime[configs], normalizers)
    if fill:  # the repeats come after each kernel's own configs
        real = [min(len(p), int(co[i + 1] - co[i])) for p, i in zip(picks, kernels)]
        repeat = np.concatenate([np.arange(len(p)) >= r for p, r in zip(picks, real)])
        runtimes = np.where(repeat, np.float32(_FILLER), runtimes)
    return {
        "op": stats.ops(split.node_opcode[nodes]),
        "node_feats": stats.node(split.node_feat[nodes]),
        "edges": edges + shift[:, None],
        "config_feats": stats.config(split.config_feat[configs]),
        "runtimes": runtimes,
        "normalizers": normalizers.astype(np.float32),
        "tile_id": np.array([split.tile_ids[i] for i in kernels], dtype=object),
        "node_sizes": node_sizes,
        "edge_sizes": edge_sizes,
        "config_sizes": np.array([len(p) for p in picks], np.int32),
    }


def _signature(stats: FeatureStats, batch: int | None) -> dict[str, tf.TensorSpec]:
    """Specs of `_components` output; `batch` = number of components (None: unknown)."""
    return {
        "op": tf.TensorSpec([None], tf.int32),
        "node_feats": tf.TensorSpec([None, stats.node_width], tf.float32),
        "edges": tf.TensorSpec([None, 2], tf.int32),
        "config_feats": tf.TensorSpec([None, stats.config_width], tf.float32),
        "runtimes": tf.TensorSpec([None], tf.float32),
        "normalizers": tf.TensorSpec([None], tf.float32),
        "tile_id": tf.TensorSpec([batch], tf.string),
        "node_sizes": tf.TensorSpec([batch], tf.int32),
        "edge_sizes": tf.TensorSpec([batch], tf.int32),
        "config_sizes": tf.TensorSpec([batch], tf.int32),
    }


def _to_graph(pieces: dict[str, tf.Tensor]) -> tfgnn.GraphTensor:
    """Merged components -> a scalar GraphTensor with upstream's schema (B components)."""
    edges = pieces["edges"]
    num_components = tf.shape(pieces["tile_id"], out_type=tf.int32)[0]

    def star(sizes: tf.Tensor, target: str) -> tfgnn.EdgeSet:
        # Component j's g node (index j) points at every node of that component.
        return tfgnn.EdgeSet.from_fields(
            sizes=sizes,
            adjacency=tfgnn.Adjacency.from_indices(
                source=("g", tf.repeat(tf.range(num_components), sizes)),
                target=(target, tf.range(tf.reduce_sum(sizes), dtype=tf.int32)),
            ),
        )

    return tfgnn.GraphTensor.from_pieces(
        node_sets={
            "op": tfgnn.NodeSet.from_fields(
                sizes=pieces["node_sizes"],
                features={"op": pieces["op"], "feats": pieces["node_feats"]},
            ),
            "config": tfgnn.NodeSet.from_fields(
                sizes=pieces["config_sizes"],
                features={
                    "feats": pieces["config_feats"],
                    "runtimes": pieces["runtimes"],
                    "normalizers": pieces["normalizers"],
                },
            ),
            "g": tfgnn.NodeSet.from_fields(
                sizes=tf.ones_like(pieces["node_sizes"]),
                features={"tile_id": pieces["tile_id"]},
            ),
        },
        edge_sets={
            "feed": tfgnn.EdgeSet.from_fields(
                sizes=pieces["edge_sizes"],
                adjacency=tfgnn.Adjacency.from_indices(
                    source=("op", edges[:, 0]), target=("op", edges[:, 1])
                ),
            ),
            "g_op": star(pieces["node_sizes"], "op"),
            "g_config": star(pieces["config_sizes"], "config"),
        },
    )


def kernel_graph(
    split: Split,
    i: int,
    stats: FeatureStats,
    *,
    num_configs: int = -1,
    rng: np.random.Generator | None = None,
) -> tfgnn.GraphTensor:
    """Kernel i of `split` as a one-component GraphTensor, built eagerly.

    Eager GraphTensor construction costs tens of ms in TF-GNN; iterate `graph_dataset` inside
    a tf.function (as Keras does) for bulk work. See `graph_dataset` for `num_configs`.
    """
    if not 0 <= i < len(split):
        raise IndexError(f"kernel {i} out of range for {split.name} ({len(split)} kernels)")
    rng = rng if rng is not None else np.random.default_rng()
    pieces = _components(split, stats, [i], num_configs, rng)
    spec = _signature(stats, 1)
    return _to_graph({k: tf.convert_to_tensor(v, spec[k].dtype) for k, v in pieces.items()})


def _batches_dataset(
    split: Split,
    stats: FeatureStats,
    *,
    batch_size: int,
    num_configs: int,
    min_configs: int,
    shuffle: bool,
    seed: int,
    shard: tuple[int, int] = (0, 1),
    kernels: Sequence[int] | None = None,
    spread: int | None = None,
    fill: bool = False,
    default_first: bool = False,
) -> tf.data.Dataset:
    """GraphTensors of `batch_size` merged kernels (last partial batch dropped if > 1).

    Batches are assembled in numpy, one generator call each: cheaper than tf.data batching
    plus `merge_batch_to_components`, with the same result. `shard=(i, n)` keeps every n-th
    usable kernel from the i-th on (one worker's share in multi-worker training). `kernels`,
    if given, are the kernel indices to use instead of all with `min_configs` configs. `fill`
    and `default_first`: see `_components` and `_pick_configs`.
    """
    usable = np.flatnonzero(split.config_counts() >= min_configs)
    index = (usable if kernels is None else np.asarray(kernels, np.int64))[shard[0] :: shard[1]]
    passes = itertools.count()  # per-dataset state, so each pass draws fresh samples

    def generate() -> Iterator[dict[str, Any]]:
        rng = np.random.default_rng([seed, next(passes)])
        order = rng.permutation(index) if shuffle else index
        for start in range(0, len(order) - batch_size + 1, batch_size):
            chosen = order[start : start + batch_size]
            yield _components(
                split,
                stats,
                chosen,
                num_configs,
                rng,
                spread,
                fill=fill,
                default_first=default_first,
            )

    signature = _signature(stats, batch_size)
    ds = tf.data.Dataset.from_generator(generate, output_signature=signature)
    return ds.map(_to_graph, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def graph_dataset(
    split: Split,
    stats: FeatureStats,
    *,
    num_configs: int = -1,
    min_configs: int = 0,
    shuffle: bool = False,
    seed: int = 0,
    kernels: Sequence[int] | None = None,
    spread: int | None = None,
    cache: bool = False,
) -> tf.data.Dataset:
    """One GraphTensor per kernel of `split` (upstream schema), normalised with `stats`.

    `num_configs` = -1 keeps every config in file order (inference); k >= 0 samples k distinct
    configs uniformly per kernel and pass. Kernels with fewer than `min_configs` configs are
    left out. `shuffle` reorders kernels every pass. Passes are reproducible from `seed`
    (pass p uses generator seed [seed, p]). `kernels`: only these kernel indices, in this
    order (`min_configs` then does not apply). `spread` (with `num_configs` = -1): at most
    that many configs per kernel, evenly spaced in file order, the same every pass.
    `cache`: the first pass keeps its graphs in memory and later passes replay them (for a
    small fixed set scored again and again; not with `num_configs` >= 0 or `shuffle`).
    """
    ds = _batches_dataset(
        split,
        stats,
        batch_size=1,
        num_configs=num_configs,
        min_configs=min_configs,
        shuffle=shuffle,
        seed=seed,
        kernels=kernels,
        spread=spread,
    )
    return (ds.cache() if cache else ds).prefetch(tf.data.AUTOTUNE)


def _distinct_rows(feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions of the first row of each kind in `feats` `[n, d]`, ascending; for each row,
    the index of its kind in them)."""
    feats = np.ascontiguousarray(feats)
    # Each row's bytes as one item: equal rows are equal bytes (a row with -0.0 where another
    # has 0.0 counts as another kind: scored twice, same score).
    items = feats.view(np.dtype((np.void, feats.dtype.itemsize * feats.shape[1]))).ravel()
    _, first, inverse = np.unique(items, return_index=True, return_inverse=True)
    by_file = np.argsort(first, kind="stable")
    position = np.empty_like(by_file)
    position[by_file] = np.arange(len(by_file))
    return first[by_file], position[inverse.ravel()]


@dataclasses.dataclass(frozen=True)
class DistinctConfigs:
    """One kernel's configs to score and the distinct feature rows among them.

    `picks`: the split's config indices taken (every config, or `spread`'s as
    `graph_dataset` takes them), in file order; `rows`: those of `picks` whose feature row is
    the first of its kind, in file order (config 0 first); `inverse`: for each pick, the
    position in `rows` of its feature row: `config_feat[rows][inverse]` is
    `config_feat[picks]`, bit for bit. A model that scores each config on its own (the
    `independent_configs` of models.py) gives a pick the score of its row, so only `rows`
    need scoring: the scores of `picks` are `scores[inverse]`. With `first_alone` (models
    that read position 0 as the compiler's default, `default_first`), the first pick is a
    row of its own, which no other pick shares.
    """

    picks: np.ndarray
    rows: np.ndarray
    inverse: np.ndarray

    @classmethod
    def of(
        cls, split: Split, kernel: int, spread: int | None = None, *, first_alone: bool = False
    ) -> DistinctConfigs:
        co = split.config_offsets
        rng = np.random.default_rng(0)  # unused: every config, no draw
        picks = _pick_configs(int(co[kernel]), int(co[kernel + 1]), -1, rng, spread)
        skip = 1 if first_alone and len(picks) else 0
        first, inverse = _distinct_rows(split.config_feat[picks[skip:]])
        rows = np.concatenate([picks[:skip], picks[skip:][first]])
        return cls(picks, rows, np.concatenate([np.zeros(skip, np.int64), inverse + skip]))

    def runtimes(self, split: Split) -> np.ndarray:
        """`[len(picks)]` runtime / normalizer of the picks, as a kernel's graph holds them."""
        return runtime_ratios(
            split.config_runtime[self.picks], split.config_runtime_normalizers[self.picks]
        )


def kernel_groups(
    split: Split,
    stats: FeatureStats,
    groups: Sequence[Sequence[int]],
    *,
    spread: int | None = None,
    cache: bool = False,
    rows: dict[int, np.ndarray] | None = None,
) -> tf.data.Dataset:
    """One GraphTensor per group of kernel indices: the group's kernels as its components,
    each with every config (at most `spread`, as `graph_dataset` takes them; with `rows`,
    `rows[kernel]`, the split's config indices), padded to the group's most by repeating the
    kernel's first config. For scoring several kernels in one model call; the padding's
    scores are to be dropped. `cache`: as `graph_dataset`'s.
    """
    groups = [list(g) for g in groups]

    def generate() -> Iterator[dict[str, Any]]:
        rng = np.random.default_rng(0)  # unused: every config, no draw
        for group in groups:
            taken = None if rows is None else [rows[k] for k in group]
            yield _components(split, stats, group, -1, rng, spread, pad=True, rows=taken)

    signature = _signature(stats, None)
    ds = tf.data.Dataset.from_generator(generate, output_signature=signature)
    ds = ds.map(_to_graph, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return (ds.cache() if cache else ds).prefetch(tf.data.AUTOTUNE)


def _labels(batch_size: int, num_configs: int) -> Callable:
    def attach(graph: tfgnn.GraphTensor) -> tuple[tfgnn.GraphTensor, tf.Tensor]:
        runtimes = graph.node_sets["config"]["runtimes"]
        return graph, tf.reshape(runtimes, [batch_size, num_configs])

    return attach


def training_batches(
    split: Split,
    stats: FeatureStats,
    *,
    num_configs: int,
    batch_size: int,
    seed: int = 0,
    shuffle: bool = True,
    shard: tuple[int, int] = (0, 1),
    fill: bool = False,
    default_first: bool = False,
) -> tf.data.Dataset:
    """(GraphTensor of `batch_size` merged components, labels [batch_size, num_configs]).

    Equivalent to upstream's `graph_dataset(...).batch(B, drop_remainder=True)
    .map(GraphTensor.merge_batch_to_components)` plus labels = the sampled configs' runtimes
    (runtime / normalizer). Kernels with fewer than `num_configs` configs are left out, or
    with `fill` kept: all their configs, then repeats of them labelled `_FILLER` (-1), which
    every loss leaves out. `shard=(i, n)`: only every n-th usable kernel from the i-th on.
    `default_first`: config 0 at position 0 of every kernel's draw.
    """
    if num_configs < 1 or batch_size < 1:
        raise ValueError(
            f"num_configs and batch_size must be >= 1 (got {num_configs}, {batch_size})"
        )
    min_configs = 2 if fill else num_configs
    usable = int((split.config_counts() >= min_configs).sum())
    if usable < batch_size:
        raise DataError(
            f"{split.name}: only {usable} kernel(s) have >= {min_configs} configs, fewer than "
            f"--batch={batch_size}; lower --configs or --batch"
        )
    ds = _batches_dataset(
        split,
        stats,
        batch_size=batch_size,
        num_configs=num_configs,
        min_configs=min_configs,
        shuffle=shuffle,
        seed=seed,
        shard=shard,
        fill=fill,
        default_first=default_first,
    )
    ds = ds.map(_labels(batch_size, num_configs))
    return ds.prefetch(tf.data.AUTOTUNE)
