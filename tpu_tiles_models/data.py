"""TpuGraphs tile:xla data: npz files -> validated arrays (`Split`, cached) -> GraphTensors.

GraphTensors are built from numpy slices of a split's concatenated arrays, normalised as they
are taken, in upstream's schema, so one model runs under both pipelines:

- node set `op`: `op` [n] int32 opcode, `feats` [n, stats.node_width] float32;
- node set `config`: `feats` [c, stats.config_width] float32, `runtimes` [c] float32
  (runtime / normalizer), `normalizers` [c] float32;
- node set `g`: one node, `tile_id` [1] string;
- edge sets `feed` (op -> op, edge_index[:, 0] -> edge_index[:, 1]), `g_op`, `g_config`.

Preprocessing (`FeatureStats`, saved with every model) is upstream's, bit for bit: columns
constant on train dropped, the rest scaled by `(x - min) / (max - min)` in float32.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import itertools
import json
import os
import warnings
from typing import Any, Iterator, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_gnn as tfgnn
import tqdm

from tpu_tiles_models import cache, files, interrupts, kernel_files, safe
from tpu_tiles_models.formats import CONFIG_FEAT_DIM, NODE_FEAT_DIM, REQUIRED_KEYS, SPLITS
from tpu_tiles_models.kernel_files import DataError, runtime_ratios, split_files, tile_id_of

# 2: the `cache` module's compressed format; 3: numbers validated in float32, known members;
# 4: features within half float32's range. A number is never reused: raise it when what is
# cached, or how it is keyed, changes.
_CACHE_VERSION = 4
_SHOWN_NAMES = 3  # how many bad file names a skip_bad warning lists


@dataclasses.dataclass
class Split:
    """One partition's K kernels, raw arrays concatenated: kernel i owns rows
    `node_offsets[i]:node_offsets[i + 1]` of `node_feat`, likewise for edges and configs."""

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
        return int(self.config_offsets[i + 1] - self.config_offsets[i])

    def config_counts(self) -> np.ndarray:
        """[K] int64: configs per kernel."""
        return np.diff(self.config_offsets)


def _concat(name: str, files: list[str], kernels: list[dict[str, np.ndarray]]) -> Split:
    def cat(key: str, dtype: Any, width: int | None = None) -> np.ndarray:
        parts = [k[key].reshape(-1, width) if width else k[key] for k in kernels]
        if not parts:
            return np.zeros((0, width) if width else (0,), dtype)
        return np.concatenate(parts).astype(dtype, copy=False)

    def offsets(key: str, width: int = 1) -> np.ndarray:
        sizes = [k[key].size // width for k in kernels]
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
        edge_offsets=offsets("edge_index", 2),
        config_offsets=offsets("config_runtime"),
    )


_ARRAY_FIELDS = REQUIRED_KEYS + ("node_offsets", "edge_offsets", "config_offsets")


def _warn_skipped(split: str, skipped: list[str]) -> None:
    if skipped:
        shown = " | ".join(skipped[:_SHOWN_NAMES])
        more = f" (and {len(skipped) - _SHOWN_NAMES} more)" if len(skipped) > _SHOWN_NAMES else ""
        warnings.warn(f"skipped {len(skipped)} bad file(s) in {split}: {shown}{more}", stacklevel=3)


def load_split(
    root: str | os.PathLike,
    split: str,
    *,
    min_configs: int = -1,
    cache_dir: str | os.PathLike | None = None,
    toy_data: bool = False,
    skip_bad: bool = False,
    skip_hint: str = "",
    progress: bool = True,
) -> Split:
    """Reads and validates `root/split/*.npz` (local or `gs://`) into one `Split`, without
    kernels of fewer than `min_configs` configs and, with `skip_bad`, bad files (a warning).
    `skip_hint`: how the calling command could leave a bad file out ('' if it cannot).
    """
    paths = split_files(root, split, toy_data=toy_data)
    cache_path = None
    if cache_dir is not None:
        # Keyed by each file's path (or URL), size and mtime, and the options. The paths'
        # one spelling (`files.canonical`) taken once, for their folder: per file it took
        # longer than reading a warm cache.
        folder = files.canonical(os.path.dirname(paths[0]))
        stamp = [[files.join(folder, os.path.basename(p)), *files.size_and_mtime(p)] for p in paths]
        key = dict(
            v=_CACHE_VERSION, files=stamp, min_configs=min_configs, toy=toy_data, skip_bad=skip_bad
        )
        blob = json.dumps(key, sort_keys=True)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:20]
        cache_path = files.join(files.expand(cache_dir), f"tiles-{split}-{digest}.cache")
        if files.exists(cache_path):
            try:  # a damaged cache is rebuilt, never trusted
                with files.open_read(cache_path) as f:
                    arrays, meta = cache.read(f)
                names, skipped = [str(p) for p in meta["files"]], [str(s) for s in meta["skipped"]]
                hit = Split(split, [tile_id_of(p) for p in names], names, **arrays)
            except (OSError, cache.CacheFormatError, KeyError, TypeError):
                pass
            else:
                _warn_skipped(split, skipped)
                return hit

    results: list[dict[str, np.ndarray] | None] = [None] * len(paths)
    errors: dict[int, str] = {}
    with concurrent.futures.ThreadPoolExecutor() as pool:
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
    single = [tile_id_of(paths[i]) for i in loaded if len(results[i]["config_runtime"]) < 2]
    if split == "train" and single:
        more = f" and {len(single) - _SHOWN_NAMES} more" if len(single) > _SHOWN_NAMES else ""
        warnings.warn(
            f"train: left out {len(single)} kernel(s) with a single config "
            f"({', '.join(single[:_SHOWN_NAMES])}{more}); a ranking needs two",
            stacklevel=2,
        )
    if cache_path is not None:
        try:  # the cache only saves time: a disk that is full or read-only gets a warning
            with safe.atomic_path(cache_path, flag="--cache_dir") as tmp, open(tmp, "wb") as f:
                arrays = {name: getattr(out, name) for name in _ARRAY_FIELDS}
                cache.write(f, arrays, {"files": out.files, "skipped": skipped})
        except files.WriteError as err:
            warnings.warn(f"{err}; loaded without caching", stacklevel=2)
    return out


def _scale(x: np.ndarray, keep: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """[n, kept] float32: upstream's `(x - min) / (max - min)` on the kept columns."""
    x = np.asarray(x, dtype=np.float32)[:, keep]
    return (x - lo) / (hi - lo)


@dataclasses.dataclass
class FeatureStats:
    """Fitted preprocessing: kept columns, their train min/max, `num_ops`, and provenance;
    saved with every exported model."""

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

        max_op = max(int(s.node_opcode.max()) for s in (train, *others) if len(s.node_opcode))
        return cls(
            *columns(train.node_feat),
            *columns(train.config_feat),
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
        """[n] opcodes as int32, those >= num_ops (statistics fitted on toy data) mapped to 0,
        the 'unknown' opcode, not past the model's embedding table."""
        ops = np.asarray(opcodes, dtype=np.int32)
        return np.where(ops < self.num_ops, ops, 0).astype(np.int32)

    def raw_columns(self, train: Split, node: Sequence[int], config: Sequence[int]) -> list:
        """Where each raw column of `node` and then `config` sits among the model's features:
        `[index, lo, hi]` (raw = lo + x[index] (hi - lo)), or `[-1, value, value]` for a
        column dropped as constant on `train` (its value there)."""
        out = []
        for columns, keep, lo, hi, raw in (
            (node, self.node_keep, self.node_min, self.node_max, train.node_feat),
            (config, self.config_keep, self.config_min, self.config_max, train.config_feat),
        ):
            at = np.cumsum(keep) - 1  # a kept column's index among the kept ones
            for c in columns:
                i, value = int(at[c]), float(raw[0, c])
                out.append([i, float(lo[i]), float(hi[i])] if keep[c] else [-1, value, value])
        return out

    def same_features(self, other: FeatureStats) -> bool:
        """Whether `other` turns raw features into the same model inputs (provenance aside)."""
        a, b = self.to_json(), other.to_json()
        return all(a[k] == b[k] for k in a if k not in ("train_files", "source"))

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON dict; float32 values survive the round trip exactly."""
        fields = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in vars(self).items()}
        return {
            "format": "tpu_tiles_models.FeatureStats/1",
            **fields,
            "num_ops": int(self.num_ops),
            "train_files": list(self.train_files),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FeatureStats:
        """Inverse of `to_json`; inconsistent input raises `DataError`."""
        arrays = [f.name for f in dataclasses.fields(cls) if f.type == "np.ndarray"]
        try:
            stats = cls(
                **{k: np.array(d[k], bool if k.endswith("_keep") else np.float32) for k in arrays},
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
    """Loads `splits` of `root` (options as `load_split`'s); fits `FeatureStats` on train
    unless `stats` is given. `min_train_configs` filters train only: unlike upstream, every
    valid and test kernel is kept, so each gets a prediction."""
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
        others = [s for n, s in loaded.items() if n != "train" and s is not None]
        source = f"{files.canonical(root)} toy_data={toy_data}"
        stats = FeatureStats.fit(loaded["train"], others, source=source)
    else:
        for split in loaded.values():
            unknown = int((split.node_opcode >= stats.num_ops).sum()) if split else 0
            if unknown:
                warnings.warn(
                    f"{split.name}: {unknown} node(s) have opcodes >= num_ops={stats.num_ops} of "
                    "the model's statistics; they are fed as opcode 0 (unknown)",
                    stacklevel=2,
                )
    return Dataset(stats=stats, **loaded)


def _pick_configs(
    c0: int,
    c1: int,
    num_configs: int,
    rng: np.random.Generator,
    spread: int | None = None,
    default_first: bool = False,
) -> np.ndarray:
    """Row indices of one kernel's configs: all in file order (-1; at most `spread`, evenly
    spaced), else `num_configs` drawn without replacement (all, shuffled, if fewer).
    `default_first`: config 0 at position 0 (only for models that read position 0 as the
    default; the others keep upstream's draw).
    """
    if num_configs < 0:
        if spread is not None and c1 - c0 > spread:
            return c0 + np.unique(np.linspace(0, c1 - c0 - 1, spread).round().astype(np.int64))
        return np.arange(c0, c1)
    size = min(num_configs, c1 - c0)
    if default_first and size > 0:
        rest = 1 + rng.choice(c1 - c0 - 1, size=size - 1, replace=False)
        return c0 + np.concatenate([[0], rest])
    return c0 + rng.choice(c1 - c0, size=size, replace=False)


def _components(
    split: Split,
    stats: FeatureStats,
    kernels: Sequence[int],
    rng: np.random.Generator | None = None,
    *,
    num_configs: int = -1,
    spread: int | None = None,
    pad: bool = False,
    default_first: bool = False,
    rows: Sequence[np.ndarray] | None = None,
) -> dict[str, Any]:
    """Numpy pieces of `kernels` merged as `GraphTensor.merge_batch_to_components` would,
    normalised on the rows taken (no normalised copy of a split is held). `pad`: each kernel's
    configs padded to the most any has by repeating its first. `rows`: per kernel, the split's
    config indices to take, not a draw."""
    no, eo, co = split.node_offsets, split.edge_offsets, split.config_offsets
    if rows is None:
        rows = [
            _pick_configs(int(co[i]), int(co[i + 1]), num_configs, rng, spread, default_first)
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
    """Merged components -> a scalar GraphTensor with upstream's schema."""
    p = pieces
    num_components = tf.shape(p["tile_id"], out_type=tf.int32)[0]

    def edges(sizes: tf.Tensor, source: tuple, target: tuple) -> tfgnn.EdgeSet:
        adjacency = tfgnn.Adjacency.from_indices(source=source, target=target)
        return tfgnn.EdgeSet.from_fields(sizes=sizes, adjacency=adjacency)

    def star(sizes: tf.Tensor, target: str) -> tfgnn.EdgeSet:
        # Component j's g node (index j) points at every node of that component.
        g = tf.repeat(tf.range(num_components), sizes)
        return edges(sizes, ("g", g), (target, tf.range(tf.reduce_sum(sizes), dtype=tf.int32)))

    def nodes(sizes: tf.Tensor, **features: tf.Tensor) -> tfgnn.NodeSet:
        return tfgnn.NodeSet.from_fields(sizes=sizes, features=features)

    config = dict(feats=p["config_feats"], runtimes=p["runtimes"], normalizers=p["normalizers"])
    return tfgnn.GraphTensor.from_pieces(
        node_sets={
            "op": nodes(p["node_sizes"], op=p["op"], feats=p["node_feats"]),
            "config": nodes(p["config_sizes"], **config),
            "g": nodes(tf.ones_like(p["node_sizes"]), tile_id=p["tile_id"]),
        },
        edge_sets={
            "feed": edges(p["edge_sizes"], ("op", p["edges"][:, 0]), ("op", p["edges"][:, 1])),
            "g_op": star(p["node_sizes"], "op"),
            "g_config": star(p["config_sizes"], "config"),
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
    """Kernel i of `split` as a one-component GraphTensor, built eagerly (tens of ms: use
    `graph_dataset` for bulk work, whose `num_configs` this takes)."""
    rng = rng if rng is not None else np.random.default_rng()
    pieces = _components(split, stats, [i], rng, num_configs=num_configs)
    spec = _signature(stats, 1)
    return _to_graph({k: tf.convert_to_tensor(v, spec[k].dtype) for k, v in pieces.items()})


def _graphs(generate, stats: FeatureStats, batch: int | None) -> tf.data.Dataset:
    """`generate`'s `_components` as GraphTensors."""
    ds = tf.data.Dataset.from_generator(generate, output_signature=_signature(stats, batch))
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
    batch_size: int = 1,
    shard: tuple[int, int] = (0, 1),
    default_first: bool = False,
) -> tf.data.Dataset:
    """GraphTensors of `batch_size` kernels of `split` with `min_configs` configs or more (or
    of `kernels`, in order) merged in numpy (cheaper than tf.data; a partial batch dropped),
    configs as `_pick_configs` takes them (pass p draws with seed `[seed, p]`). `shard=(i, n)`:
    every n-th kernel from the i-th on. `cache`: later passes replay the first one's graphs."""
    usable = np.flatnonzero(split.config_counts() >= min_configs)
    index = (usable if kernels is None else np.asarray(kernels, np.int64))[shard[0] :: shard[1]]
    passes = itertools.count()  # per-dataset state, so each pass draws fresh samples
    pick = dict(num_configs=num_configs, spread=spread, default_first=default_first)

    def generate() -> Iterator[dict[str, Any]]:
        rng = np.random.default_rng([seed, next(passes)])
        order = rng.permutation(index) if shuffle else index
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield _components(split, stats, order[start : start + batch_size], rng, **pick)

    ds = _graphs(generate, stats, batch_size)
    return (ds.cache() if cache else ds).prefetch(tf.data.AUTOTUNE)


@dataclasses.dataclass(frozen=True)
class DistinctConfigs:
    """One kernel's configs to score (`picks`, all or `spread`'s) and those whose feature row
    is the first of its kind (`rows`); `config_feat[rows][inverse]` is `config_feat[picks]`,
    so a model that scores each config on its own needs only `rows` scored. `first_alone`
    (`default_first` models): the first pick is its own row; without `merge`, every pick.
    """

    picks: np.ndarray
    rows: np.ndarray
    inverse: np.ndarray

    @classmethod
    def of(
        cls,
        split: Split,
        kernel: int,
        spread: int | None = None,
        *,
        first_alone: bool = False,
        merge: bool = True,
    ) -> DistinctConfigs:
        co = split.config_offsets
        rng = np.random.default_rng(0)  # unused: every config, no draw
        picks = _pick_configs(int(co[kernel]), int(co[kernel + 1]), -1, rng, spread)
        if not merge:
            return cls(picks, picks, np.arange(len(picks)))
        skip = 1 if first_alone and len(picks) else 0
        feats = np.ascontiguousarray(split.config_feat[picks[skip:]])
        # Each row's bytes as one item (-0.0 and 0.0 differ: such rows are scored twice, alike).
        items = feats.view(np.dtype((np.void, feats.dtype.itemsize * feats.shape[1]))).ravel()
        _, first, inverse = np.unique(items, return_index=True, return_inverse=True)
        by_file = np.argsort(first, kind="stable")  # kinds in the order they first appear
        position = np.empty_like(by_file)
        position[by_file] = np.arange(len(by_file))
        rows = np.concatenate([picks[:skip], picks[skip:][first[by_file]]])
        inverse = position[inverse.ravel()] + skip
        return cls(picks, rows, np.concatenate([np.zeros(skip, np.int64), inverse]))

    def runtimes(self, split: Split) -> np.ndarray:
        """`[len(picks)]` runtime / normalizer, as a kernel's graph holds them."""
        return runtime_ratios(
            split.config_runtime[self.picks], split.config_runtime_normalizers[self.picks]
        )


def kernel_groups(
    split: Split,
    stats: FeatureStats,
    groups: Sequence[Sequence[int]],
    rows: dict[int, np.ndarray],
    *,
    cache: bool = False,
) -> tf.data.Dataset:
    """One GraphTensor per group of kernels, each a component with the split's config rows
    `rows[kernel]`, padded to the group's most (`_components`' `pad`; drop their scores)."""

    def generate() -> Iterator[dict[str, Any]]:
        for group in groups:
            yield _components(split, stats, group, pad=True, rows=[rows[k] for k in group])

    ds = _graphs(generate, stats, None)
    return (ds.cache() if cache else ds).prefetch(tf.data.AUTOTUNE)


def training_batches(
    split: Split,
    stats: FeatureStats,
    *,
    num_configs: int,
    batch_size: int,
    seed: int = 0,
    shuffle: bool = True,
    shard: tuple[int, int] = (0, 1),
    default_first: bool = False,
) -> tf.data.Dataset:
    """(GraphTensor of `batch_size` merged kernels, labels `[batch_size, num_configs]`, the
    sampled configs' runtime / normalizer), as upstream batches and merges `graph_dataset`'s.
    Kernels with fewer than `num_configs` configs are left out.
    """
    usable = int((split.config_counts() >= num_configs).sum())
    if usable < batch_size:
        raise DataError(
            f"{split.name}: only {usable} kernel(s) have >= {num_configs} configs, fewer than "
            f"--batch={batch_size}; lower --configs or --batch"
        )
    ds = graph_dataset(
        split,
        stats,
        batch_size=batch_size,
        num_configs=num_configs,
        min_configs=num_configs,
        shuffle=shuffle,
        seed=seed,
        shard=shard,
        default_first=default_first,
    )
    ds = ds.map(
        lambda graph: (
            graph,
            tf.reshape(graph.node_sets["config"]["runtimes"], [batch_size, num_configs]),
        )
    )
    return ds.prefetch(tf.data.AUTOTUNE)
