"""Graph neural networks that rank the tile configurations of TpuGraphs tile:xla kernels.

A drop-in replacement for `tpu_graphs/baselines/tiles/models.py`: copy this one file over it
and upstream's `tiles_train.py --model=<Name>` and the course prediction script keep working.
It imports TensorFlow, TF-GNN and the standard library only.

Every model follows upstream's calling convention:
  * `Model(num_configs, num_ops, **kwargs)`; `num_ops` is checked but never shapes a variable,
    so a model trained on a subset of the data reloads on all of it.
  * `call(graph, training=False)` -> `[batch, num_configs]` scores for a batch of kernels
    merged into graph components, each with `num_configs` configs.
  * `forward(graph, num_configs)` -> `[batch, num_configs]`; upstream calls it on one kernel with
    all its configs. Configs are processed in chunks so a 6000-config kernel stays small.
  * Lower score = predicted faster (ListMLE on runtimes ranks slow configs high).

The `GraphTensor` has node sets `op` (features `op`: opcode, `feats`: normalised floats),
`config` (`feats`), `g`; edge set `feed` runs from consumer (source) to producer (target).

Models:
  * `ResidualSAGE` (recommended): residual, layer-normalised GraphSAGE over the directed
    dataflow graph with the configs joined onto every node, sum+mean+max pooling, and an
    attention block through which the configs of one kernel see each other.
  * `ResidualSAGEPlain`: the same without the cross-config attention.
  * `EarlyJoinSAGE`, `LateJoinSAGE`, `EarlyJoinResGCN`, `LateJoinResGCN`, `MLP`: our own
    implementations of the baselines of the TpuGraphs paper (Phothilimthana et al., 2023).

References: GraphSAGE, Hamilton et al., NeurIPS 2017; GCN, Kipf & Welling, ICLR 2017;
Set Transformer (induced set attention), Lee et al., ICML 2019.
"""

from __future__ import annotations

import math
from typing import Sequence

import tensorflow as tf
import tensorflow_gnn as tfgnn

# Opcode ids in TpuGraphs run 0..120. Sizing the embedding by this constant rather than by the
# data's `num_ops` keeps variable shapes identical between toy-data and full-data builds.
OPCODE_VOCAB = 128

# Configs per chunk in `forward`: bounds the [num_nodes, chunk, dim] tensors on big kernels.
DEFAULT_CHUNK = 512


# ---------------------------------------------------------------------------------------------
# Layers
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


# ---------------------------------------------------------------------------------------------
# Graph helpers (functions of the GraphTensor; no variables)
# ---------------------------------------------------------------------------------------------


def _mean_over_neighbours(graph: tfgnn.GraphTensor, h: tf.Tensor, *, receiver: str) -> tf.Tensor:
    """Means `h` over `feed` neighbours: producers for receiver=SOURCE, consumers for TARGET.

    `h` `[num_nodes, ...]` -> `[num_nodes, ...]`; nodes without such neighbours get zeros.
    """
    sender = tfgnn.reverse_tag(receiver)
    messages = tfgnn.broadcast_node_to_edges(graph, "feed", sender, feature_value=h)
    return tfgnn.pool_edges_to_node(graph, "feed", receiver, "mean", feature_value=messages)


def _sum_both_directions(graph: tfgnn.GraphTensor, h: tf.Tensor) -> tf.Tensor:
    """Sums `h` over all `feed` neighbours, ignoring edge direction. Shape as `h`."""
    total = 0.0
    for receiver in (tfgnn.SOURCE, tfgnn.TARGET):
        sender = tfgnn.reverse_tag(receiver)
        messages = tfgnn.broadcast_node_to_edges(graph, "feed", sender, feature_value=h)
        total += tfgnn.pool_edges_to_node(graph, "feed", receiver, "sum", feature_value=messages)
    return total


def _opcodes(graph: tfgnn.GraphTensor) -> tf.Tensor:
    """Opcode ids `[num_nodes]` as int32, clipped into the embedding's vocabulary."""
    ops = tf.cast(graph.node_sets["op"]["op"], tf.int32)
    return tf.clip_by_value(ops, 0, OPCODE_VOCAB - 1)


def _config_features(graph: tfgnn.GraphTensor, num_configs: int) -> tf.Tensor:
    """Config features of each component: `[batch, num_configs, config_dim]` float32."""
    feats = tf.cast(graph.node_sets["config"]["feats"], tf.float32)
    batch = tf.shape(graph.node_sets["config"].sizes)[0]
    return tf.reshape(feats, [batch, num_configs, feats.shape[-1]])


def _broadcast_to_ops(graph: tfgnn.GraphTensor, per_kernel: tf.Tensor) -> tf.Tensor:
    """`[batch, ...]` per-component values -> `[num_nodes, ...]` on each component's op nodes."""
    return tfgnn.broadcast_context_to_nodes(graph, "op", feature_value=per_kernel)


def _pool_ops(graph: tfgnn.GraphTensor, h: tf.Tensor, reductions: Sequence[str]) -> tf.Tensor:
    """Pools `h` `[num_nodes, ..., d]` per component -> `[batch, ..., d * len(reductions)]`."""
    pooled = [tfgnn.pool_nodes_to_context(graph, "op", r, feature_value=h) for r in reductions]
    return tf.concat(pooled, axis=-1)


def _mlp(dims: Sequence[int], activation: str) -> tf.keras.Sequential:
    """Dense layers of widths `dims`, `activation` between them (none after the last)."""
    layers = []
    for i, dim in enumerate(dims):
        last = i == len(dims) - 1
        layers.append(tf.keras.layers.Dense(dim, activation=None if last else activation))
    return tf.keras.Sequential(layers)


# ---------------------------------------------------------------------------------------------
# The calling convention shared by every model
# ---------------------------------------------------------------------------------------------


class _TileRanker(tf.keras.Model):
    """Upstream's model protocol: `call` on training batches, chunked `forward` on kernels.

    Subclasses implement `_embed(graph, configs, training)`, which embeds each config of
    `[batch, c, config_dim]` on its own (so `forward` may split the configs into chunks), and
    `_finish(embeddings, training)`, which sees all configs of a kernel at once and scores them.

    Args:
      num_configs: configs per kernel in the training batches that `call` receives.
      num_ops: 1 + the largest opcode id in the data; must be at most `OPCODE_VOCAB`.
      chunk_size: configs scored at once by `forward`.
    """

    def __init__(self, num_configs: int, num_ops: int, *, chunk_size: int = DEFAULT_CHUNK):
        super().__init__()
        if num_ops > OPCODE_VOCAB:
            raise ValueError(f"num_ops={num_ops} exceeds the opcode vocabulary {OPCODE_VOCAB}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        self._num_configs = int(num_configs)
        self._num_ops = int(num_ops)
        self._chunk_size = int(chunk_size)

    def call(self, graph: tfgnn.GraphTensor, training: bool = False) -> tf.Tensor:
        configs = _config_features(graph, self._num_configs)
        return self._finish(self._embed(graph, configs, training), training)

    def forward(self, graph: tfgnn.GraphTensor, num_configs: int | tf.Tensor) -> tf.Tensor:
        """Scores all `num_configs` configs of each component: `[batch, num_configs]`.

        `num_configs` may be a Python int (upstream) or a scalar tensor, so one traced
        `tf.function` serves kernels of every size. Configs are embedded in chunks of at most
        `chunk_size`; the last chunk is padded and its padding dropped before `_finish`.
        """
        configs = _config_features(graph, num_configs)  # [batch, n, config_dim]
        n = tf.shape(configs)[1]
        chunk = tf.minimum(n, self._chunk_size)
        num_chunks = (n + chunk - 1) // chunk
        padded = tf.pad(configs, [[0, 0], [0, num_chunks * chunk - n], [0, 0]])
        # [num_chunks, batch, chunk, config_dim]: map_fn walks the chunks one at a time.
        chunks = tf.transpose(
            tf.reshape(padded, [tf.shape(configs)[0], num_chunks, chunk, configs.shape[-1]]),
            [1, 0, 2, 3],
        )
        embedded = tf.map_fn(
            lambda c: self._embed(graph, c, False),
            chunks,
            fn_output_signature=tf.float32,
        )  # [num_chunks, batch, chunk, d]
        embedded = tf.transpose(embedded, [1, 0, 2, 3])
        embedded = tf.reshape(embedded, [tf.shape(configs)[0], num_chunks * chunk, -1])
        return self._finish(embedded[:, :n], False)

    def _embed(self, graph: tfgnn.GraphTensor, configs: tf.Tensor, training: bool) -> tf.Tensor:
        """`[batch, c, config_dim]` -> per-config embeddings `[batch, c, d]`."""
        raise NotImplementedError

    def _finish(self, embeddings: tf.Tensor, training: bool) -> tf.Tensor:
        """`[batch, num_configs, d]` -> scores `[batch, num_configs]`."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# Our models
# ---------------------------------------------------------------------------------------------


class ResidualSAGE(_TileRanker):
    """Residual GraphSAGE with early config join and cross-config attention (recommended).

    1. Nodes: opcode embedding + stretched node features -> `[num_nodes, hidden_dim]`; configs:
       stretched config features -> `[batch, c, hidden_dim]`. Their sum on every op node of
       the kernel is the early join, `[num_nodes, c, hidden_dim]`, at the cost of an add.
    2. `num_layers` `DirectedSAGEBlock`s over the dataflow graph.
    3. Sum, mean and max pooling over the nodes of each kernel, concatenated with the config
       embedding (a direct path for the tile itself) -> MLP -> `[batch, c, hidden_dim]`.
    4. If `config_attention`, a `ConfigSetAttention` block across the configs; then a score.

    Args:
      num_configs, num_ops, chunk_size: see `_TileRanker`.
      hidden_dim: width of every hidden layer.
      num_layers: GraphSAGE blocks.
      op_embed_dim: opcode embedding width.
      activation: Keras activation name.
      config_attention: whether the configs of a kernel see each other.
      attention_heads, inducing_points: see `ConfigSetAttention`.
      pooling: reductions over the nodes of a kernel (`sum`, `mean`, `max`).
    """

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        hidden_dim: int = 48,
        num_layers: int = 3,
        op_embed_dim: int = 32,
        activation: str = "gelu",
        config_attention: bool = True,
        attention_heads: int = 4,
        inducing_points: int = 8,
        pooling: Sequence[str] = ("sum", "mean", "max"),
        chunk_size: int = DEFAULT_CHUNK,
    ):
        super().__init__(num_configs, num_ops, chunk_size=chunk_size)
        self._pooling = tuple(pooling)
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
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
        self._score_head = _mlp([hidden_dim, 1], activation)

    def _embed(self, graph, configs, training):
        nodes = tf.concat(
            [
                self._op_embedding(_opcodes(graph)),
                self._stretch(graph.node_sets["op"]["feats"]),
            ],
            axis=-1,
        )
        node_h = self._node_in(nodes)  # [num_nodes, hidden]
        config_h = self._config_in(self._stretch(configs))  # [batch, c, hidden]
        h = node_h[:, tf.newaxis, :] + _broadcast_to_ops(graph, config_h)
        for block in self._blocks:
            h = block(graph, h)  # [num_nodes, c, hidden]
        pooled = _pool_ops(graph, self._pool_norm(h), self._pooling)
        return self._readout(tf.concat([pooled, config_h], axis=-1))  # [batch, c, hidden]

    def _finish(self, embeddings, training):
        if self._attention is not None:
            embeddings = self._attention(embeddings)
        return tf.squeeze(self._score_head(embeddings), -1)


class ResidualSAGEPlain(ResidualSAGE):
    """`ResidualSAGE` without cross-config attention: each config is scored on its own."""

    def __init__(self, num_configs: int, num_ops: int, **kwargs):
        kwargs.setdefault("config_attention", False)
        super().__init__(num_configs, num_ops, **kwargs)


# ---------------------------------------------------------------------------------------------
# Baselines of the TpuGraphs paper, under upstream's names
# ---------------------------------------------------------------------------------------------


class _PaperGNN(_TileRanker):
    """Shared body of the paper's baselines: opcode embedding, a GNN, sum pooling, an MLP.

    Early join concatenates the config features onto every op node before the GNN, so the
    GNN runs once per config `[num_nodes, c, d]`; late join runs the GNN once per kernel
    `[num_nodes, d]` and concatenates the config features after pooling.

    Args:
      num_configs, num_ops, chunk_size: see `_TileRanker`.
      early_join: where the config features enter.
      num_gnns: GNN layers.
      hidden_dim: width of every hidden layer.
      op_embed_dim: opcode embedding width.
      final_mlp_layers: hidden layers of the scoring MLP.
      hidden_activation: Keras activation name.
    """

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        early_join: bool,
        num_gnns: int = 3,
        hidden_dim: int = 64,
        op_embed_dim: int = 32,
        final_mlp_layers: int = 2,
        hidden_activation: str = "leaky_relu",
        chunk_size: int = DEFAULT_CHUNK,
    ):
        super().__init__(num_configs, num_ops, chunk_size=chunk_size)
        self._early_join = early_join
        self._activation = tf.keras.activations.get(hidden_activation)
        self._op_embedding = tf.keras.layers.Embedding(OPCODE_VOCAB, op_embed_dim)
        self._gnn_layers = [tf.keras.layers.Dense(hidden_dim) for _ in range(num_gnns)]
        self._postnet = _mlp([hidden_dim] * final_mlp_layers + [1], hidden_activation)

    def _node_inputs(self, graph: tfgnn.GraphTensor) -> tf.Tensor:
        """Opcode embedding and node features: `[num_nodes, op_embed_dim + node_dim]`."""
        feats = tf.cast(graph.node_sets["op"]["feats"], tf.float32)
        return tf.concat([self._op_embedding(_opcodes(graph)), feats], axis=-1)

    def _embed(self, graph, configs, training):
        x = self._node_inputs(graph)
        if self._early_join:
            c = tf.shape(configs)[1]
            x = tf.tile(x[:, tf.newaxis, :], [1, c, 1])  # [num_nodes, c, node_in]
            x = tf.concat([x, _broadcast_to_ops(graph, configs)], axis=-1)
        x = self._propagate(graph, x)
        pooled = tfgnn.pool_nodes_to_context(graph, "op", "sum", feature_value=x)
        if self._early_join:
            return pooled  # [batch, c, hidden]
        pooled = tf.tile(pooled[:, tf.newaxis, :], [1, tf.shape(configs)[1], 1])
        return tf.concat([pooled, configs], axis=-1)  # [batch, c, hidden + config_dim]

    def _propagate(self, graph: tfgnn.GraphTensor, x: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def _finish(self, embeddings, training):
        return tf.squeeze(self._postnet(embeddings), -1)


class _SAGEBackbone(_PaperGNN):
    """GraphSAGE layers: `x <- l2norm(act(W [sum_neighbours(x) || x]))`, edges undirected."""

    def _propagate(self, graph, x):
        for layer in self._gnn_layers:
            y = tf.concat([_sum_both_directions(graph, x), x], axis=-1)
            x = tf.math.l2_normalize(self._activation(layer(y)), axis=-1)
        return x


class _ResGCNBackbone(_PaperGNN):
    """Residual GCN layers: `x <- x + W mean(neighbours and self)`, edges undirected."""

    def __init__(self, num_configs: int, num_ops: int, **kwargs):
        super().__init__(num_configs, num_ops, **kwargs)
        hidden_dim = self._gnn_layers[0].units if self._gnn_layers else 64
        self._prenet = tf.keras.layers.Dense(hidden_dim)

    def _propagate(self, graph, x):
        x = self._prenet(x)
        for layer in self._gnn_layers:
            y = self._activation(x)
            neighbours = _sum_both_directions(graph, y) + y
            degree = _sum_both_directions(graph, tf.ones_like(y[..., :1])) + 1.0
            x = x + layer(neighbours / degree)
        return self._activation(x)


class EarlyJoinSAGE(_SAGEBackbone):
    """The paper's best tile baseline: config features on every node, then GraphSAGE."""

    def __init__(self, num_configs: int, num_ops: int, **kwargs):
        super().__init__(num_configs, num_ops, early_join=True, **kwargs)


class LateJoinSAGE(_SAGEBackbone):
    """GraphSAGE on the kernel alone; config features join after pooling."""

    def __init__(self, num_configs: int, num_ops: int, **kwargs):
        super().__init__(num_configs, num_ops, early_join=False, **kwargs)


class EarlyJoinResGCN(_ResGCNBackbone):
    """Config features on every node, then a residual GCN."""

    def __init__(self, num_configs: int, num_ops: int, **kwargs):
        super().__init__(num_configs, num_ops, early_join=True, **kwargs)


class LateJoinResGCN(_ResGCNBackbone):
    """Residual GCN on the kernel alone; config features join after pooling."""

    def __init__(self, num_configs: int, num_ops: int, **kwargs):
        super().__init__(num_configs, num_ops, early_join=False, **kwargs)


class MLP(_TileRanker):
    """No message passing: pooled node features and opcode embeddings, config features, MLP.

    Args:
      num_configs, num_ops, chunk_size: see `_TileRanker`.
      op_embed_dim: opcode embedding width.
      mlp_layers: hidden layers.
      hidden_dim: their width.
      hidden_activation: Keras activation name.
      reduction: how node values are pooled per kernel (`sum`, `mean`, `max`).
    """

    def __init__(
        self,
        num_configs: int,
        num_ops: int,
        *,
        op_embed_dim: int = 32,
        mlp_layers: int = 2,
        hidden_dim: int = 64,
        hidden_activation: str = "leaky_relu",
        reduction: str = "sum",
        chunk_size: int = DEFAULT_CHUNK,
    ):
        super().__init__(num_configs, num_ops, chunk_size=chunk_size)
        self._reduction = reduction
        self._op_embedding = tf.keras.layers.Embedding(OPCODE_VOCAB, op_embed_dim)
        self._mlp = _mlp([hidden_dim] * mlp_layers + [1], hidden_activation)

    def _embed(self, graph, configs, training):
        feats = tf.cast(graph.node_sets["op"]["feats"], tf.float32)
        nodes = tf.concat([feats, self._op_embedding(_opcodes(graph))], axis=-1)
        pooled = _pool_ops(graph, nodes, (self._reduction,))  # [batch, node_in]
        pooled = tf.tile(pooled[:, tf.newaxis, :], [1, tf.shape(configs)[1], 1])
        return tf.concat([pooled, configs], axis=-1)

    def _finish(self, embeddings, training):
        return tf.squeeze(self._mlp(embeddings), -1)
