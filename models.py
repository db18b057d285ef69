"""Graph neural networks that rank the tile configurations of TpuGraphs tile:xla kernels.

A drop-in replacement for `tpu_graphs/baselines/tiles/models.py`: copy this one file over it
and upstream's `tiles_train.py --model=<Name>` and the course prediction script keep working.
It imports TensorFlow, TF-GNN and the standard library only.

Every model follows upstream's calling convention:
  * `Model(num_configs, num_ops, **kwargs)`; `num_ops` is checked but never shapes a variable
    (the opcode embedding always has `OPCODE_VOCAB` rows), so a model trained on a subset of
    the data reloads on all of it. No variable depends on `num_configs` either, and no model
    keeps non-trainable state: the course's in-order copy of `trainable_variables` is complete.
  * `call(graph, training=False)` -> `[batch, num_configs]` scores for a batch of kernels
    merged into graph components, each with `num_configs` configs.
  * `forward(graph, num_configs)` -> `[batch, num_configs]`; upstream calls it on one kernel
    with all its configs. `num_configs` may be an int or a scalar tensor. Configs are scored
    in chunks, so a 6000-config kernel never builds a `[num_nodes, 6000, dim]` tensor.
  * Lower score = predicted faster (ListMLE on runtimes ranks slow configs high).
  * The ranking rule, two last trainable scalars that training leaves as they are and our
    trainer fits on validation afterwards (both on by default):
      - `default_margin`: subtracted from config 0's (the compiler's default's) score. A
        positive margin ranks another config above config 0 only where the model prefers it
        by more than the margin; a negative one puts config 0 first only where the model
        prefers it by more (for a model that favours the default too much). 0 where it does
        not lower validation's top-1 error.
      - `keep_default_gate`, 0 or 1: when 1, `forward` returns each config's place in a
        ranking that keeps config 0 among the first `KEEP_DEFAULT_TOP`.
    So a plain argsort of `forward`, as the course script takes it, ranks as the run did.
    `raw_scores` are the model's own; `config_scores` have the margin applied, `forward` the
    whole rule; `call` (training) applies neither.
  * `default_first`: whether the model reads the config at position 0 as the compiler's
    default (`ResidualSAGE(default_context=True)`). Position is the only carrier upstream's
    GraphTensor has. `forward` gets every config in file order, config 0 (inferred to be the
    default in the real collection) first; `tpu-tiles train` samples config 0 first for such a
    model; upstream's `tiles_train.py` samples configs in random order, so under it the model
    learns that position 0 is not special: it stays correct, it just cannot use the default.

The `GraphTensor` has node sets `op` (features `op`: opcode, `feats`: normalised floats),
`config` (`feats`), `g`; edge set `feed` runs from consumer (source) to producer (target).

Models (`MEMBER_MODELS` names them all):
  * `ResidualSAGE`: residual, layer-normalised GraphSAGE over the directed dataflow graph
    with the configs joined onto every node, sum+mean+max pooling, reading config 0 as the
    compiler's default, optionally an attention block through which the configs of one kernel
    see each other. Its defaults are the configuration the benchmark suite recommends, so
    `--model=ResidualSAGE` alone trains it.
  * `ResidualSAGEPlain`: ResidualSAGE's first configuration without the attention: 48 wide,
    no default context.
  * `EarlyJoinSAGE`, `LateJoinSAGE`, `EarlyJoinResGCN`, `LateJoinResGCN`, `MLP`: our own
    implementations of the baselines of the TpuGraphs paper, with upstream's constructor
    arguments, defaults, layer structure and L2 regularisation.
  * `Ensemble`: several of the above as one model; per-kernel normalised scores, averaged.

References: TpuGraphs, Phothilimthana et al., NeurIPS 2023 Datasets and Benchmarks;
GraphSAGE, Hamilton et al., NeurIPS 2017; GCN, Kipf & Welling, ICLR 2017; Set Transformer
(induced set attention), Lee et al., ICML 2019.
"""

from __future__ import annotations

import math
import os
import sys
from importlib import metadata, util
from typing import Any, Callable, Sequence


def _prefer_keras_2() -> None:
    """Makes tf.keras mean Keras 2 where TensorFlow >= 2.16 would give Keras 3.

    TF-GNN 1.0.3 runs on Keras 2 only, which TF >= 2.16 takes from the `tf-keras` package when
    `TF_USE_LEGACY_KERAS=1` is set before TensorFlow's first import. Where TensorFlow is
    already imported, it is too late: TF-GNN's import then names the fix.
    """
    if "tensorflow" in sys.modules or util.find_spec("tf_keras") is None:
        return
    try:
        keras_3 = metadata.version("keras").startswith("3.")
    except metadata.PackageNotFoundError:
        return
    if keras_3:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


_prefer_keras_2()

import tensorflow as tf  # noqa: E402  (after the Keras choice above)
import tensorflow_gnn as tfgnn  # noqa: E402

# Opcode ids in TpuGraphs run 0..120. Sizing the embedding by this constant rather than by the
# data's `num_ops` keeps variable shapes identical between toy-data and full-data builds.
OPCODE_VOCAB = 128

# Configs per chunk in `forward`: bounds the [num_nodes, chunk, dim] tensors on big kernels.
DEFAULT_CHUNK = 512

# The ranking rule keeps config 0 among this many first places: the 5 the Kaggle metric reads
# (`tpu_tiles_models.metrics.KEEP_TOP`, whose numpy rule this one matches exactly).
KEEP_DEFAULT_TOP = 5

# Upstream's baselines put this L2 weight on every dense kernel and on the opcode embedding's
# output (an activity regulariser); Keras adds both to the training loss.
BASELINE_L2 = 1e-4

# Marks code without tensor-dependent Python control flow. Autograph then leaves it (and the
# TF-GNN functions it calls) unconverted, which makes tracing for `fit` and `save` cheaper.
_plain = tf.autograph.experimental.do_not_convert


# ---------------------------------------------------------------------------------------------
# Argument checks (one `ValueError` naming the argument, as for every Keras layer)
# ---------------------------------------------------------------------------------------------


def _check_count(owner: str, name: str, value: Any, minimum: int) -> int:
    """`value` as an int, or `ValueError` naming `owner`'s argument `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def _activation(owner: str, name: str, value: Any) -> Callable[[tf.Tensor], tf.Tensor]:
    """The activation called `value`: `tf.nn.<value>` as upstream, else a Keras activation."""
    if isinstance(value, str) and callable(getattr(tf.nn, value, None)):
        return getattr(tf.nn, value)
    try:
        return tf.keras.activations.get(value)
    except (ValueError, TypeError):
        raise ValueError(
            f"{owner}: {name}={value!r} is not an activation; e.g. 'leaky_relu', 'relu', 'gelu'"
        ) from None


def _check_reduction(owner: str, name: str, value: Any) -> str:
    """A TF-GNN pooling name such as `"sum"` or `"mean|max"`, or `ValueError`."""
    known = tfgnn.get_registered_reduce_operation_names()
    if not isinstance(value, str) or not all(part in known for part in value.split("|")):
        raise ValueError(
            f"{owner}: {name}={value!r} is not a TF-GNN reduction; one of {sorted(known)} "
            "or several joined by '|'"
        )
    return value


class _DenseStack(tf.keras.layers.Layer):
    """Dense layers applied in order: what `tf.keras.Sequential` does, minus its InputLayer.

    A Sequential built on a known shape records an `InputLayer` in the SavedModel's metadata;
    Keras 2.16+ (tf-keras) writes an `optional` key into it that Keras 2.13-2.15's
    `load_model` rejects, so a model saved on the modern stack would not reload on the
    course's. The variables and their order are those of the Sequential it replaces.
    """

    def __init__(self, dims: Sequence[int], activation: Any, l2: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self._dims, self._activation, self._l2 = list(dims), activation, l2
        regularizer = tf.keras.regularizers.l2(l2) if l2 else None
        self._dense_layers = [
            tf.keras.layers.Dense(
                dim,
                activation=None if i == len(dims) - 1 else activation,
                kernel_regularizer=regularizer,
            )
            for i, dim in enumerate(dims)
        ]

    @property
    def layers(self) -> list[tf.keras.layers.Dense]:
        """The Dense layers, first to last (as `Sequential.layers`)."""
        return list(self._dense_layers)

    def build(self, input_shape: tf.TensorShape) -> None:
        shape = tf.TensorShape(input_shape)
        for layer in self._dense_layers:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        super().build(input_shape)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        for layer in self._dense_layers:
            x = layer(x)
        return x

    def get_config(self) -> dict[str, Any]:
        activation = tf.keras.activations.serialize(tf.keras.activations.get(self._activation))
        return {
            **super().get_config(),
            "dims": self._dims,
            "activation": activation,
            "l2": self._l2,
        }


def _mlp(dims: Sequence[int], activation: Any, l2: float = 0.0) -> _DenseStack:
    """Dense layers of widths `dims` with `activation` between them (none after the last).

    `l2` > 0 puts an L2 regulariser of that weight on every kernel. No `dims`: the identity.
    """
    return _DenseStack(dims, activation, l2)


# ---------------------------------------------------------------------------------------------
# Graph helpers (functions of the GraphTensor; no variables)
# ---------------------------------------------------------------------------------------------


@_plain
def _mean_over_neighbours(graph: tfgnn.GraphTensor, h: tf.Tensor, *, receiver: str) -> tf.Tensor:
    """Means `h` over `feed` neighbours: producers for receiver=SOURCE, consumers for TARGET.

    `h` `[num_nodes, ...]` -> `[num_nodes, ...]`; nodes without such neighbours get zeros.
    """
    adjacency = _adjacency(graph, (receiver,))
    rows = adjacency.indices[:, 0]
    count = tf.math.unsorted_segment_sum(adjacency.values, rows, adjacency.dense_shape[0])
    weights = tf.gather(1.0 / count, rows)  # every row gathered has count >= 1
    return _sum_over_adjacency(adjacency.with_values(weights), h)


@_plain
def _adjacency(graph: tfgnn.GraphTensor, receivers: Sequence[str]) -> tf.sparse.SparseTensor:
    """`[num_nodes, num_nodes]` with a 1 at (v, u) for each `feed` edge with v at one of its
    `receivers` ends and u at the other (both ends given: each edge counts both ways)."""
    adjacency = graph.edge_sets["feed"].adjacency
    ends = {tfgnn.SOURCE: adjacency.source, tfgnn.TARGET: adjacency.target}
    pairs = [tf.stack([ends[r], ends[tfgnn.reverse_tag(r)]], axis=1) for r in receivers]
    indices = tf.cast(tf.concat(pairs, axis=0), tf.int64)
    n = tf.cast(graph.node_sets["op"].total_size, tf.int64)
    return tf.sparse.SparseTensor(indices, tf.ones([tf.shape(indices)[0]]), tf.stack([n, n]))


@_plain
def _sum_over_adjacency(adjacency: tf.sparse.SparseTensor, h: tf.Tensor) -> tf.Tensor:
    """`adjacency @ h` on `h` `[num_nodes, ...]`: each node's sum over its neighbours' rows.

    One sparse-dense product on `[num_nodes, prod(...)]`; gathering one message per edge and
    summing them (TF-GNN's broadcast and pool) builds `[num_edges, ...]` first and costs about
    three times as much on `[num_nodes, c, d]` states.
    """
    flat = tf.reshape(h, tf.stack([tf.shape(h)[0], -1]))
    out = tf.reshape(tf.sparse.sparse_dense_matmul(adjacency, flat), tf.shape(h))
    out.set_shape(h.shape)
    return out


@_plain
def _sum_over_edges(
    graph: tfgnn.GraphTensor, h: tf.Tensor, *, receiver: str, on_edges: bool = False
) -> tf.Tensor:
    """Sums over the `feed` edges into each node at their `receiver` end.

    `h` `[num_nodes, ...]` is taken from the other end of each edge, or, with `on_edges`,
    `h` `[num_edges, ...]` is already one value per edge. Returns `[num_nodes, ...]`.
    """
    if on_edges:
        return tfgnn.pool_edges_to_node(graph, "feed", receiver, "sum", feature_value=h)
    return _sum_over_adjacency(_adjacency(graph, (receiver,)), h)


@_plain
def _sum_both_ways(graph: tfgnn.GraphTensor, h: tf.Tensor) -> tf.Tensor:
    """Sums `h` `[num_nodes, ...]` over each node's producers and consumers together."""
    return _sum_over_adjacency(_adjacency(graph, (tfgnn.TARGET, tfgnn.SOURCE)), h)


@_plain
def _opcodes(graph: tfgnn.GraphTensor) -> tf.Tensor:
    """Opcode ids `[num_nodes]` as int32, clipped into the embedding's vocabulary."""
    ops = tf.cast(graph.node_sets["op"]["op"], tf.int32)
    return tf.clip_by_value(ops, 0, OPCODE_VOCAB - 1)


@_plain
def _node_features(graph: tfgnn.GraphTensor) -> tf.Tensor:
    """Normalised node features `[num_nodes, node_dim]` as float32."""
    return tf.cast(graph.node_sets["op"]["feats"], tf.float32)


@_plain
def _config_features(graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
    """Config features of each component: `[batch, num_configs, config_dim]` float32."""
    feats = tf.cast(graph.node_sets["config"]["feats"], tf.float32)
    batch = tf.shape(graph.node_sets["config"].sizes)[0]
    return tf.reshape(feats, [batch, num_configs, feats.shape[-1]])


@_plain
def _broadcast_to_ops(graph: tfgnn.GraphTensor, per_kernel: tf.Tensor) -> tf.Tensor:
    """`[batch, ...]` per-component values -> `[num_nodes, ...]` on each component's op nodes."""
    return tfgnn.broadcast_context_to_nodes(graph, "op", feature_value=per_kernel)


@_plain
def _per_op(graph: tfgnn.GraphTensor, per_kernel: tf.Tensor) -> tf.Tensor:
    """`[batch, ...]` per-component values, broadcastable against `[num_nodes, ...]`.

    `_broadcast_to_ops` when there are several components; `[1, ...]` itself when the graph
    has one (known when traced), which arithmetic broadcasts without a copy per node.
    """
    if graph.node_sets["op"].sizes.shape[0] == 1:
        return per_kernel
    return _broadcast_to_ops(graph, per_kernel)


@_plain
def _pool_ops(graph: tfgnn.GraphTensor, h: tf.Tensor, reductions: Sequence[str]) -> tf.Tensor:
    """Pools `h` `[num_nodes, ..., d]` per component -> `[batch, ..., d * len(reductions)]`."""
    pooled = [tfgnn.pool_nodes_to_context(graph, "op", r, feature_value=h) for r in reductions]
    return tf.concat(pooled, axis=-1)


@_plain
def _times(x: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
    """`x` `[..., d]` times `w` `[d, u]` -> `[..., u]`, as one 2-D product (a Dense's kernel)."""
    flat = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), w)
    out = tf.reshape(flat, tf.concat([tf.shape(x)[:-1], [w.shape[-1]]], axis=0))
    out.set_shape(x.shape[:-1].concatenate([w.shape[-1]]))
    return out


def _config_width(graph: tfgnn.GraphTensor) -> int:
    """Width of the config features (static)."""
    return int(graph.node_sets["config"]["feats"].shape[-1])


def _row_blocks(mlp: _DenseStack, widths: Sequence[int]) -> list[tf.Tensor]:
    """The kernel of `mlp`'s first Dense cut into row blocks of `widths`.

    `dense(concat(parts))` is `sum(part_i @ block_i) + bias` before the activation, so a part
    shared by many rows can be multiplied once. `mlp` is built for inputs of `sum(widths)`
    if it was not yet (its variables are those a call on the joined input creates).
    """
    if not mlp.built:
        mlp.build(tf.TensorShape([None, sum(widths)]))
    return tf.split(mlp.layers[0].kernel, list(widths), axis=0)


@_plain
def _early_join(
    graph: tfgnn.GraphTensor, left: tf.Tensor, configs: tf.Tensor, right: tf.Tensor
) -> tf.Tensor:
    """`[left || config || right]` on every op node and config: `[num_nodes, c, a + d + b]`.

    `left` `[num_nodes, a]`, `configs` `[batch, c, d]` (each component's own), `right`
    `[num_nodes, b]`. Models split their first layer instead where they can (`_row_blocks`).
    """
    c = tf.shape(configs)[1]
    joined = [_repeat_per_config(left, c), _broadcast_to_ops(graph, configs)]
    return tf.concat([*joined, _repeat_per_config(right, c)], axis=-1)


@_plain
def _repeat_per_config(x: tf.Tensor, num_configs: tf.Tensor) -> tf.Tensor:
    """`[rows, d]` -> `[rows, num_configs, d]`, the same row for every config."""
    return tf.tile(x[:, tf.newaxis, :], [1, num_configs, 1])


# ---------------------------------------------------------------------------------------------
# Layers (each registered for Keras serialisation, with `get_config`)
# ---------------------------------------------------------------------------------------------


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class LogStretch(tf.keras.layers.Layer):
    """Appends a log-like stretch of each feature to the feature itself.

    Upstream min-max scales every column to [0, 1], which squashes heavy-tailed columns
    (shape products reach 1e9) to about zero for all but the largest kernels. The stretch
    `asinh(scale * x) / asinh(scale)` gives their small values back a usable range.

    Args:
      scale: how strongly small values are magnified; must be positive.

    Call: `x` `[..., d]` -> `[..., 2 * d]`.
    """

    def __init__(self, *, scale: float = 1e4, **kwargs):
        super().__init__(**kwargs)
        if scale <= 0:
            raise ValueError(f"LogStretch: scale must be positive, got {scale}")
        self.scale = float(scale)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.cast(x, tf.float32)
        stretched = tf.math.asinh(self.scale * x) / math.asinh(self.scale)
        return tf.concat([x, stretched], axis=-1)

    def get_config(self) -> dict:
        return {**super().get_config(), "scale": self.scale}


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class DirectedSAGEBlock(tf.keras.layers.Layer):
    """One residual GraphSAGE block over the `feed` edges, direction-aware.

    `h <- h + W_out act(W_self z + W_prod mean_producers(z) + W_cons mean_consumers(z))`
    with `z = LayerNorm(h)` (pre-norm residual). Producers and consumers get separate weights
    because data flows one way: a node's cost depends on what feeds it and what it feeds.

    Args:
      units: width of `h`.
      activation: name of a Keras activation.

    Call: `(graph, h)` with `h` `[num_nodes, num_configs, units]` -> same shape.
    """

    def __init__(self, *, units: int, activation: str = "gelu", **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.activation = activation
        self._norm = tf.keras.layers.LayerNormalization()
        self._self = tf.keras.layers.Dense(units)
        self._prod = tf.keras.layers.Dense(units, use_bias=False)
        self._cons = tf.keras.layers.Dense(units, use_bias=False)
        self._out = tf.keras.layers.Dense(units)
        self._act = tf.keras.activations.get(activation)

    def call(self, graph: tfgnn.GraphTensor, h: tf.Tensor) -> tf.Tensor:
        z = self._norm(h)
        from_producers = _mean_over_neighbours(graph, z, receiver=tfgnn.SOURCE)
        from_consumers = _mean_over_neighbours(graph, z, receiver=tfgnn.TARGET)
        update = self._self(z) + self._prod(from_producers) + self._cons(from_consumers)
        return h + self._out(self._act(update))

    def get_config(self) -> dict:
        return {**super().get_config(), "units": self.units, "activation": self.activation}


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class ConfigSetAttention(tf.keras.layers.Layer):
    """Lets the configs of one kernel see each other (induced set attention).

    A few learned inducing points first attend over all configs of the kernel, then every
    config attends over the inducing points: O(num_configs * num_points) memory, so it runs on
    a 6000-config kernel at once, and its softmax averages do not change scale with the
    number of configs (10 sampled in training, all of them at inference).

    Args:
      units: width of the config embeddings.
      num_heads: attention heads.
      num_points: inducing points.

    Call: `h` `[batch, num_configs, units]` -> same shape.
    """

    def __init__(self, *, units: int, num_heads: int = 4, num_points: int = 8, **kwargs):
        super().__init__(**kwargs)
        if units % num_heads:
            raise ValueError(f"ConfigSetAttention: units={units} not divisible by num_heads")
        self.units, self.num_heads, self.num_points = units, num_heads, num_points
        key_dim = units // num_heads
        self._points = self.add_weight(
            name="inducing_points", shape=[num_points, units], initializer="glorot_uniform"
        )
        self._norm_in = tf.keras.layers.LayerNormalization()
        self._summarise = tf.keras.layers.MultiHeadAttention(num_heads, key_dim)
        self._broadcast = tf.keras.layers.MultiHeadAttention(num_heads, key_dim)
        self._norm_out = tf.keras.layers.LayerNormalization()
        self._ffn = tf.keras.layers.Dense(units, activation="gelu")

    def call(self, h: tf.Tensor) -> tf.Tensor:
        z = self._norm_in(h)
        batch = tf.shape(h)[0]
        points = tf.tile(self._points[tf.newaxis], [batch, 1, 1])
        summary = self._summarise(points, z)  # [batch, num_points, units]
        h = h + self._broadcast(z, summary)
        return h + self._ffn(self._norm_out(h))

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "units": self.units,
            "num_heads": self.num_heads,
            "num_points": self.num_points,
        }


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class DefaultContext(tf.keras.layers.Layer):
    """Marks the config at position 0 as the compiler's default and shows it to every config.

    Config 0 is the default tile in the real collection (inferred), and the normaliser every
    runtime is divided by is the default's runtime, so how a tile compares with the default
    is what the targets measure. Each config sees the default's embedding beside its own and
    an indicator of being the default itself:
    `h_i <- h_i + W_out act(W [z_i || z_0 || 1{i = 0}])` with `z = LayerNorm(h)`. What both
    are worth is learned from the training data: where position 0 is not special, that too.

    Args:
      units: width of the config embeddings.
      activation: name of a Keras activation.

    Call: `h` `[batch, num_configs, units]` -> same shape; position 0 is the default.
    """

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

    def get_config(self) -> dict:
        return {**super().get_config(), "units": self.units, "activation": self.activation}


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class BidirectionalSAGELayer(tf.keras.layers.Layer):
    """The GraphSAGE layer of the TpuGraphs baselines, with `feed` edges taken both ways.

    `x <- l2_normalize(act(W [sum_{neighbours} x || x] + b))`: sum aggregation over the
    producers and consumers of each node together, concatenated with the node's own state
    (GraphSAGE, Hamilton et al., NeurIPS 2017, as used by Phothilimthana et al., 2023).

    Args:
      units: output width.
      activation: name of a `tf.nn` (or Keras) activation.
      l2_regularization: L2 weight on `W`.

    Call: `(graph, x)` with `x` `[num_nodes, ..., d]` -> `[num_nodes, ..., units]`.
    """

    def __init__(
        self,
        *,
        units: int,
        activation: str = "leaky_relu",
        l2_regularization: float = BASELINE_L2,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = _check_count("BidirectionalSAGELayer", "units", units, 1)
        self.activation = activation
        self.l2_regularization = l2_regularization
        self._act = _activation("BidirectionalSAGELayer", "activation", activation)
        self._dense = _mlp([units], None, l2_regularization)

    def call(self, graph: tfgnn.GraphTensor, x: tf.Tensor) -> tf.Tensor:
        # W [S x || x] = S (x W_n) + x W_self: the product first, so the neighbour sum runs on
        # `units` columns and no [num_nodes, ..., 2d] concatenation is built.
        d = x.shape[-1]
        w_neighbours, w_own = _row_blocks(self._dense, [d, d])
        from_neighbours = _sum_both_ways(graph, _times(x, w_neighbours))
        return self._output(from_neighbours + _times(x, w_own) + self._dense.layers[0].bias)

    def _output(self, pre_activation: tf.Tensor) -> tf.Tensor:
        return tf.math.l2_normalize(self._act(pre_activation), axis=-1)

    # `call` on an early join, x[v, j] = [left[v] || config_j || right[v]] (config j of v's
    # kernel), without building x: W [S x || x] is linear in x's parts (S sums over both
    # directions), and the neighbours' copies of one config sum to deg(v) times it, so
    #   W [S x || x] = W_node [S left || S right || left || right] + deg(v) config_j W_sc
    #                  + config_j W_c,
    # the first term once per kernel (`node_half`), the others once per config (`joined`).
    # Same result up to float rounding, without the [num_nodes, c, a + d + b] input and its
    # [num_edges, c, a + d + b] messages, which cost more than the rest of the model.

    def _joined_blocks(self, a: int, d: int, b: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """W's rows for (the node parts, neighbours' configs, own config)."""
        sl, sc, sr, ol, oc, or_ = _row_blocks(self._dense, [a, d, b] * 2)
        self.built = True  # its variables exist, though `call` never ran (saving checks it)
        return tf.concat([sl, sr, ol, or_], axis=0), sc, oc

    def node_half(
        self, graph: tfgnn.GraphTensor, left: tf.Tensor, right: tf.Tensor, config_width: int
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """The per-node part of the early join: (`[num_nodes, units]`, degrees `[num_nodes, 1]`).

        `left` `[num_nodes, a]` and `right` `[num_nodes, b]` flank configs of `config_width`.
        """
        w_node, _, _ = self._joined_blocks(left.shape[-1], config_width, right.shape[-1])
        parts = [_sum_both_ways(graph, left), _sum_both_ways(graph, right), left, right]
        term = tf.matmul(tf.concat(parts, axis=-1), w_node) + self._dense.layers[0].bias
        degree = _sum_both_ways(graph, tf.ones_like(left[:, :1]))
        return term, degree

    def joined(
        self,
        graph: tfgnn.GraphTensor,
        node_half: tuple[tf.Tensor, tf.Tensor],
        configs: tf.Tensor,
        left_width: int,
    ) -> tf.Tensor:
        """`call` on the early join of `node_half`'s nodes and `configs` `[batch, c, d]`.

        Returns `[num_nodes, c, units]`, as `call(graph, x)` on the joined x.
        """
        term, degree = node_half
        d = configs.shape[-1]
        right_width = self._dense.layers[0].kernel.shape[0] // 2 - left_width - d
        _, w_neighbours, w_own = self._joined_blocks(left_width, d, right_width)
        # Per node v, `[config_j || 1] @ [[deg(v) W_sc + W_c], [term(v)]]`: one small product
        # per node builds the [num_nodes, c, units] pre-activation in one pass over it.
        per_node = degree[:, :, tf.newaxis] * w_neighbours + w_own  # [num_nodes, d, units]
        weights = tf.concat([per_node, term[:, tf.newaxis, :]], axis=1)
        configs = tf.concat([configs, tf.ones_like(configs[..., :1])], axis=-1)
        return self._output(tf.matmul(_per_op(graph, configs), weights))

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "units": self.units,
            "activation": self.activation,
            "l2_regularization": self.l2_regularization,
        }


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class ResidualGCNLayer(tf.keras.layers.Layer):
    """The residual graph-convolution layer of the TpuGraphs baselines.

    With `P = D^-1 (A + I)`, where `A[i, j] = 1` for a `feed` edge from source `j` to target
    `i` and `D` holds the row sums of `A + I` (GCN propagation, Kipf & Welling, ICLR 2017,
    normalised by rows), and `y = act(x)`:
      * undirected: `x <- x + f(P y + P^T y + y)`;
      * directed: `x <- x + f_fwd(P y) + f_rev(P^T y) + f_self(y)`.
    Each `f` is `mlp_layers` dense layers of width `units` with `activation` between them.

    Args:
      units: width of `x` (input and output).
      mlp_layers: dense layers in each `f` (0: `f` is the identity).
      activation: name of a `tf.nn` (or Keras) activation.
      directed: separate weights for the two edge directions and the node itself.
      l2_regularization: L2 weight on every kernel.

    Call: `(graph, x)` with `x` `[num_nodes, ..., units]` -> same shape.
    """

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
        self.units = _check_count("ResidualGCNLayer", "units", units, 1)
        self.mlp_layers = _check_count("ResidualGCNLayer", "mlp_layers", mlp_layers, 0)
        self.activation = activation
        self.directed = bool(directed)
        self.l2_regularization = l2_regularization
        self._act = _activation("ResidualGCNLayer", "activation", activation)
        # One f undirected; f_fwd, f_rev, f_self (in this order) when directed.
        self._fs = [
            _mlp([units] * mlp_layers, self._act, l2_regularization)
            for _ in range(3 if self.directed else 1)
        ]

    def call(self, graph: tfgnn.GraphTensor, x: tf.Tensor) -> tf.Tensor:
        y = self._act(x)
        # The row sums of A + I: 1 + the number of edges into each node as their target.
        targets = graph.edge_sets["feed"].adjacency.target
        degree = 1.0 + _sum_over_edges(
            graph, tf.ones_like(targets, tf.float32), receiver=tfgnn.TARGET, on_edges=True
        )
        degree = tf.reshape(degree, [-1] + [1] * (y.shape.rank - 1))
        forward = (_sum_over_edges(graph, y, receiver=tfgnn.TARGET) + y) / degree  # P y
        scaled = y / degree
        reverse = _sum_over_edges(graph, scaled, receiver=tfgnn.SOURCE) + scaled  # P^T y
        if self.directed:
            f_fwd, f_rev, f_self = self._fs
            return x + f_fwd(forward) + f_rev(reverse) + f_self(y)
        return x + self._fs[0](forward + reverse + y)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "units": self.units,
            "mlp_layers": self.mlp_layers,
            "activation": self.activation,
            "directed": self.directed,
            "l2_regularization": self.l2_regularization,
        }


# ---------------------------------------------------------------------------------------------
# The ranking rule a trained model carries in its weights
# ---------------------------------------------------------------------------------------------


@_plain
def keep_default_places(scores: tf.Tensor, top: int = KEEP_DEFAULT_TOP) -> tf.Tensor:
    """Each config's place (0 = first) in the ranking of `scores` `[batch, n]` (lowest first,
    ties in index order) with config 0 moved to place `top - 1` when it ranks lower: the
    `top - 1` first stay, the configs between move down one. `[batch, n]` float32."""
    order = tf.argsort(scores, axis=-1, stable=True)
    place = tf.argsort(order, axis=-1, stable=True)  # [batch, n]
    first = place[:, :1]  # config 0's place, [batch, 1]
    between = (place >= top - 1) & (place < first)
    moved = tf.where(between, place + 1, place)
    is_first = tf.equal(tf.range(tf.shape(place)[-1]), 0)[tf.newaxis, :]
    moved = tf.where(is_first, tf.fill(tf.shape(place), top - 1), moved)
    return tf.cast(tf.where(first >= top, moved, place), tf.float32)


class _RankingRule:
    """Mixin for a `tf.keras.Model`: the rule's two weights (the margin, the keep-default
    gate), `config_scores` = `raw_scores` with the margin, `forward` = the gate's rule on those.

    The rule's scalars are the model's own weights, so Keras lists them after every layer's
    variables (gate, then margin): the other variables keep their order, and the course's
    in-order copy of `trainable_variables` carries them. They are trainable only so that the
    copy carries them; `call` adds them times zero, so their gradients are exactly 0 and Adam
    leaves them as they are (a missing gradient would work too, but Keras warns about it in
    every upstream training log). They are fitted after training, when a run's hash (its kwargs
    included) is fixed: hence weights, not keywords.
    """

    def _add_rule(self, keep_default_gate: bool, default_margin: bool) -> None:
        for name, value in (
            ("keep_default_gate", keep_default_gate),
            ("default_margin", default_margin),
        ):
            if not isinstance(value, bool):
                raise ValueError(
                    f"{type(self).__name__}: {name} must be true or false, got {value!r}"
                )
        self._gate = self._margin = None
        if keep_default_gate:
            self._gate = self.add_weight(
                name="keep_default_gate", shape=(), initializer="zeros", trainable=True
            )
        if default_margin:
            self._margin = self.add_weight(
                name="default_margin", shape=(), initializer="zeros", trainable=True
            )

    @property
    def default_margin(self) -> float | None:
        """What `config_scores` subtracts from config 0's score; None without the weight."""
        return None if self._margin is None else float(self._margin.numpy())

    def set_default_margin(self, margin: float) -> None:
        """Sets the margin (after validation fitted it); `ValueError` without the weight or for
        a margin that is not finite."""
        if self._margin is None:
            raise ValueError(f"{type(self).__name__} was built with default_margin=false")
        if not math.isfinite(margin):
            raise ValueError(f"{type(self).__name__}: the margin must be finite, got {margin}")
        self._margin.assign(margin)

    @property
    def keeps_default(self) -> bool | None:
        """Whether `forward` keeps config 0 among the first places; None without a gate."""
        return None if self._gate is None else bool(self._gate.numpy() > 0.5)

    def set_keeps_default(self, keep: bool) -> None:
        """Sets the rule (after validation chose); `ValueError` for a model without a gate."""
        if self._gate is None:
            raise ValueError(f"{type(self).__name__} was built with keep_default_gate=false")
        self._gate.assign(1.0 if keep else 0.0)

    def _with_rule(self, scores: tf.Tensor) -> tf.Tensor:
        """`call`'s scores, tied to the rule's weights with a zero factor (see the class)."""
        for weight in (self._gate, self._margin):
            if weight is not None:
                scores = scores + 0.0 * weight
        return scores

    def raw_scores(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        """The model's own scores of all `num_configs` configs: `[batch, num_configs]`."""
        raise NotImplementedError

    @_plain
    def config_scores(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        """`raw_scores` with the margin subtracted from config 0's: `[batch, num_configs]`."""
        scores = self.raw_scores(graph, num_configs)
        if self._margin is None:
            return scores
        first = tf.one_hot(0, tf.shape(scores)[-1], dtype=scores.dtype)  # [num_configs]
        return scores - self._margin * first[tf.newaxis, :]

    @_plain
    def forward(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        """`config_scores` ranked by the rule: `[batch, num_configs]`, lowest first. With the
        gate on, each config's place (`keep_default_places`); otherwise the scores."""
        scores = self.config_scores(graph, num_configs)
        if self._gate is None:
            return scores
        return tf.where(self._gate > 0.5, keep_default_places(scores), scores)


# ---------------------------------------------------------------------------------------------
# The calling convention shared by every model
# ---------------------------------------------------------------------------------------------


class _TileRanker(_RankingRule, tf.keras.Model):
    """Upstream's model protocol: `call` on training batches, chunked `forward` on kernels.

    Subclasses implement three hooks:
      * `_encode_kernel(graph, training)`: whatever does not depend on the configs, computed
        once per `call` or `forward` (any nest of tensors);
      * `_embed(graph, kernel, configs, training)`: embeds each config of
        `[batch, c, config_dim]` on its own, so `forward` may split the configs into chunks;
      * `_finish(embeddings, training)`: sees all configs of a kernel at once and scores them.

    Args:
      num_configs: configs per kernel in the training batches that `call` receives.
      num_ops: 1 + the largest opcode id in the data; must be at most `OPCODE_VOCAB`.
      chunk_size: configs scored at once by `forward`.
      keep_default_gate: whether the model carries the keep-default gate (`_RankingRule`).
      default_margin: whether the model carries config 0's margin (`_RankingRule`).
    """

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        chunk_size: int = DEFAULT_CHUNK,
        keep_default_gate: bool = True,
        default_margin: bool = True,
    ):
        super().__init__()
        if num_ops > OPCODE_VOCAB:
            raise ValueError(f"num_ops={num_ops} exceeds the opcode vocabulary {OPCODE_VOCAB}")
        owner = type(self).__name__
        self._num_configs = int(num_configs)
        self._num_ops = int(num_ops)
        self._chunk_size = _check_count(owner, "chunk_size", chunk_size, 1)
        self._add_rule(keep_default_gate, default_margin)

    @property
    def independent_configs(self) -> bool:
        """Whether a config's score ignores the kernel's other configs: then configs appended
        to a kernel (padding, so that kernels of other sizes are scored together) leave the
        others' scores as they are. True unless `_finish` mixes configs."""
        return True

    @property
    def default_first(self) -> bool:
        """Whether the config at position 0 is read as the compiler's default (see module)."""
        return False

    def call(self, graph: tfgnn.GraphTensor, training: bool = False) -> tf.Tensor:
        scores = self._score(graph, _config_features(graph, self._num_configs), training)
        return self._with_rule(scores)

    @_plain
    def _score(self, graph: tfgnn.GraphTensor, configs: tf.Tensor, training: bool) -> tf.Tensor:
        """The three hooks on `configs` `[batch, c, config_dim]` -> `[batch, c]`."""
        kernel = self._encode_kernel(graph, training)
        return self._finish(self._embed(graph, kernel, configs, training), training)

    @_plain
    def raw_scores(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        """Scores all `num_configs` configs of each component: `[batch, num_configs]`.

        `num_configs` may be a Python int (upstream) or a scalar tensor, so one traced
        `tf.function` serves kernels of every size. Configs are embedded in chunks of at most
        `chunk_size`; the last chunk is padded and its padding dropped before `_finish`.
        """
        configs = _config_features(graph, num_configs)  # [batch, n, config_dim]
        kernel = self._encode_kernel(graph, False)
        batch, n = tf.shape(configs)[0], tf.shape(configs)[1]
        # Chunks of equal size, at most `chunk_size`: padding fewer than `num_chunks` configs.
        num_chunks = (n + self._chunk_size - 1) // self._chunk_size
        chunk = (n + num_chunks - 1) // num_chunks
        padded = tf.pad(configs, [[0, 0], [0, num_chunks * chunk - n], [0, 0]])
        # [num_chunks, batch, chunk, config_dim]: map_fn walks the chunks one at a time (a
        # traced map_fn runs 10 at once by default, which multiplies the peak memory).
        chunks = tf.transpose(
            tf.reshape(padded, [batch, num_chunks, chunk, configs.shape[-1]]), [1, 0, 2, 3]
        )
        embedded = tf.map_fn(
            lambda c: self._embed(graph, kernel, c, False),
            chunks,
            fn_output_signature=tf.float32,
            parallel_iterations=1,
        )  # [num_chunks, batch, chunk, d]
        embedded = tf.transpose(embedded, [1, 0, 2, 3])
        embedded = tf.reshape(embedded, [batch, num_chunks * chunk, -1])
        return self._finish(embedded[:, :n], False)

    def _encode_kernel(self, graph: tfgnn.GraphTensor, training: bool) -> Any:
        """Config-independent work, done once per call; passed to every `_embed`."""
        raise NotImplementedError

    def _embed(
        self, graph: tfgnn.GraphTensor, kernel: Any, configs: tf.Tensor, training: bool
    ) -> tf.Tensor:
        """`[batch, c, config_dim]` -> per-config embeddings `[batch, c, d]`."""
        raise NotImplementedError

    def _finish(self, embeddings: tf.Tensor, training: bool) -> tf.Tensor:
        """`[batch, num_configs, d]` -> scores `[batch, num_configs]`."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# Our models
# ---------------------------------------------------------------------------------------------


class ResidualSAGE(_TileRanker):
    """Residual GraphSAGE with early config join; optional cross-config attention.

    Its defaults are the benchmark suite's recommendation (docs/choosing.md): 32 wide,
    the default context on, no cross-config attention; a keyword changes one of them. Runs
    record their full keywords (`tpu_tiles_models.registry.resolved_kwargs`), so changing a
    default here changes what later runs train, not how earlier ones reload.

    1. Nodes: opcode embedding + stretched node features -> `[num_nodes, hidden_dim]`; configs:
       stretched config features -> `[batch, c, hidden_dim]`. Their sum on every op node of
       the kernel is the early join, `[num_nodes, c, hidden_dim]`, at the cost of an add.
    2. `num_layers` `DirectedSAGEBlock`s over the dataflow graph.
    3. Sum, mean and max pooling over the nodes of each kernel, concatenated with the config
       embedding (a direct path for the tile itself) -> MLP -> `[batch, c, hidden_dim]`.
    4. If `config_attention`, a `ConfigSetAttention` block across the configs.
    5. If `default_context`, a `DefaultContext` block: position 0 is the compiler's default,
       its embedding beside every config's. It sees only the embeddings, so `forward`'s
       chunks and `call` score alike. Then a score.

    Args:
      num_configs, num_ops, chunk_size, keep_default_gate, default_margin: see
        `_TileRanker`.
      hidden_dim: width of every hidden layer.
      num_layers: GraphSAGE blocks.
      op_embed_dim: opcode embedding width.
      activation: Keras activation name.
      config_attention: whether the configs of a kernel see each other.
      attention_heads, inducing_points: see `ConfigSetAttention`.
      pooling: reductions over the nodes of a kernel (`sum`, `mean`, `max`).
      default_context: whether position 0 is read as the compiler's default (`default_first`).
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
        config_attention: bool = False,
        attention_heads: int = 4,
        inducing_points: int = 8,
        pooling: Sequence[str] = ("sum", "mean", "max"),
        default_context: bool = True,
        chunk_size: int = DEFAULT_CHUNK,
        keep_default_gate: bool = True,
        default_margin: bool = True,
    ):
        super().__init__(
            num_configs,
            num_ops,
            chunk_size=chunk_size,
            keep_default_gate=keep_default_gate,
            default_margin=default_margin,
        )
        if not isinstance(default_context, bool):
            raise ValueError(
                f"ResidualSAGE: default_context must be true or false, got {default_context!r}"
            )
        self._pooling = tuple(_check_reduction("ResidualSAGE", "pooling", p) for p in pooling)
        _check_count("ResidualSAGE", "num_layers", num_layers, 1)
        self._op_embedding = tf.keras.layers.Embedding(OPCODE_VOCAB, op_embed_dim)
        self._stretch = LogStretch()
        self._node_in = tf.keras.layers.Dense(hidden_dim)
        self._config_in = _mlp([hidden_dim, hidden_dim], activation)
        self._blocks = [
            DirectedSAGEBlock(units=hidden_dim, activation=activation) for _ in range(num_layers)
        ]
        self._pool_norm = tf.keras.layers.LayerNormalization()
        self._readout = _mlp([hidden_dim, hidden_dim], activation)
        self._attention = (
            ConfigSetAttention(
                units=hidden_dim, num_heads=attention_heads, num_points=inducing_points
            )
            if config_attention
            else None
        )
        self._default_context = (
            DefaultContext(units=hidden_dim, activation=activation) if default_context else None
        )
        self._score_head = _mlp([hidden_dim, 1], activation)

    def _encode_kernel(self, graph, training):
        nodes = [self._op_embedding(_opcodes(graph)), self._stretch(_node_features(graph))]
        return self._node_in(tf.concat(nodes, axis=-1))  # [num_nodes, hidden]

    def _embed(self, graph, kernel, configs, training):
        config_h = self._config_in(self._stretch(configs))  # [batch, c, hidden]
        h = kernel[:, tf.newaxis, :] + _broadcast_to_ops(graph, config_h)
        for block in self._blocks:
            h = block(graph, h)  # [num_nodes, c, hidden]
        pooled = _pool_ops(graph, self._pool_norm(h), self._pooling)
        return self._readout(tf.concat([pooled, config_h], axis=-1))  # [batch, c, hidden]

    @property
    def independent_configs(self) -> bool:
        # The attention mixes a kernel's configs; the default context reads only position 0,
        # which configs appended as padding leave in place.
        return self._attention is None

    @property
    def default_first(self) -> bool:
        return self._default_context is not None

    def _finish(self, embeddings, training):
        if self._attention is not None:
            embeddings = self._attention(embeddings)
        if self._default_context is not None:  # after attention: straight into the score
            embeddings = self._default_context(embeddings)
        return tf.squeeze(self._score_head(embeddings), -1)


class ResidualSAGEPlain(ResidualSAGE):
    """`ResidualSAGE` as first configured, without cross-config attention: 48 wide, no default
    context; each config is scored on its own. Its defaults stay as they were."""

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
        super().__init__(
            num_configs,
            num_ops,
            hidden_dim=hidden_dim,
            config_attention=config_attention,
            default_context=default_context,
            **kwargs,
        )


# ---------------------------------------------------------------------------------------------
# Baselines of the TpuGraphs paper, under upstream's names, arguments and defaults
# ---------------------------------------------------------------------------------------------


class _Baseline(_TileRanker):
    """What the paper's baselines share: a regularised opcode embedding and an L2 head.

    Early join (`EARLY_JOIN = True`) puts the config features on every op node before the GNN
    (`[opcode embedding || config features || node features]`), so the GNN runs once per
    config on `[num_nodes, c, d]` (its linear first layer split into a per-node half, done
    once per kernel, and a per-config half); late join runs it once per kernel on
    `[opcode embedding || node features]` and puts `[pooled || config features]` into the
    head. Subclasses set `self._head` and define `_gnn(graph, x)` and `self._reduction`.

    Args:
      num_configs, num_ops, chunk_size, keep_default_gate, default_margin: see
        `_TileRanker`.
      op_embed_dim: opcode embedding width; its output carries an L2 activity regulariser.
      hidden_activation: name of a `tf.nn` (or Keras) activation, used between dense layers.
    """

    EARLY_JOIN = True

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        op_embed_dim: int,
        hidden_activation: str,
        chunk_size: int = DEFAULT_CHUNK,
        keep_default_gate: bool = True,
        default_margin: bool = True,
    ):
        super().__init__(
            num_configs,
            num_ops,
            chunk_size=chunk_size,
            keep_default_gate=keep_default_gate,
            default_margin=default_margin,
        )
        owner = type(self).__name__
        self._act = _activation(owner, "hidden_activation", hidden_activation)
        self._op_embedding = tf.keras.layers.Embedding(
            OPCODE_VOCAB,
            _check_count(owner, "op_embed_dim", op_embed_dim, 1),
            activity_regularizer=tf.keras.regularizers.l2(BASELINE_L2),
        )

    def _encode_kernel(self, graph, training):
        op_e, feats = self._op_embedding(_opcodes(graph)), _node_features(graph)
        if self.EARLY_JOIN:
            return self._node_half(graph, op_e, feats)
        x = self._gnn(graph, tf.concat([op_e, feats], axis=-1))
        return _pool_ops(graph, x, (self._reduction,))

    def _embed(self, graph, kernel, configs, training):
        if not self.EARLY_JOIN:  # kernel: pooled GNN output [batch, hidden]
            c = tf.shape(configs)[1]
            return tf.concat([_repeat_per_config(kernel, c), configs], axis=-1)
        x = self._joined_gnn(graph, kernel, configs)  # [num_nodes, c, hidden]
        return _pool_ops(graph, x, (self._reduction,))

    # Early join: the GNN's input is `[opcode embedding || config || node features]` on every
    # op node and config. Its first layer is linear in these parts, so subclasses compute its
    # node-only part once per kernel (`_node_half`, in `_encode_kernel`, outside `forward`'s
    # config chunks) and add the config part per config (`_joined_gnn`). The defaults build
    # the joined input.

    def _node_half(self, graph: tfgnn.GraphTensor, op_e: tf.Tensor, feats: tf.Tensor) -> Any:
        """Early join's once-per-kernel work on the opcode embeddings and node features."""
        return op_e, feats

    def _joined_gnn(self, graph: tfgnn.GraphTensor, half: Any, configs: tf.Tensor) -> tf.Tensor:
        """`_gnn` on the early join of `_node_half`'s output and `configs` `[batch, c, d]`."""
        op_e, feats = half
        return self._gnn(graph, _early_join(graph, op_e, configs, feats))

    def _gnn(self, graph: tfgnn.GraphTensor, x: tf.Tensor) -> tf.Tensor:
        """Node inputs `[num_nodes, ..., d_in]` -> node states `[num_nodes, ..., hidden]`."""
        raise NotImplementedError

    def _finish(self, embeddings, training):
        return tf.squeeze(self._head(embeddings), -1)


class _SAGEBaseline(_Baseline):
    """The paper's GraphSAGE baselines; `EarlyJoinSAGE` and `LateJoinSAGE` pick the join.

    Opcode embedding -> `num_gnns` `BidirectionalSAGELayer`s -> sum over the nodes of each
    kernel -> `final_mlp_layers` dense layers of width `hidden_dim` -> one score. Every dense
    kernel and the opcode embedding's output carry an L2 penalty of `BASELINE_L2`.

    Args:
      num_configs: configs per kernel in the training batches.
      num_ops: 1 + the largest opcode id in the data (checked, never shapes a variable).
      num_gnns: GraphSAGE layers.
      final_mlp_layers: hidden dense layers of the scoring head.
      hidden_activation: name of a `tf.nn` activation (Keras names work too).
      hidden_dim: width of the GraphSAGE layers and of the head.
      op_embed_dim: opcode embedding width.
      chunk_size: ours: configs scored at once by `forward`.
      keep_default_gate, default_margin: ours: whether it carries each part of the ranking
        rule (see `_RankingRule`).
    """

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
        chunk_size: int = DEFAULT_CHUNK,
        keep_default_gate: bool = True,
        default_margin: bool = True,
    ):
        super().__init__(
            num_configs,
            num_ops,
            op_embed_dim=op_embed_dim,
            hidden_activation=hidden_activation,
            chunk_size=chunk_size,
            keep_default_gate=keep_default_gate,
            default_margin=default_margin,
        )
        owner = type(self).__name__
        hidden_dim = _check_count(owner, "hidden_dim", hidden_dim, 1)
        self._reduction = "sum"
        self._gnn_layers = [
            BidirectionalSAGELayer(units=hidden_dim, activation=hidden_activation)
            for _ in range(_check_count(owner, "num_gnns", num_gnns, 0))
        ]
        depth = _check_count(owner, "final_mlp_layers", final_mlp_layers, 0)
        self._head = _mlp([hidden_dim] * depth + [1], self._act, BASELINE_L2)

    def _gnn(self, graph, x):
        for layer in self._gnn_layers:
            x = layer(graph, x)
        return x

    def _node_half(self, graph, op_e, feats):
        if not self._gnn_layers:
            return super()._node_half(graph, op_e, feats)
        return self._gnn_layers[0].node_half(graph, op_e, feats, _config_width(graph))

    def _joined_gnn(self, graph, half, configs):
        if not self._gnn_layers:
            return super()._joined_gnn(graph, half, configs)
        x = self._gnn_layers[0].joined(graph, half, configs, self._op_embedding.output_dim)
        for layer in self._gnn_layers[1:]:
            x = layer(graph, x)
        return x


class _ResGCNBaseline(_Baseline):
    """The paper's residual GCN baselines; `EarlyJoinResGCN` and `LateJoinResGCN` pick the join.

    Opcode embedding -> a two-layer dense prenet to `hidden_dim` -> `num_gnns`
    `ResidualGCNLayer`s -> activation -> `reduction` over the nodes of each kernel -> a
    two-layer dense head -> one score. Every dense kernel and the opcode embedding's output
    carry an L2 penalty of `BASELINE_L2`.

    Args:
      num_configs: configs per kernel in the training batches.
      num_ops: 1 + the largest opcode id in the data (checked, never shapes a variable).
      num_gnns: residual GCN layers.
      mlp_layers: dense layers inside each GCN layer (see `ResidualGCNLayer`).
      hidden_activation: name of a `tf.nn` activation (Keras names work too).
      hidden_dim: width of the node states and of the head.
      op_embed_dim: opcode embedding width.
      directed: separate weights for producers, consumers and the node itself.
      reduction: TF-GNN pooling over the nodes of a kernel (`sum`, `mean`, `max`, ...).
      chunk_size: ours: configs scored at once by `forward`.
      keep_default_gate, default_margin: ours: whether it carries each part of the ranking
        rule (see `_RankingRule`).
    """

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
        chunk_size: int = DEFAULT_CHUNK,
        keep_default_gate: bool = True,
        default_margin: bool = True,
    ):
        super().__init__(
            num_configs,
            num_ops,
            op_embed_dim=op_embed_dim,
            hidden_activation=hidden_activation,
            chunk_size=chunk_size,
            keep_default_gate=keep_default_gate,
            default_margin=default_margin,
        )
        owner = type(self).__name__
        hidden_dim = _check_count(owner, "hidden_dim", hidden_dim, 1)
        _check_count(owner, "mlp_layers", mlp_layers, 0)
        self._reduction = _check_reduction(owner, "reduction", reduction)
        # Attribute order fixes variable order; this is upstream's (GCN layers before prenet).
        self._gc_layers = [
            ResidualGCNLayer(
                units=hidden_dim,
                mlp_layers=mlp_layers,
                activation=hidden_activation,
                directed=directed,
            )
            for _ in range(_check_count(owner, "num_gnns", num_gnns, 0))
        ]
        self._prenet = _mlp([hidden_dim, hidden_dim], self._act, BASELINE_L2)
        self._head = _mlp([hidden_dim, 1], self._act, BASELINE_L2)

    def _gnn(self, graph, x):
        return self._gcn(graph, self._prenet(x))

    def _gcn(self, graph: tfgnn.GraphTensor, x: tf.Tensor) -> tf.Tensor:
        """The GCN layers and activation after the prenet."""
        for layer in self._gc_layers:
            x = layer(graph, x)
        return self._act(x)

    def _prenet_blocks(self, graph: tfgnn.GraphTensor, node_width: int) -> list[tf.Tensor]:
        """The prenet's first kernel as rows for (opcode embedding, config, node features)."""
        widths = [self._op_embedding.output_dim, _config_width(graph), node_width]
        return _row_blocks(self._prenet, widths)

    def _node_half(self, graph, op_e, feats):
        first = self._prenet.layers[0]
        w_ops, _, w_feats = self._prenet_blocks(graph, feats.shape[-1])
        return tf.matmul(op_e, w_ops) + tf.matmul(feats, w_feats) + first.bias

    def _joined_gnn(self, graph, half, configs):
        first, rest = self._prenet.layers[0], self._prenet.layers[1:]
        node_width = first.kernel.shape[0] - self._op_embedding.output_dim - configs.shape[-1]
        _, w_configs, _ = self._prenet_blocks(graph, node_width)
        per_config = _per_op(graph, tf.matmul(configs, w_configs))
        x = first.activation(half[:, tf.newaxis, :] + per_config)  # [num_nodes, c, hidden]
        for layer in rest:
            x = layer(x)
        return self._gcn(graph, x)


class EarlyJoinSAGE(_SAGEBaseline):
    """The paper's best tile baseline: config features on every node, then GraphSAGE."""

    EARLY_JOIN = True


class LateJoinSAGE(_SAGEBaseline):
    """GraphSAGE on the kernel alone; config features join after pooling."""

    EARLY_JOIN = False


class EarlyJoinResGCN(_ResGCNBaseline):
    """Config features on every node, then a residual GCN."""

    EARLY_JOIN = True


class LateJoinResGCN(_ResGCNBaseline):
    """Residual GCN on the kernel alone; config features join after pooling."""

    EARLY_JOIN = False


class MLP(_Baseline):
    """The paper's graph-free baseline: pooled node features, config features, an MLP.

    `[reduction(node features) || reduction(opcode embeddings) || config features]` ->
    `mlp_layers` dense layers of width `hidden_dim` -> one score, with the L2 penalties of
    the other baselines.

    Args:
      num_configs: configs per kernel in the training batches.
      num_ops: 1 + the largest opcode id in the data (checked, never shapes a variable).
      op_embed_dim: opcode embedding width.
      mlp_layers: hidden dense layers.
      hidden_activation: name of a `tf.nn` activation (Keras names work too).
      hidden_dim: their width.
      reduction: TF-GNN pooling over the nodes of a kernel (`sum`, `mean`, `max`, ...).
      chunk_size: ours: configs scored at once by `forward`.
      keep_default_gate, default_margin: ours: whether it carries each part of the ranking
        rule (see `_RankingRule`).
    """

    EARLY_JOIN = False

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
        chunk_size: int = DEFAULT_CHUNK,
        keep_default_gate: bool = True,
        default_margin: bool = True,
    ):
        super().__init__(
            num_configs,
            num_ops,
            op_embed_dim=op_embed_dim,
            hidden_activation=hidden_activation,
            chunk_size=chunk_size,
            keep_default_gate=keep_default_gate,
            default_margin=default_margin,
        )
        owner = type(self).__name__
        self._reduction = _check_reduction(owner, "reduction", reduction)
        depth = _check_count(owner, "mlp_layers", mlp_layers, 0)
        hidden_dim = _check_count(owner, "hidden_dim", hidden_dim, 1)
        self._head = _mlp([hidden_dim] * depth + [1], self._act, BASELINE_L2)

    def _encode_kernel(self, graph, training):
        op_e, feats = self._op_embedding(_opcodes(graph)), _node_features(graph)
        pooled = [_pool_ops(graph, x, (self._reduction,)) for x in (feats, op_e)]
        return tf.concat(pooled, axis=-1)  # [batch, node_dim + op_embed_dim]


# ---------------------------------------------------------------------------------------------
# Ensembles
# ---------------------------------------------------------------------------------------------

# The classes an `Ensemble` may hold, by the names its `members` use.
MEMBER_MODELS: dict[str, type[_TileRanker]] = {
    "ResidualSAGE": ResidualSAGE,
    "ResidualSAGEPlain": ResidualSAGEPlain,
    "EarlyJoinSAGE": EarlyJoinSAGE,
    "LateJoinSAGE": LateJoinSAGE,
    "EarlyJoinResGCN": EarlyJoinResGCN,
    "LateJoinResGCN": LateJoinResGCN,
    "MLP": MLP,
}

# How `Ensemble` puts its members' scores on one scale, per kernel, before averaging.
COMBINE_METHODS = ("zscore", "rank", "minmax")

_EPSILON = 1e-12  # keeps a kernel whose scores are all equal finite (it normalises to 0)


@_plain
def normalise_scores(scores: tf.Tensor, method: str) -> tf.Tensor:
    """Puts the scores of each kernel on a common scale, keeping their order.

    Args:
      scores: `[batch, num_configs]`, one row per kernel.
      method: `zscore` (minus the row's mean, over its standard deviation), `minmax` (onto
        [0, 1] by the row's extremes) or `rank` (the rank within the row over
        `num_configs - 1`; it has no gradient, so it is for combining trained models).

    Returns:
      `[batch, num_configs]` float32, non-decreasing in `scores` within each row.
    """
    scores = tf.cast(scores, tf.float32)
    if method == "zscore":
        mean, variance = tf.nn.moments(scores, axes=[-1], keepdims=True)
        return (scores - mean) / tf.sqrt(variance + _EPSILON)
    if method == "minmax":
        low = tf.reduce_min(scores, axis=-1, keepdims=True)
        high = tf.reduce_max(scores, axis=-1, keepdims=True)
        return (scores - low) / (high - low + _EPSILON)
    if method == "rank":
        order = tf.argsort(scores, axis=-1, stable=True)
        ranks = tf.cast(tf.argsort(order, axis=-1, stable=True), tf.float32)
        return ranks / tf.cast(tf.maximum(tf.shape(scores)[-1] - 1, 1), tf.float32)
    raise ValueError(f"combine={method!r} is not one of {', '.join(COMBINE_METHODS)}")


def _member_class_and_kwargs(index: int, spec: Any) -> tuple[type[_TileRanker], dict]:
    """Checks `members[index]`, `{"model": name, "kwargs": {...}}`; returns class and kwargs."""
    where = f"Ensemble: members[{index}]"
    if not isinstance(spec, dict) or "model" not in spec or set(spec) - {"model", "kwargs"}:
        raise ValueError(f"{where} must be {{'model': <name>, 'kwargs': {{...}}}}, got {spec!r}")
    name, kwargs = spec["model"], spec.get("kwargs") or {}
    if name not in MEMBER_MODELS:
        raise ValueError(f"{where}: unknown model {name!r}; known: {', '.join(MEMBER_MODELS)}")
    if not isinstance(kwargs, dict):
        raise ValueError(f"{where}: kwargs must be a dict, got {kwargs!r}")
    return MEMBER_MODELS[name], kwargs


class Ensemble(_RankingRule, tf.keras.Model):
    """Several models as one: each member's scores normalised per kernel, then averaged.

    Averaging independently trained rankers is a cheap, reliable gain (as in the Kaggle
    "Fast or Slow?" tile solutions). The members are built exactly as upstream builds a model,
    `cls(num_configs, num_ops, **kwargs)`, and own every variable but the ensemble's rule:
    `trainable_variables` are the members' in member order, then the rule's, so upstream's
    rebuild-then-copy-in-order reload restores an ensemble as it restores any model. `forward`
    combines the members' own chunked `raw_scores` (never their rules), then applies its
    own rule, so memory stays bounded on 6000-config kernels.

    Args:
      num_configs: configs per kernel in the training batches (passed to every member).
      num_ops: 1 + the largest opcode id in the data (passed to every member).
      members: `[{"model": <name in MEMBER_MODELS>, "kwargs": {...}}, ...]`, at least one;
        `kwargs` may be left out.
      combine: per-kernel normalisation before averaging, one of `COMBINE_METHODS` (see
        `normalise_scores`); `rank` has no gradient, so train members with another.
      keep_default_gate, default_margin: whether the ensemble carries each part of its own
        ranking rule (`_RankingRule`), applied to the combined scores; the members' own rules
        are not applied.
    """

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        members: Sequence[dict],
        combine: str = "zscore",
        keep_default_gate: bool = True,
        default_margin: bool = True,
    ):
        super().__init__()
        if combine not in COMBINE_METHODS:
            raise ValueError(
                f"Ensemble: combine={combine!r} is not one of {', '.join(COMBINE_METHODS)}"
            )
        if not isinstance(members, (list, tuple)) or not members:
            raise ValueError(
                "Ensemble: members must be a non-empty list of "
                f"{{'model': <name>, 'kwargs': {{...}}}}, got {members!r}"
            )
        self._combine = combine
        built = []
        for i, spec in enumerate(members):
            cls, kwargs = _member_class_and_kwargs(i, spec)
            try:
                built.append(cls(num_configs, num_ops, **kwargs))
            except TypeError as e:  # an unknown keyword: name the member it came from
                raise ValueError(f"Ensemble: members[{i}] ({spec['model']}): {e}") from None
        self._ensemble_members = built
        # After the members: their variables come first.
        self._add_rule(keep_default_gate, default_margin)

    @property
    def independent_configs(self) -> bool:
        return False  # scores are normalised over each kernel's configs

    @property
    def members(self) -> list[tf.keras.Model]:
        """The member models, in order."""
        return list(self._ensemble_members)

    @property
    def default_first(self) -> bool:
        """Whether a member reads position 0 as the compiler's default."""
        return any(m.default_first for m in self._ensemble_members)

    def call(self, graph: tfgnn.GraphTensor, training: bool = False) -> tf.Tensor:
        scores = self._average([m(graph, training=training) for m in self._ensemble_members])
        return self._with_rule(scores)

    @_plain
    def raw_scores(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        """Scores all `num_configs` configs of each component: `[batch, num_configs]`, from
        the members' own scores (`raw_scores`, without their rules)."""
        members = self._ensemble_members
        return self._average([m.raw_scores(graph, num_configs) for m in members])

    def _average(self, member_scores: list[tf.Tensor]) -> tf.Tensor:
        """Members' `[batch, n]` scores -> the mean of their normalised scores `[batch, n]`."""
        normalised = [normalise_scores(s, self._combine) for s in member_scores]
        return tf.add_n(normalised) / float(len(normalised))
