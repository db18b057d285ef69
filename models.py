"""Graph neural networks that rank the tile configurations of TpuGraphs tile:xla kernels.

A drop-in replacement for `tpu_graphs/baselines/tiles/models.py` (TensorFlow, TF-GNN and the
standard library only): upstream's `tiles_train.py --model=<Name>` and the course prediction
script use it as they use upstream's. Upstream's protocol:
  * `Model(num_configs, num_ops, **kwargs)`; no variable depends on either count, and no model
    keeps non-trainable state, so the course's in-order copy of `trainable_variables` restores
    a model completely;
  * `call(graph, training=False)` -> `[batch, num_configs]` scores of a training batch
    (kernels as graph components); lower = predicted faster;
  * `forward(graph, num_configs)` -> `[batch, num_configs]` on whole kernels, in chunks of
    configs, so a 6000-config kernel never builds `[num_nodes, 6000, dim]` tensors.
Each model is `encode` (what does not depend on the configs) -> `embed` (each config on its
own, `[batch, c, dim]`) -> `head` (scores, `[batch, c]`), then `forward` applies the ranking
rule (`RankingRule`) that our trainer fits on validation. `default_first` models read config 0
as the compiler's default (it is, in the real collection).

The GraphTensor has node sets `op` (features `op`: opcode, `feats`: normalised floats),
`config` (`feats`) and `g`; edge set `feed` runs from consumer (source) to producer (target).
References: TpuGraphs, Phothilimthana et al., NeurIPS 2023; GraphSAGE, Hamilton et al.,
NeurIPS 2017; GCN, Kipf & Welling, ICLR 2017; Set Transformer, Lee et al., ICML 2019.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from importlib import metadata, util
from typing import Any, Callable, Sequence

# TF-GNN 1.0.3 runs on Keras 2 only, which TF >= 2.16 takes from `tf-keras` when
# TF_USE_LEGACY_KERAS=1 is set before TensorFlow's first import (once it is imported, too late:
# TF-GNN's import then names the fix).
if "tensorflow" not in sys.modules and util.find_spec("tf_keras") is not None:
    with contextlib.suppress(metadata.PackageNotFoundError):
        if metadata.version("keras").startswith("3."):
            os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402  (after the Keras choice above)
import tensorflow_gnn as tfgnn  # noqa: E402

# Opcode ids in TpuGraphs run 0..120. Sizing the embedding by this constant rather than by the
# data's `num_ops` keeps variable shapes identical between toy-data and full-data builds.
OPCODE_VOCAB = 128

# Configs per chunk in `forward`: bounds the [num_nodes, chunk, dim] tensors on big kernels.
DEFAULT_CHUNK = 512

# The ranking rule keeps config 0 among this many first places: the 5 the Kaggle metric reads
# (`tpu_tiles_models.margin.KEEP_TOP`, whose numpy rule this one matches exactly).
KEEP_DEFAULT_TOP = 5

# Upstream's baselines put this L2 weight on every dense kernel and on the opcode embedding's
# output (an activity regulariser); Keras adds both to the training loss.
BASELINE_L2 = 1e-4

BOTH_WAYS = (tfgnn.TARGET, tfgnn.SOURCE)  # a node's producers and its consumers

# Marks code without tensor-dependent Python control flow. Autograph then leaves it (and the
# TF-GNN functions it calls) unconverted, which makes tracing for `fit` and `save` cheaper.
_plain = tf.autograph.experimental.do_not_convert


# --- Keyword checks: each keyword is declared once, in a signature, and checked here by name ---

_MINIMUM = {k: 1 for k in "units hidden_dim op_embed_dim num_layers attention_heads".split()}
_MINIMUM |= {"inducing_points": 1, "chunk_size": 1, "num_gnns": 0, "final_mlp_layers": 0}
_MINIMUM |= {"mlp_layers": 0}
_SWITCHES = "default_context directed keep_default_gate default_margin".split()
_ACTIVATIONS = ("relu", "leaky_relu", "gelu", "elu", "selu", "silu", "swish", "tanh", "sigmoid")
_REDUCTIONS = tuple(sorted(tfgnn.get_registered_reduce_operation_names()))


def _check(owner: str, values: dict[str, Any]) -> None:
    """`ValueError` naming `owner`'s first keyword in `values` (a `locals()`) that is wrong."""
    for name, value in values.items():
        least = _MINIMUM.get(name, -1)
        if least >= 0 and (type(value) is not int or value < least):
            raise ValueError(f"{owner}: {name} must be an integer >= {least}, got {value!r}")
        if name in _SWITCHES and not isinstance(value, bool):
            raise ValueError(f"{owner}: {name} must be true or false, got {value!r}")
        if name in ("activation", "hidden_activation") and value not in _ACTIVATIONS:
            raise ValueError(f"{owner}: {name}={value!r} is not an activation: {_ACTIVATIONS}")
        if name == "config_attention" and (value not in SET_CONTEXTS or type(value) is int):
            raise ValueError(f"{owner}: config_attention={value!r} is not one of {SET_CONTEXTS}")
        if name == "tile_geometry" and not (isinstance(value, bool) or _is_column_map(value)):
            raise ValueError(f"{owner}: tile_geometry must be true, false or {_MAP}, got {value!r}")
        if name == "combine" and value not in COMBINE_METHODS:
            raise ValueError(f"{owner}: combine={value!r} is not one of {COMBINE_METHODS}")
        if name == "members" and (not isinstance(value, (list, tuple)) or not value):
            raise ValueError(f"{owner}: members must be a non-empty list of {_SPEC}, got {value!r}")
        for part in [value] if name == "reduction" else value if name == "pooling" else []:
            if not isinstance(part, str) or set(part.split("|")) - set(_REDUCTIONS):
                message = f"is not a TF-GNN reduction: {_REDUCTIONS} or several joined by '|'"
                raise ValueError(f"{owner}: {name}={value!r} {message}")


_MAP = '{"widths": [node, config], "columns": 18 x [index or -1, lo, hi]}'  # `TileGeometry`'s


def _is_column_map(value: Any) -> bool:
    """Whether `value` is a column map (`_MAP`), each index within its part's width."""
    try:
        widths, rows = value["widths"], value["columns"]
        width = [widths[0]] * 12 + [widths[1]] * 6  # node columns, then config columns
        return (
            set(value) == {"widths", "columns"}
            and len(widths) == 2
            and all(type(w) is int and w >= 1 for w in widths)
            and len(rows) == len(width)
            and all(type(i) is int and -1 <= i < w for (i, _, _), w in zip(rows, width))
            and all(math.isfinite(x) for _, lo, hi in rows for x in (lo, hi))
        )
    except (TypeError, KeyError, IndexError, ValueError):
        return False


# --- Functions of the GraphTensor (no variables) ------------------------------------------------
@_plain
def _nodes(graph: tfgnn.GraphTensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(opcode ids `[num_nodes]` int32 within `OPCODE_VOCAB`, features `[num_nodes, f]`)."""
    ops = tf.clip_by_value(tf.cast(graph.node_sets["op"]["op"], tf.int32), 0, OPCODE_VOCAB - 1)
    return ops, tf.cast(graph.node_sets["op"]["feats"], tf.float32)


@_plain
def _config_features(graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
    """Config features of each component: `[batch, num_configs, config_dim]` float32."""
    feats = tf.cast(graph.node_sets["config"]["feats"], tf.float32)
    batch = tf.shape(graph.node_sets["config"].sizes)[0]
    return tf.reshape(feats, [batch, num_configs, feats.shape[-1]])


@_plain
def _neighbours(
    graph: tfgnn.GraphTensor, h: tf.Tensor, receivers=BOTH_WAYS, *, mean: bool = False
) -> tf.Tensor:
    """`S h`: each node's sum of `h` `[num_nodes, ...]` over its `feed` neighbours, producers
    (receiver SOURCE), consumers (TARGET) or, by default, both; with `mean`, their mean (0
    without any). `S` is a sparse `[num_nodes, num_nodes]` matrix applied to `h` as
    `[num_nodes, prod(...)]`: a third of the cost of one message per edge on `[n, c, d]`."""
    adjacency = graph.edge_sets["feed"].adjacency
    ends = {tfgnn.SOURCE: adjacency.source, tfgnn.TARGET: adjacency.target}
    pairs = [tf.stack([ends[r], ends[tfgnn.reverse_tag(r)]], axis=1) for r in receivers]
    indices = tf.cast(tf.concat(pairs, axis=0), tf.int64)  # (v, u): v receives from u
    n = tf.cast(graph.node_sets["op"].total_size, tf.int64)
    weights = tf.ones([tf.shape(indices)[0]])
    if mean:
        count = tf.math.unsorted_segment_sum(weights, indices[:, 0], n)
        weights = tf.gather(1.0 / count, indices[:, 0])  # every row gathered has count >= 1
    s = tf.sparse.SparseTensor(indices, weights, tf.stack([n, n]))
    flat = tf.reshape(h, tf.stack([tf.shape(h)[0], -1]))
    out = tf.reshape(tf.sparse.sparse_dense_matmul(s, flat), tf.shape(h))
    out.set_shape(h.shape)
    return out


@_plain
def _to_ops(graph: tfgnn.GraphTensor, per_kernel: tf.Tensor, *, copy: bool = True) -> tf.Tensor:
    """`[batch, ...]` per-component values -> `[num_nodes, ...]` on each component's op nodes;
    without `copy`, a one-component graph's `[1, ...]` itself (it broadcasts)."""
    if not copy and graph.node_sets["op"].sizes.shape[0] == 1:
        return per_kernel
    return tfgnn.broadcast_context_to_nodes(graph, "op", feature_value=per_kernel)


@_plain
def _pool(graph: tfgnn.GraphTensor, h: tf.Tensor, reductions: Sequence[str]) -> tf.Tensor:
    """Pools `h` `[num_nodes, ..., d]` per component -> `[batch, ..., d * len(reductions)]`."""
    pooled = [tfgnn.pool_nodes_to_context(graph, "op", r, feature_value=h) for r in reductions]
    return tf.concat(pooled, axis=-1)


def _per_config(x: tf.Tensor, num_configs: tf.Tensor) -> tf.Tensor:
    """`[rows, d]` -> `[rows, num_configs, d]`, the same row for every config."""
    return tf.tile(x[:, tf.newaxis, :], [1, num_configs, 1])


@_plain
def _in_chunks(embed: Callable, configs: tf.Tensor, size: int) -> tf.Tensor:
    """`embed` (`[batch, c, d]` -> `[batch, c, e]`, each config on its own) on at most `size`
    configs at a time: equal chunks, the last one padded and its padding dropped."""
    if configs.shape[1] is not None and configs.shape[1] <= size:
        return embed(configs)  # one chunk (a training batch): no loop
    batch, n = tf.shape(configs)[0], tf.shape(configs)[1]
    num_chunks = (n + size - 1) // size
    chunk = (n + num_chunks - 1) // num_chunks
    padded = tf.pad(configs, [[0, 0], [0, num_chunks * chunk - n], [0, 0]])
    shape = [batch, num_chunks, chunk, configs.shape[-1]]
    chunks = tf.transpose(tf.reshape(padded, shape), [1, 0, 2, 3])  # [num_chunks, batch, ...]
    # One chunk at a time: a traced map_fn runs 10 at once by default, 10x the peak memory.
    out = tf.map_fn(embed, chunks, fn_output_signature=tf.float32, parallel_iterations=1)
    out = tf.reshape(tf.transpose(out, [1, 0, 2, 3]), [batch, num_chunks * chunk, -1])
    return out[:, :n]


# --- Layers (the registered ones reload by name from a SavedModel) ------------------------------
def _mlp(dims: Sequence[int], activation: Any, l2: float = 0.0) -> list[tf.keras.layers.Dense]:
    """Dense layers of widths `dims`, `activation` between them (none after the last), an L2
    penalty of weight `l2` on every kernel when positive; applied by `_apply`. A list, not a
    `tf.keras.Sequential`, whose InputLayer Keras 2.16+ saves in a form 2.13-2.15 cannot load."""
    reg = tf.keras.regularizers.l2(l2) if l2 else None
    acts = [activation] * (len(dims) - 1) + [None]
    dense = tf.keras.layers.Dense
    return [dense(d, activation=a, kernel_regularizer=reg) for d, a in zip(dims, acts)]


def _apply(layers: Sequence[tf.keras.layers.Layer], x: tf.Tensor) -> tf.Tensor:
    """`layers` applied in order (none: the identity)."""
    for layer in layers:
        x = layer(x)
    return x


class _Configured(tf.keras.layers.Layer):
    """A layer whose `get_config` is its keywords named in `CONFIG`, stored as attributes."""

    CONFIG: tuple[str, ...] = ()

    def get_config(self) -> dict:
        return {**super().get_config(), **{k: getattr(self, k) for k in self.CONFIG}}


@_plain
def _stretch(x: tf.Tensor, scale: float = 1e4) -> tf.Tensor:
    """`x` `[..., d]` -> `[x || asinh(scale x) / asinh(scale)]` `[..., 2d]`.

    Upstream min-max scales every column to [0, 1], which squashes heavy-tailed columns (shape
    products reach 1e9) to about zero for all but the largest kernels; the stretch gives their
    small values back a usable range.
    """
    x = tf.cast(x, tf.float32)
    return tf.concat([x, tf.math.asinh(scale * x) / math.asinh(scale)], axis=-1)


# Raw TpuGraphs tile:xla columns the tile geometry reads: a node's 6 shape dims and its
# layout's minor_to_major, and a config's 6 output-tile bounds.
SHAPE_COLUMNS = tuple(range(21, 27))
LAYOUT_COLUMNS = tuple(range(134, 140))
OUTPUT_BOUND_COLUMNS = tuple(range(8, 14))
_SLOTS = 6


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class TileGeometry(_Configured):
    """How a config's output tile divides each node's shape, dim by dim from the layout's
    minor-most (the per-dimension config features of the 5th-place "Fast or Slow?" tile
    solution, here with the tile counts and padding of the TPU's (8, 128) granules):

        s: the node's shape in slot order (slot 0 the minor-most dim), g: granules (128, 8,
        then 1), u = ceil(s / g), b = clip(bound, 1, u), t = ceil(u / b), e = b g:
        per slot [log t || s / (t e) || log(e / s)], then [sum log t || prod s / (t e) ||
        sum log e]; 0 past the node's rank (and so 1, an empty product, for the whole
        tile's padding of a rank-0 node).                            [num_nodes, c, 21]

    The model sees normalised columns (`x = (raw - lo) / (hi - lo)`, constant ones dropped), so
    where each raw column sits is the column map: `columns` `[18, 3]`, (index among the
    features or -1 for a dropped one, lo, hi) of `SHAPE_COLUMNS + LAYOUT_COLUMNS`, then of
    `OUTPUT_BOUND_COLUMNS`, for features `widths` (node, config) wide (`tpu-tiles columns`
    prints it for a data set). It is a weight (its gradient 0), so the course's in-order copy
    restores it; without `columns` (runs that stored it only there) it starts at 0, where
    every shape reads 0 and the features are constants.
    Call: `kernel_part(graph)`, then `(graph, kernel_part, configs)` (below).
    """

    CONFIG = ("widths",)

    def __init__(self, *, columns: Any = None, widths: Sequence[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        init = "zeros" if columns is None else tf.keras.initializers.Constant(columns)
        self.columns = self.add_weight(name="raw_columns", shape=(18, 3), initializer=init)
        self.widths = None if widths is None else list(widths)
        self.built = True  # its variables exist, though Keras never calls it

    def _raw(self, x: tf.Tensor, columns: tf.Tensor) -> tf.Tensor:
        """`x` `[..., f]` normalised -> `[..., k]` raw values of `columns` `[k, 3]`."""
        index, lo, hi = tf.unstack(tf.stop_gradient(columns), axis=1)
        index = tf.cast(index, tf.int32)
        picked = tf.gather(x, tf.clip_by_value(index, 0, tf.shape(x)[-1] - 1), axis=-1)
        return tf.round(lo + tf.where(index >= 0, picked, 0.0) * (hi - lo))

    def kernel_part(self, graph: tfgnn.GraphTensor) -> tuple[tf.Tensor, ...]:
        """(shape, granules, dim of each slot, in rank) of each node, `[num_nodes, 6]`;
        `ValueError` naming the widths where the features are not those of the map."""
        feats = _nodes(graph)[1]
        got = [feats.shape[-1], graph.node_sets["config"]["feats"].shape[-1]]
        if self.widths is not None and got != self.widths:
            raise ValueError(
                f"TileGeometry: the column map is for {self.widths[0]} node and "
                f"{self.widths[1]} config feature columns, the data has {got[0]} and {got[1]}; "
                "print this data's map with `tpu-tiles columns DATA_ROOT` (same --configs, "
                "--toy_data) and pass it as tile_geometry"
            )
        raw = self._raw(feats, self.columns[:12])
        shape, layout = raw[:, :_SLOTS], tf.cast(raw[:, _SLOTS:], tf.int32)
        rank = tf.reduce_sum(tf.cast(shape > 0, tf.int32), axis=-1, keepdims=True)
        slot = tf.range(_SLOTS)[tf.newaxis]
        in_rank = slot < rank
        minor_to_major = tf.math.floormod(layout, tf.maximum(rank, 1))
        seen = tf.one_hot(minor_to_major, _SLOTS) * tf.cast(in_rank, tf.float32)[..., tf.newaxis]
        counts = tf.reduce_sum(seen, axis=1)  # a layout is a permutation of the rank's dims
        valid = tf.reduce_all((counts == 1.0) | ~in_rank, axis=-1, keepdims=True)
        dims = tf.where(in_rank, tf.where(valid, minor_to_major, rank - 1 - slot), slot)
        granule = tf.where((slot == 0) & (rank >= 1), 128.0, tf.where(slot == 1, 8.0, 1.0))
        granule = tf.where(in_rank, granule, 1.0)
        return tf.gather(shape, dims, batch_dims=1), granule, dims, in_rank

    def __call__(self, graph, kernel_part, configs: tf.Tensor) -> tf.Tensor:
        """`configs` `[batch, c, k]` -> `[num_nodes, c, 21]` (see the class)."""
        shape, granule, dims, in_rank = kernel_part
        bounds = _to_ops(graph, self._raw(configs, self.columns[12:]))  # [n, c, 6] by dim
        bounds = tf.gather(bounds, dims, axis=2, batch_dims=1)  # by slot
        s, g = tf.maximum(shape, 1.0)[:, tf.newaxis], granule[:, tf.newaxis]
        units = tf.math.ceil(s / g)
        tiles = tf.math.ceil(units / tf.clip_by_value(bounds, 1.0, units))
        extent = tf.clip_by_value(bounds, 1.0, units) * g
        used, log_tiles, log_extent = s / (tiles * extent), tf.math.log(tiles), tf.math.log(extent)
        mask = tf.cast(in_rank, tf.float32)[:, tf.newaxis]
        per_slot = [log_tiles * mask, used * mask, (log_extent - tf.math.log(s)) * mask]
        whole = [
            tf.reduce_sum(log_tiles * mask, -1, keepdims=True),
            tf.reduce_prod(tf.where(mask > 0, used, 1.0), -1, keepdims=True),
            tf.reduce_sum(log_extent * mask, -1, keepdims=True),
        ]
        # 0 times the columns: their gradient is 0, not None, so Adam leaves them as set.
        return tf.concat(per_slot + whole, axis=-1) + 0.0 * tf.reduce_sum(self.columns)


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class DirectedSAGEBlock(_Configured):
    """A pre-norm residual GraphSAGE block over the `feed` edges, direction-aware:

    `h <- h + W_out act(W_self z + W_prod mean_producers(z) + W_cons mean_consumers(z))`,
    `z = LayerNorm(h)`. Producers and consumers get their own weights because data flows one
    way: a node's cost depends on what feeds it and on what it feeds.
    Call: `(graph, h)` with `h` `[num_nodes, num_configs, units]` -> the same shape.
    """

    CONFIG = ("units", "activation")

    def __init__(self, *, units: int, activation: str = "gelu", **kwargs):
        super().__init__(**kwargs)
        self.units, self.activation = units, activation
        self._norm = tf.keras.layers.LayerNormalization()
        self._self = tf.keras.layers.Dense(units)
        self._prod = tf.keras.layers.Dense(units, use_bias=False)
        self._cons = tf.keras.layers.Dense(units, use_bias=False)
        self._out = tf.keras.layers.Dense(units)
        self._act = tf.keras.activations.get(activation)

    def call(self, graph: tfgnn.GraphTensor, h: tf.Tensor) -> tf.Tensor:
        z = self._norm(h)
        producers = self._prod(_neighbours(graph, z, [tfgnn.SOURCE], mean=True))
        consumers = self._cons(_neighbours(graph, z, [tfgnn.TARGET], mean=True))
        return h + self._out(self._act(self._self(z) + producers + consumers))


# `ResidualSAGE`'s `config_attention`: none, the block as first written (ungated: what runs
# that recorded `true` were trained with), the gated block.
SET_CONTEXTS = (False, True, "gated")
# LayerScale's first value of each gate (Touvron et al., ICCV 2021: 0.1 for up to 18 blocks).
GATE_INIT = 0.1


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class ConfigSetAttention(_Configured):
    """Lets the configs of one kernel see each other (induced set attention, Lee et al.):

    `s = MHA(P, z)` (learned points `P` `[num_points, units]` summarise the configs, `z =
    LayerNorm(h)`), `h <- h + a * MHA(z, s)`, `h <- h + f * FFN(LayerNorm(h))`. Memory grows as
    configs x points, so a 6000-config kernel runs at once, and the softmax averages keep their
    scale whether 10 configs are sampled (training) or all are scored.
      * `gated`: `a`, `f` per-channel gates from `GATE_INIT` (LayerScale, Touvron et al., ICCV
        2021), so the branches start small instead of adding Glorot-scaled noise into the
        residual, and FFN is two layers (4 units wide, then units, GELU between);
        otherwise (the block as first written, for runs that recorded it) `a = f = 1` and FFN
        is one GELU layer.
    Call: `h` `[batch, num_configs, units]` -> the same shape.
    """

    CONFIG = ("units", "num_heads", "num_points", "gated")

    def __init__(
        self,
        *,
        units: int,
        num_heads: int = 4,
        num_points: int = 8,
        gated: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if units % num_heads:
            raise ValueError(f"ConfigSetAttention: units={units} not divisible by num_heads")
        self.units, self.num_heads, self.num_points = units, num_heads, num_points
        self.gated = bool(gated)
        self._points = self.add_weight(
            name="inducing_points", shape=[num_points, units], initializer="glorot_uniform"
        )
        self._gates = [1.0, 1.0]  # the first block's: none (its variables must not change)
        if gated:
            init = tf.keras.initializers.Constant(GATE_INIT)
            self._gates = [self.add_weight(name=n, shape=[units], initializer=init) for n in "af"]
        self._norm_in = tf.keras.layers.LayerNormalization()
        self._summarise = tf.keras.layers.MultiHeadAttention(num_heads, units // num_heads)
        self._broadcast = tf.keras.layers.MultiHeadAttention(num_heads, units // num_heads)
        self._norm_out = tf.keras.layers.LayerNormalization()
        self._ffn = (
            _mlp([4 * units, units], "gelu") if gated else [tf.keras.layers.Dense(units, "gelu")]
        )

    def call(self, h: tf.Tensor) -> tf.Tensor:
        z = self._norm_in(h)
        points = tf.tile(self._points[tf.newaxis], [tf.shape(h)[0], 1, 1])
        h = h + self._gates[0] * self._broadcast(z, self._summarise(points, z))
        return h + self._gates[1] * _apply(self._ffn, self._norm_out(h))


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class DefaultContext(_Configured):
    """Shows every config the compiler's default, read at position 0:

    `h_i <- h_i + W_out act(W [z_i || z_0 || 1{i = 0}])`, `z = LayerNorm(h)`. Every runtime is
    divided by the default's, so how a tile compares with the default is what the targets
    measure; what both inputs are worth is learned (where position 0 is not special, that too).
    Call: `h` `[batch, num_configs, units]` -> the same shape.
    """

    CONFIG = ("units", "activation")

    def __init__(self, *, units: int, activation: str = "gelu", **kwargs):
        super().__init__(**kwargs)
        self.units, self.activation = units, activation
        self._norm = tf.keras.layers.LayerNormalization()
        self._mix = tf.keras.layers.Dense(units, activation=activation)
        self._out = tf.keras.layers.Dense(units)

    def call(self, h: tf.Tensor) -> tf.Tensor:
        z = self._norm(h)
        default = tf.broadcast_to(z[:, :1], tf.shape(z))
        is_default = tf.cast(tf.range(tf.shape(z)[1]) == 0, z.dtype)  # [num_configs]
        is_default = tf.broadcast_to(is_default[tf.newaxis, :, tf.newaxis], tf.shape(z[..., :1]))
        return h + self._out(self._mix(tf.concat([z, default, is_default], axis=-1)))


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class BidirectionalSAGELayer(_Configured):
    """The GraphSAGE layer of the TpuGraphs baselines (Hamilton et al., as used by
    Phothilimthana et al.), the `feed` edges taken both ways:

    `x <- l2_normalize(act(W [S x || x] + b))`, `S x` the sum over producers and consumers,
    computed as `S (x W_n) + x W_self`: the sum runs on `units` columns, and no
    `[num_nodes, ..., 2d]` concatenation is built.
    Call: `(graph, x)` with `x` `[num_nodes, ..., d]` -> `[num_nodes, ..., units]`.
    """

    CONFIG = ("units", "activation", "l2_regularization")

    def __init__(
        self, *, units: int, activation: str = "leaky_relu", l2_regularization=BASELINE_L2, **kw
    ):
        super().__init__(**kw)
        _check(type(self).__name__, locals())
        self.units, self.activation, self.l2_regularization = units, activation, l2_regularization
        self.dense = _mlp([units], None, l2_regularization)[0]  # W and b

    def call(self, graph: tfgnn.GraphTensor, x: tf.Tensor) -> tf.Tensor:
        w_neighbours, w_own = _row_blocks(self.dense, [x.shape[-1]] * 2)
        neighbours = _neighbours(graph, tf.tensordot(x, w_neighbours, axes=1))
        return self.finish(neighbours + tf.tensordot(x, w_own, axes=1) + self.dense.bias)

    def finish(self, pre_activation: tf.Tensor) -> tf.Tensor:
        """`l2_normalize(act(.))` of `W [S x || x] + b`."""
        return tf.math.l2_normalize(getattr(tf.nn, self.activation)(pre_activation), axis=-1)


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class ResidualGCNLayer(_Configured):
    """The residual graph-convolution layer of the TpuGraphs baselines (Kipf & Welling,
    normalised by rows). With `P = D^-1 (A + I)`, `A[i, j] = 1` for a `feed` edge from source
    `j` to target `i`, `D` the row sums of `A + I`, and `y = act(x)`:
      * undirected: `x <- x + f(P y + P^T y + y)`;
      * directed: `x <- x + f_fwd(P y) + f_rev(P^T y) + f_self(y)`;
    each `f` `mlp_layers` dense layers of width `units`, `act` between them.
    Call: `(graph, x)` with `x` `[num_nodes, ..., units]` -> the same shape.
    """

    CONFIG = ("units", "mlp_layers", "activation", "directed", "l2_regularization")

    def __init__(
        self,
        *,
        units: int,
        mlp_layers: int = 2,
        activation: str = "leaky_relu",
        directed: bool = False,
        l2_regularization: float = BASELINE_L2,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _check(type(self).__name__, locals())
        self.units, self.mlp_layers, self.activation = units, mlp_layers, activation
        self.directed, self.l2_regularization = bool(directed), l2_regularization
        self._act = getattr(tf.nn, activation)
        # f undirected; f_fwd, f_rev, f_self (in this order) when directed.
        f = lambda: _mlp([units] * mlp_layers, self._act, l2_regularization)  # noqa: E731
        self._fs = [f() for _ in range(3 if self.directed else 1)]

    def call(self, graph: tfgnn.GraphTensor, x: tf.Tensor) -> tf.Tensor:
        y = self._act(x)
        into = _neighbours(graph, tf.ones(tf.stack([tf.shape(y)[0], 1])), [tfgnn.TARGET])
        degree = tf.reshape(1.0 + into, [-1] + [1] * (y.shape.rank - 1))  # rows of A + I
        forward = (_neighbours(graph, y, [tfgnn.TARGET]) + y) / degree  # P y
        scaled = y / degree
        reverse = _neighbours(graph, scaled, [tfgnn.SOURCE]) + scaled  # P^T y
        if self.directed:
            f_fwd, f_rev, f_self = self._fs
            return x + _apply(f_fwd, forward) + _apply(f_rev, reverse) + _apply(f_self, y)
        return x + _apply(self._fs[0], forward + reverse + y)


def _row_blocks(dense: tf.keras.layers.Dense, widths: Sequence[int]) -> list[tf.Tensor]:
    """`dense`'s kernel cut into row blocks of `widths`: `W [p || q] = W_p p + W_q q`."""
    if not dense.built:
        dense.build(tf.TensorShape([None, sum(widths)]))
    return tf.split(dense.kernel, list(widths), axis=0)


class EarlyJoin:
    """A model's first dense layer on the early join, without building the join.

    The early join puts config j of a node's kernel between the node's own parts,
    `x[v, j] = [left(v) || config_j || right(v)]`, `[num_nodes, c, a + d + b]`. A dense layer
    is linear in the parts, so with its kernel cut into row blocks (`W [p || q] = W_p p + W_q q`)
      * plain (`neighbours=False`):
        `W x[v, j] + b = node(v) + W_c config_j`, `node(v) = W_l left(v) + W_r right(v) + b`;
      * in a GraphSAGE layer, `S` summing over the neighbours, whose copies of config j add up
        to `deg(v) config_j` (`W [S x || x] = S(x W_n) + x W_s`):
        `W [S x || x][v, j] + b = node(v) + (deg(v) W_Sc + W_c) config_j`,
        `node(v) = W_Sl S left + W_Sr S right + W_l left + W_r right + b`.
    `node(v)` is computed once per kernel (`node_part`, outside `forward`'s chunks), the rest
    per config (`__call__`): the same pre-activation up to float rounding, without the joined
    input and its per-edge messages, which cost more than the rest of the model. With `dense`
    None it builds the join itself (a model without such a layer).
    """

    def __init__(self, dense: Any, widths: Sequence[int], *, neighbours: bool):
        self.dense, self.neighbours = dense, neighbours
        if dense is not None:
            self.blocks = _row_blocks(dense, list(widths) * (2 if neighbours else 1))

    def node_part(self, graph: tfgnn.GraphTensor, left: tf.Tensor, right: tf.Tensor) -> tuple:
        """`[num_nodes, a]`, `[num_nodes, b]` -> (`node` `[num_nodes, units]`, `deg` or None)."""
        if self.dense is None:
            return left, right
        if not self.neighbours:
            w_l, _, w_r = self.blocks
            return tf.matmul(left, w_l) + tf.matmul(right, w_r) + self.dense.bias, None
        sl, _, sr, ol, _, or_ = self.blocks
        sums = [_neighbours(graph, left), _neighbours(graph, right)]
        parts = tf.concat([*sums, left, right], axis=-1)
        node = tf.matmul(parts, tf.concat([sl, sr, ol, or_], axis=0)) + self.dense.bias
        return node, _neighbours(graph, tf.ones_like(left[:, :1]))

    def __call__(self, graph: tfgnn.GraphTensor, node_part: tuple, configs: tf.Tensor) -> tf.Tensor:
        """`configs` `[batch, c, d]` -> pre-activations `[num_nodes, c, units]` (or the join)."""
        if self.dense is None:
            (left, right), c = node_part, tf.shape(configs)[1]
            joined = [_per_config(left, c), _to_ops(graph, configs), _per_config(right, c)]
            return tf.concat(joined, axis=-1)
        node, degree = node_part
        if not self.neighbours:
            per_config = tf.matmul(configs, self.blocks[1])  # [batch, c, units]
            return node[:, tf.newaxis, :] + _to_ops(graph, per_config, copy=False)
        # Per node v, `[config_j || 1] @ [[deg(v) W_Sc + W_c], [node(v)]]`: one small product
        # per node builds the [num_nodes, c, units] pre-activation in one pass.
        per_node = degree[:, :, tf.newaxis] * self.blocks[1] + self.blocks[4]
        weights = tf.concat([per_node, node[:, tf.newaxis, :]], axis=1)  # [n, d + 1, units]
        configs = tf.concat([configs, tf.ones_like(configs[..., :1])], axis=-1)
        return tf.matmul(_to_ops(graph, configs, copy=False), weights)


# --- The ranking rule, and the protocol every model shares ---------------------------------------
@_plain
def keep_default_places(scores: tf.Tensor, top: int = KEEP_DEFAULT_TOP) -> tf.Tensor:
    """Each config's place (0 = first) in the ranking of `scores` `[batch, n]` (lowest first,
    ties in index order) with config 0 moved to place `top - 1` when it ranks lower: the
    `top - 1` first stay, the configs between move down one. `[batch, n]` float32."""
    place = tf.argsort(tf.argsort(scores, axis=-1, stable=True), axis=-1, stable=True)
    first = place[:, :1]  # config 0's place, [batch, 1]
    moved = tf.where((place >= top - 1) & (place < first), place + 1, place)
    is_first = tf.equal(tf.range(tf.shape(place)[-1]), 0)[tf.newaxis, :]
    moved = tf.where(is_first, tf.fill(tf.shape(place), top - 1), moved)
    return tf.cast(tf.where(first >= top, moved, place), tf.float32)


class RankingRule(tf.keras.layers.Layer):
    """The rule applied last: `places(s - m e_0)` with the gate on, else `s - m e_0`, where
    another config ranks above config 0 (the compiler's default) only where the model prefers
    it by more than `m`, and the gate keeps config 0 in the first `KEEP_DEFAULT_TOP` places.

    Both are fitted on validation once a run's hash is fixed (`tpu_tiles_models.margin` sets
    them, None where built without): hence weights, not keywords. As
    the model's last layer, its weights (gate, margin) come last in the course's in-order copy;
    `tie` adds them times 0 to `call`'s scores, so their gradients are 0 and Adam keeps them.
    """

    def __init__(self, *, keep_default_gate: bool = True, default_margin: bool = True, **kwargs):
        super().__init__(**kwargs)
        add = lambda name: self.add_weight(name=name, shape=(), initializer="zeros")  # noqa: E731
        self.gate = add("keep_default_gate") if keep_default_gate else None
        self.margin = add("default_margin") if default_margin else None
        self.built = True  # its variables exist, though Keras never calls it (saving checks it)

    def tie(self, scores: tf.Tensor) -> tf.Tensor:
        """`scores` plus 0 times each weight (see the class)."""
        for weight in (self.gate, self.margin):
            scores = scores if weight is None else scores + 0.0 * weight
        return scores

    def with_margin(self, scores: tf.Tensor) -> tf.Tensor:
        """`[batch, n]` -> `s - m e_0`."""
        if self.margin is None:
            return scores
        return scores - self.margin * tf.one_hot(0, tf.shape(scores)[-1], dtype=scores.dtype)

    def rank(self, scores: tf.Tensor) -> tf.Tensor:
        """`[batch, n]` scores with the margin -> what `forward` returns."""
        if self.gate is None:
            return scores
        return tf.where(self.gate > 0.5, keep_default_places(scores), scores)


class _Ranker(tf.keras.Model):
    """A model that ranks whole kernels: `raw_scores(graph, num_configs)` `[batch,
    num_configs]`, then its `RankingRule`, which each constructor adds after every other layer
    (`_add_rule`) so that the rule's variables come last. `call` scores a training batch,
    `num_configs` configs per kernel."""

    def __init__(
        self, num_configs: int, *, keep_default_gate: bool = True, default_margin: bool = True
    ):
        _check(type(self).__name__, locals())
        super().__init__()
        self._num_configs = int(num_configs)
        self._rule_switches = (keep_default_gate, default_margin)

    def _add_rule(self) -> None:
        gate, margin = self._rule_switches
        self.rule = RankingRule(keep_default_gate=gate, default_margin=margin)

    def call(self, graph: tfgnn.GraphTensor, training: bool = False) -> tf.Tensor:
        return self.rule.tie(self.raw_scores(graph, self._num_configs))

    @_plain
    def config_scores(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        """`raw_scores` with config 0's margin: `[batch, num_configs]`."""
        return self.rule.with_margin(self.raw_scores(graph, num_configs))

    @_plain
    def forward(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        """`[batch, num_configs]`, lowest first: the scores with the margin or, with the gate
        on, each config's place. `num_configs` may be an int or a scalar tensor."""
        return self.rule.rank(self.config_scores(graph, num_configs))


class _TileRanker(_Ranker):
    """One model: `encode`, `embed`, `head` (see the module), `forward`'s configs embedded
    `chunk_size` at a time. Every model's keywords: `chunk_size` and the rule's
    (`keep_default_gate`, `default_margin`). `num_ops`: 1 + the largest opcode id, at most
    `OPCODE_VOCAB`. `independent_configs`: a config's score ignores the others (so padding is
    harmless); `default_first`: position 0 is read as the compiler's default."""

    independent_configs = True
    default_first = False

    def __init__(self, num_configs: int, num_ops: int, *, chunk_size: int = DEFAULT_CHUNK, **rule):
        _check(type(self).__name__, locals())
        super().__init__(num_configs, **rule)
        if num_ops > OPCODE_VOCAB:
            raise ValueError(f"num_ops={num_ops} exceeds the opcode vocabulary {OPCODE_VOCAB}")
        self._chunk_size = chunk_size

    @_plain
    def raw_scores(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        kernel = self.encode(graph)
        embed = lambda chunk: self.embed(graph, kernel, chunk)  # noqa: E731
        return self.head(_in_chunks(embed, _config_features(graph, num_configs), self._chunk_size))


# --- Our models -----------------------------------------------------------------------------------
class ResidualSAGE(_TileRanker):
    """Residual directed GraphSAGE over the kernel, every config joined onto every node:

        n(v) = W_in [E op(v) || stretch(x_v)]                          [num_nodes, hidden]
        c_j = MLP(stretch(config_j))                                   [batch, c, hidden]
        h(v, j) = n(v) + c_j [+ W_g TileGeometry(v, j)], then num_layers DirectedSAGEBlocks
                                                                       [num_nodes, c, hidden]
        e_j = MLP([sum || mean || max over v of LayerNorm(h)(v, j) || c_j])  [batch, c, hidden]
        score_j = MLP(DefaultContext(ConfigSetAttention(e))_j), both blocks optional

    `config_attention`: one of `SET_CONTEXTS` (`ConfigSetAttention`: `true` ungated, or
    "gated"). `activation` is a Keras activation's name;
    `common`: every model's keywords (`_TileRanker`). Its defaults are the benchmark suite's
    recommendation (docs/choosing.md); runs record their resolved keywords, so a later default
    changes later runs only.
    """

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        hidden_dim: int = 32,
        num_layers: int = 3,
        op_embed_dim: int = 32,
        activation: str = "gelu",
        config_attention: bool | str = False,
        attention_heads: int = 4,
        inducing_points: int = 8,
        pooling: Sequence[str] = ("sum", "mean", "max"),
        default_context: bool = True,
        tile_geometry: bool | dict = False,
        **common,
    ):
        _check(type(self).__name__, locals())
        super().__init__(num_configs, num_ops, **common)
        width = dict(units=hidden_dim, activation=activation)
        self._pooling = tuple(pooling)
        self._op_embedding = tf.keras.layers.Embedding(OPCODE_VOCAB, op_embed_dim)
        self._node_in = tf.keras.layers.Dense(hidden_dim)
        self._config_in = _mlp([hidden_dim, hidden_dim], activation)
        self._blocks = [DirectedSAGEBlock(**width) for _ in range(num_layers)]
        self._pool_norm = tf.keras.layers.LayerNormalization()
        self._readout = _mlp([hidden_dim, hidden_dim], activation)
        attention = dict(units=hidden_dim, num_heads=attention_heads, num_points=inducing_points)
        attention.update(gated=config_attention == "gated")
        self._attention = ConfigSetAttention(**attention) if config_attention else None
        self._default_context = DefaultContext(**width) if default_context else None
        self._score_head = _mlp([hidden_dim, 1], activation)
        geometry = tile_geometry if isinstance(tile_geometry, dict) else {}  # true: no map
        self.geometry = TileGeometry(**geometry) if tile_geometry else None
        self._geometry_in = tf.keras.layers.Dense(hidden_dim) if tile_geometry else None
        self._add_rule()
        # The attention mixes a kernel's configs; the default context reads position 0 only,
        # which configs appended as padding leave in place.
        self.independent_configs = not config_attention
        self.default_first = default_context

    def encode(self, graph):
        ops, feats = _nodes(graph)
        nodes = tf.concat([self._op_embedding(ops), _stretch(feats)], axis=-1)
        geometry = self.geometry and self.geometry.kernel_part(graph)
        return self._node_in(nodes), geometry  # n: [num_nodes, hidden]

    def embed(self, graph, kernel, configs):
        nodes, geometry = kernel
        c = _apply(self._config_in, _stretch(configs))  # [batch, c, hidden]
        h = nodes[:, tf.newaxis, :] + _to_ops(graph, c)  # [num_nodes, c, hidden]
        if self.geometry is not None:
            h += self._geometry_in(self.geometry(graph, geometry, configs))
        for block in self._blocks:
            h = block(graph, h)
        pooled = _pool(graph, self._pool_norm(h), self._pooling)  # [batch, c, 3 hidden]
        return _apply(self._readout, tf.concat([pooled, c], axis=-1))

    def head(self, h):
        if self._attention is not None:
            h = self._attention(h)
        if self._default_context is not None:  # after the attention: straight into the score
            h = self._default_context(h)
        return tf.squeeze(_apply(self._score_head, h), -1)


class ResidualSAGEPlain(ResidualSAGE):
    """`ResidualSAGE` 48 wide without the default context: position 0 is not special."""

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        hidden_dim: int = 48,
        config_attention: bool = False,
        default_context: bool = False,
        **kwargs,
    ):
        plain = dict(config_attention=config_attention, default_context=default_context)
        super().__init__(num_configs, num_ops, hidden_dim=hidden_dim, **plain, **kwargs)


# --- The baselines of the TpuGraphs paper, under upstream's names, keywords and defaults --------
class _Baseline(_TileRanker):
    """The paper's baselines: an opcode embedding `E` (an L2 activity penalty), a backbone
    (`_backbone`), a `reduction` over each kernel's nodes and an MLP head to one score, L2
    `BASELINE_L2` on every dense kernel; the configs join before the backbone (`_JoinEarly`)
    or after the pooling (`_JoinLate`). `hidden_activation` is a `tf.nn` name."""

    _reduction = "sum"

    def __init__(self, num_configs: int, num_ops: int, *, op_embed_dim: int, **common):
        super().__init__(num_configs, num_ops, **common)
        reg = tf.keras.regularizers.l2(BASELINE_L2)
        self._op_embedding = tf.keras.layers.Embedding(
            OPCODE_VOCAB, op_embed_dim, activity_regularizer=reg
        )

    def _node_parts(self, graph: tfgnn.GraphTensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(opcode embeddings `[num_nodes, op_embed_dim]`, node features `[num_nodes, f]`)."""
        ops, feats = _nodes(graph)
        return self._op_embedding(ops), feats

    def head(self, h):
        return tf.squeeze(_apply(self._head, h), -1)


class _JoinEarly:
    """Config features on every node, then the backbone, once per config:
    `reduction_v backbone([E op(v) || config_j || x_v])`, the backbone's first dense layer
    split by `EarlyJoin` into a once-per-kernel part (`encode`) and a per-config part."""

    def encode(self, graph):
        ops, feats = self._node_parts(graph)
        widths = [ops.shape[-1], graph.node_sets["config"]["feats"].shape[-1], feats.shape[-1]]
        dense, neighbours = self._first_dense()
        join = EarlyJoin(dense, widths, neighbours=neighbours)
        return join, join.node_part(graph, ops, feats)

    def embed(self, graph, kernel, configs):
        join, node_part = kernel
        x = self._backbone(graph, join(graph, node_part, configs), joined=True)
        return _pool(graph, x, [self._reduction])  # [batch, c, hidden]


class _JoinLate:
    """The backbone on the kernel alone, the config features joined after pooling:
    `[reduction_v backbone([E op(v) || x_v]) || config_j]`."""

    def encode(self, graph):
        x = self._backbone(graph, tf.concat(self._node_parts(graph), axis=-1))
        return _pool(graph, x, [self._reduction])  # [batch, hidden]

    def embed(self, graph, pooled, configs):
        return tf.concat([_per_config(pooled, tf.shape(configs)[1]), configs], axis=-1)


class _SAGEBaseline(_Baseline):
    """The paper's GraphSAGE baselines: `num_gnns` `BidirectionalSAGELayer`s of width
    `hidden_dim`, a sum over the nodes, `final_mlp_layers` dense layers of width `hidden_dim`,
    then one score."""

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        num_gnns: int = 3,
        final_mlp_layers: int = 2,
        hidden_activation: str = "leaky_relu",
        hidden_dim: int = 64,
        op_embed_dim: int = 64,
        **common,
    ):
        _check(type(self).__name__, locals())
        super().__init__(num_configs, num_ops, op_embed_dim=op_embed_dim, **common)
        sage = dict(units=hidden_dim, activation=hidden_activation)
        self._gnn_layers = [BidirectionalSAGELayer(**sage) for _ in range(num_gnns)]
        dims = [hidden_dim] * final_mlp_layers + [1]
        self._head = _mlp(dims, getattr(tf.nn, hidden_activation), BASELINE_L2)
        self._add_rule()

    def _first_dense(self) -> tuple[Any, bool]:
        """(the first SAGE layer's dense, None without one; it sums over neighbours)."""
        if not self._gnn_layers:
            return None, True
        self._gnn_layers[0].built = True  # its variables exist (`EarlyJoin` builds them)
        return self._gnn_layers[0].dense, True

    def _backbone(self, graph, x, *, joined: bool = False):
        """The SAGE layers on `x`; `joined`: `x` is the first one's pre-activation."""
        layers = self._gnn_layers
        if joined and layers:
            x, layers = layers[0].finish(x), layers[1:]
        for layer in layers:
            x = layer(graph, x)
        return x


class EarlyJoinSAGE(_JoinEarly, _SAGEBaseline):
    """The paper's best tile baseline, config features on every node, then GraphSAGE:
    `score_j = MLP(sum_v SAGE^L([E op(v) || config_j || x_v]))`."""


class LateJoinSAGE(_JoinLate, _SAGEBaseline):
    """GraphSAGE on the kernel alone; config features join after pooling:
    `score_j = MLP([sum_v SAGE^L([E op(v) || x_v]) || config_j])`."""


class _ResGCNBaseline(_Baseline):
    """The paper's residual GCN baselines: a two-layer dense prenet to `hidden_dim`, `num_gnns`
    `ResidualGCNLayer`s (`directed`: producers, consumers and the node itself with their own
    weights), the activation, `reduction` over the nodes, a two-layer dense head to one score."""

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        num_gnns: int = 3,
        mlp_layers: int = 2,
        hidden_activation: str = "leaky_relu",
        hidden_dim: int = 64,
        op_embed_dim: int = 32,
        directed: bool = False,
        reduction: str = "sum",
        **common,
    ):
        _check(type(self).__name__, locals())
        super().__init__(num_configs, num_ops, op_embed_dim=op_embed_dim, **common)
        self._reduction, self._act = reduction, getattr(tf.nn, hidden_activation)
        gcn = dict(units=hidden_dim, mlp_layers=mlp_layers, activation=hidden_activation)
        # Attribute order fixes variable order; this is upstream's (GCN layers before prenet).
        self._gc_layers = [ResidualGCNLayer(**gcn, directed=directed) for _ in range(num_gnns)]
        self._prenet = _mlp([hidden_dim, hidden_dim], self._act, BASELINE_L2)
        self._head = _mlp([hidden_dim, 1], self._act, BASELINE_L2)
        self._add_rule()

    def _first_dense(self) -> tuple[Any, bool]:
        """(the prenet's first layer, which does not sum over neighbours)."""
        return self._prenet[0], False

    def _backbone(self, graph, x, *, joined: bool = False):
        """Prenet, GCN layers, activation; `joined`: `x` is the prenet's first pre-activation."""
        first = self._prenet[0]
        x = _apply(self._prenet[1:], first.activation(x) if joined else first(x))
        for layer in self._gc_layers:
            x = layer(graph, x)
        return self._act(x)


class EarlyJoinResGCN(_JoinEarly, _ResGCNBaseline):
    """Config features on every node, then a residual GCN:
    `score_j = MLP(reduction_v GCN^L(prenet([E op(v) || config_j || x_v])))`."""


class LateJoinResGCN(_JoinLate, _ResGCNBaseline):
    """Residual GCN on the kernel alone; config features join after pooling:
    `score_j = MLP([reduction_v GCN^L(prenet([E op(v) || x_v])) || config_j])`."""


class MLP(_JoinLate, _Baseline):
    """The paper's graph-free baseline: `score_j = MLP([reduction_v x_v || reduction_v E op(v)
    || config_j])`, `mlp_layers` dense layers of width `hidden_dim`, L2 as the others."""

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        op_embed_dim: int = 32,
        mlp_layers: int = 2,
        hidden_activation: str = "leaky_relu",
        hidden_dim: int = 64,
        reduction: str = "sum",
        **common,
    ):
        _check(type(self).__name__, locals())
        super().__init__(num_configs, num_ops, op_embed_dim=op_embed_dim, **common)
        self._reduction = reduction
        dims = [hidden_dim] * mlp_layers + [1]
        self._head = _mlp(dims, getattr(tf.nn, hidden_activation), BASELINE_L2)
        self._add_rule()

    def encode(self, graph):
        ops, feats = self._node_parts(graph)
        return tf.concat([_pool(graph, x, [self._reduction]) for x in (feats, ops)], axis=-1)


# --- Ensembles ------------------------------------------------------------------------------------

# The classes an `Ensemble` may hold, by the names its `members` use.
MEMBER_MODELS: dict[str, type[_TileRanker]] = {
    m.__name__: m
    for m in (ResidualSAGE, ResidualSAGEPlain, EarlyJoinSAGE, LateJoinSAGE, EarlyJoinResGCN)
    + (LateJoinResGCN, MLP)
}

# How `Ensemble` puts its members' scores on one scale, per kernel, before averaging.
COMBINE_METHODS = ("zscore", "rank", "minmax")

_EPSILON = 1e-12  # keeps a kernel whose scores are all equal finite (it normalises to 0)


@_plain
def normalise_scores(scores: tf.Tensor, method: str) -> tf.Tensor:
    """Puts each kernel's scores `[batch, n]` on a common scale, keeping their order: `zscore`
    (minus the row's mean, over its standard deviation), `minmax` (onto [0, 1]) or `rank` (the
    rank over `n - 1`; no gradient, so for combining trained models). `[batch, n]` float32."""
    scores = tf.cast(scores, tf.float32)
    if method == "zscore":
        mean, variance = tf.nn.moments(scores, axes=[-1], keepdims=True)
        return (scores - mean) / tf.sqrt(variance + _EPSILON)
    if method == "minmax":
        low = tf.reduce_min(scores, axis=-1, keepdims=True)
        high = tf.reduce_max(scores, axis=-1, keepdims=True)
        return (scores - low) / (high - low + _EPSILON)
    if method == "rank":
        ranks = tf.argsort(tf.argsort(scores, axis=-1, stable=True), axis=-1, stable=True)
        n = tf.cast(tf.maximum(tf.shape(scores)[-1] - 1, 1), tf.float32)
        return tf.cast(ranks, tf.float32) / n
    raise ValueError(f"combine={method!r} is not one of {', '.join(COMBINE_METHODS)}")


class Ensemble(_Ranker):
    """Several models as one: `raw = mean_m normalise(raw_m)` per kernel, then its own rule.

    Averaging independently trained rankers is a cheap, reliable gain (as in the Kaggle "Fast
    or Slow?" tile solutions). `members`: `[{"model": <name in MEMBER_MODELS>, "kwargs":
    {...}}, ...]`, each built as upstream builds a model and holding its variables, in order,
    before the ensemble's rule: the course's in-order reload restores an ensemble too.
    `combine`: one of `COMBINE_METHODS` (`normalise_scores`).
    """

    independent_configs = False  # scores are normalised over each kernel's configs

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        members: Sequence[dict],
        combine: str = "zscore",
        **rule,
    ):
        _check(type(self).__name__, locals())
        super().__init__(num_configs, **rule)
        self._combine = combine
        built = [_member(i, m, num_configs, num_ops) for i, m in enumerate(members)]
        self._ensemble_members = built
        self._add_rule()

    @property
    def members(self) -> list[tf.keras.Model]:
        """The member models, in order."""
        return list(self._ensemble_members)

    @property
    def default_first(self) -> bool:
        """Whether a member reads position 0 as the compiler's default."""
        return any(m.default_first for m in self._ensemble_members)

    @_plain
    def raw_scores(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        # Each member's rule tied in (0 times its weights), as in the member's own `call`.
        scores = [m.rule.tie(m.raw_scores(graph, num_configs)) for m in self._ensemble_members]
        normalised = [normalise_scores(s, self._combine) for s in scores]
        return tf.add_n(normalised) / float(len(normalised))


_SPEC = "{'model': <name>, 'kwargs': {...}}"  # one of an ensemble's `members`


def _member(index: int, spec: Any, num_configs: int, num_ops: int) -> _TileRanker:
    """`members[index]` built; `ValueError` naming it."""
    where = f"Ensemble: members[{index}]"
    if not isinstance(spec, dict) or "model" not in spec or set(spec) - {"model", "kwargs"}:
        raise ValueError(f"{where} must be {_SPEC}, got {spec!r}")
    name, kwargs = spec["model"], spec.get("kwargs") or {}
    if name not in MEMBER_MODELS:
        raise ValueError(f"{where}: unknown model {name!r}; known: {', '.join(MEMBER_MODELS)}")
    if not isinstance(kwargs, dict):
        raise ValueError(f"{where}: kwargs must be a dict, got {kwargs!r}")
    try:
        return MEMBER_MODELS[name](num_configs, num_ops, **kwargs)
    except TypeError as e:  # an unknown keyword: name the member it came from
        raise ValueError(f"{where} ({name}): {e}") from None
