"""The contract of models.py with upstream: build, train, save, reload by the course procedure.

Fitted models are made once per module (`fitted`) and shared by the life-cycle and ensemble
tests; widths are tiny because the contract does not depend on them.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import tensorflow as tf

from tpu_tiles_models import data, margin, ranking, registry
from tpu_tiles_models.losses import CombinedLoss

models = registry.load_models_module()
SINGLE = list(models.MEMBER_MODELS)
CLASSES = [*SINGLE, "Ensemble"]
BASELINES = ["EarlyJoinSAGE", "LateJoinSAGE", "EarlyJoinResGCN", "LateJoinResGCN", "MLP"]
ONE_LAYER = {"ResidualSAGE": "num_layers", "ResidualSAGEPlain": "num_layers", "MLP": "mlp_layers"}
# One GNN layer and width 16: tracing, not arithmetic, is what costs time in these tests.
TINY = {
    name: {"hidden_dim": 16, "op_embed_dim": 8, ONE_LAYER.get(name, "num_gnns"): 1}
    for name in SINGLE
}
# "ResidualSAGE" here is the model with cross-config attention and without the default context
# (its defaults before they became the recommendation): the variant with the most to check.
TINY["ResidualSAGE"].update(config_attention=True, default_context=False)
# Variants: a label -> (class, keywords on top of its TINY ones).
VARIANTS = {
    "ResidualSAGE:default_context": ("ResidualSAGE", {"default_context": True}),
    "ResidualSAGEPlain:default_context": ("ResidualSAGEPlain", {"default_context": True}),
}
for _label, (_cls, _kwargs) in VARIANTS.items():
    TINY[_label] = {**TINY[_cls], **_kwargs}
DEFAULT_AWARE = next(iter(VARIANTS))
TINY["Ensemble"] = {
    "members": [
        {"model": "MLP", "kwargs": TINY["MLP"]},
        {"model": "LateJoinSAGE", "kwargs": TINY["LateJoinSAGE"]},
    ]
}
CONFIGS, BATCH = 6, 4
# The models whose configs see each other (cross-config attention, an ensemble's per-kernel
# normalisation): `score_split` scores their kernels one a call, the others' several a call.
SEES_OTHER_CONFIGS = ("ResidualSAGE", "ResidualSAGE:default_context", "Ensemble")

# Upstream's constructor keywords (tpu_graphs/baselines/tiles/models.py at ddd187c) as
# {name: (upstream's default, another value, what the other value changes)}: "shapes" of the
# variables, or (same variables) the "scores".
_SAGE_KWARGS = {
    "num_gnns": (3, 1, "shapes"),
    "final_mlp_layers": (2, 1, "shapes"),
    "hidden_activation": ("leaky_relu", "relu", "scores"),
    "hidden_dim": (64, 16, "shapes"),
    "op_embed_dim": (64, 8, "shapes"),
}
_RESGCN_KWARGS = {
    "num_gnns": (3, 1, "shapes"),
    "mlp_layers": (2, 1, "shapes"),
    "hidden_activation": ("leaky_relu", "relu", "scores"),
    "hidden_dim": (64, 16, "shapes"),
    "op_embed_dim": (32, 8, "shapes"),
    "directed": (False, True, "shapes"),
    "reduction": ("sum", "mean", "scores"),
}
UPSTREAM_KWARGS = {
    "EarlyJoinSAGE": _SAGE_KWARGS,
    "LateJoinSAGE": _SAGE_KWARGS,
    "EarlyJoinResGCN": _RESGCN_KWARGS,
    "LateJoinResGCN": _RESGCN_KWARGS,
    "MLP": {
        "op_embed_dim": (32, 8, "shapes"),
        "mlp_layers": (2, 1, "shapes"),
        "hidden_activation": ("leaky_relu", "relu", "scores"),
        "hidden_dim": (64, 16, "shapes"),
        "reduction": ("sum", "mean", "scores"),
    },
}
OURS_ONLY = {"chunk_size", "keep_default_gate", "default_margin"}  # keywords we add


def build(name: str, num_configs: int = CONFIGS, num_ops: int = 121, **extra):
    """Class `name` (or the class of variant `name`) with its TINY keywords and `extra`."""
    cls = getattr(models, VARIANTS.get(name, (name,))[0])
    return cls(num_configs, num_ops, **{**TINY[name], **extra})


def num_configs_of(graph) -> int:
    return int(graph.node_sets["config"].sizes[0])


def copy_in_order(target, source) -> None:
    """The course script's reload: pairwise, in order, equal shapes."""
    assert len(target.trainable_variables) == len(source.trainable_variables)
    for t, s in zip(target.trainable_variables, source.trainable_variables):
        assert t.shape == s.shape
        t.assign(s)


def shapes(model) -> list[tuple[str, list[int]]]:
    """Variable kinds and shapes in order (Keras numbers layer names per process: drop that)."""
    return [(v.name.split("/")[-1], v.shape.as_list()) for v in model.trainable_variables]


@pytest.fixture(scope="module")
def dataset(synth_root):
    return data.load_dataset(synth_root, min_train_configs=CONFIGS, progress=False)


@pytest.fixture(scope="module")
def kernels(dataset):
    """Four validation kernels with all their configs; the one with the most configs first."""
    graphs = sorted(data.graph_dataset(dataset.valid, dataset.stats), key=num_configs_of)
    return [graphs[-1], *graphs[:3]]


@pytest.fixture(scope="module")
def batch(dataset):
    """One training batch: BATCH kernels with CONFIGS configs each, as `call` receives it."""
    graph, _ = next(
        iter(
            data.training_batches(
                dataset.train, dataset.stats, num_configs=CONFIGS, batch_size=BATCH, seed=0
            )
        )
    )
    return graph


# ---------------------------------------------------------------------------------------------
# Variables and arguments
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*CLASSES, DEFAULT_AWARE])
def test_variables_do_not_depend_on_configs_ops_or_first_call(name, kernels, batch):
    big, small = kernels[0], kernels[1]
    a = build(name, num_configs=CONFIGS, num_ops=60)
    a.forward(small, num_configs_of(small))
    b = build(name, num_configs=50, num_ops=121)
    b.forward(big, num_configs_of(big))
    assert shapes(a) == shapes(b)
    assert len(a.trainable_variables) > 0
    # One forward created everything: a training call afterwards adds no variable.
    before = len(a.trainable_variables)
    assert a(batch).shape == (BATCH, CONFIGS)
    assert len(a.trainable_variables) == before
    assert not a.non_trainable_variables, "state the course copy would miss"
    # `score_split` puts several kernels in one call only where configs do not see each other.
    from tpu_tiles_models import scoring

    assert scoring.KernelScorer(a).grouped == (name not in SEES_OTHER_CONFIGS)


@pytest.mark.parametrize("name", BASELINES)
def test_upstream_kwargs_defaults_and_meaning(name, kernels):
    """Every upstream keyword exists with upstream's default, and another value changes the
    variables' shapes or, for the same variables, the scores."""
    ours = registry.resolved_kwargs(name, {}, models)  # its keywords' defaults, base classes too
    upstream = UPSTREAM_KWARGS[name]
    assert {k: v[0] for k, v in upstream.items()} == {k: ours[k] for k in upstream}
    assert set(ours) - set(upstream) == OURS_ONLY

    graph = kernels[1]
    n = num_configs_of(graph)
    default = getattr(models, name)(CONFIGS, 121)
    reference = default.forward(graph, n).numpy()
    for key, (_, value, effect) in upstream.items():
        variant = getattr(models, name)(CONFIGS, 121, **{key: value})
        scores = variant.forward(graph, n).numpy()
        assert scores.shape == (1, n) and np.isfinite(scores).all(), key
        assert (shapes(variant) != shapes(default)) == (effect == "shapes"), key
        if effect == "scores":
            copy_in_order(variant, default)
            assert not np.allclose(variant.forward(graph, n).numpy(), reference), key


def test_baseline_defaults_match_upstream_layer_sizes(kernels):
    """EarlyJoinSAGE: 64-wide opcode embedding (128 rows); ResGCN directed triples its MLPs."""
    graph = kernels[1]
    sage = models.EarlyJoinSAGE(CONFIGS, 121)
    sage.forward(graph, num_configs_of(graph))
    assert sage.trainable_variables[0].shape == (models.OPCODE_VOCAB, 64)
    counts = {}
    for directed in (False, True):
        gcn = models.EarlyJoinResGCN(CONFIGS, 121, directed=directed)
        gcn.forward(graph, num_configs_of(graph))
        counts[directed] = len(gcn.trainable_variables)
    # embedding + 3 GCN layers x (1 or 3) MLPs x 2 dense x (kernel, bias) + prenet + head,
    # and ours: the ranking rule's gate and margin
    assert counts == {False: 1 + 3 * 1 * 4 + 4 + 4 + 2, True: 1 + 3 * 3 * 4 + 4 + 4 + 2}


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_regularise_like_upstream(name, batch):
    """L2 1e-4 on every dense kernel plus 1e-4 x mean squared norm of the opcode embeddings."""
    model = build(name)
    model(batch)
    embedding = model.trainable_variables[0]
    opcodes = tf.clip_by_value(tf.cast(batch.node_sets["op"]["op"], tf.int32), 0, 127)
    looked_up = tf.gather(embedding, opcodes)
    activity = 1e-4 * tf.reduce_sum(looked_up**2) / tf.cast(tf.shape(looked_up)[0], tf.float32)
    kernels = [v for v in model.trainable_variables if v.name.endswith("kernel:0")]
    weights = 1e-4 * tf.add_n([tf.reduce_sum(k**2) for k in kernels])
    assert len(model.losses) == len(kernels) + 1
    np.testing.assert_allclose(float(tf.add_n(model.losses)), float(activity + weights), rtol=1e-5)


def test_too_many_opcodes_is_rejected():
    with pytest.raises(ValueError, match="num_ops=200"):
        models.ResidualSAGE(CONFIGS, 200)


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("ResidualSAGE", {"num_layers": 0}, "ResidualSAGE: num_layers must be an integer >= 1"),
        ("MLP", {"chunk_size": 0}, "MLP: chunk_size must be an integer >= 1"),
        ("EarlyJoinSAGE", {"hidden_activation": "nope"}, "hidden_activation='nope'"),
        ("MLP", {"hidden_activation": "l2_loss"}, "hidden_activation='l2_loss' is not an"),
        ("ResidualSAGE", {"activation": "dropout"}, "activation='dropout' is not an activation"),
        ("LateJoinResGCN", {"directed": 1}, "directed must be true or false"),
        ("LateJoinResGCN", {"reduction": "median"}, "reduction='median' is not a TF-GNN"),
        ("EarlyJoinResGCN", {"num_gnns": -1}, "num_gnns must be an integer >= 0"),
        ("Ensemble", {"members": [{"model": "Foo"}]}, r"members\[0\]: unknown model 'Foo'"),
        ("Ensemble", {"members": []}, "members must be a non-empty list"),
        ("Ensemble", {"members": [{"model": "MLP", "kw": {}}]}, r"members\[0\] must be"),
        (
            "Ensemble",
            {"members": [{"model": "MLP"}, {"model": "MLP", "kwargs": {"depth": 2}}]},
            r"members\[1\] \(MLP\): .*depth",
        ),
        ("Ensemble", {"members": [{"model": "MLP"}], "combine": "mean"}, "combine='mean'"),
    ],
)
def test_bad_kwargs_name_the_argument(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        getattr(models, name)(CONFIGS, 121, **kwargs)


# ---------------------------------------------------------------------------------------------
# forward
# ---------------------------------------------------------------------------------------------


def assert_scores_close(got, ref, rel: float = 1e-5) -> None:
    """Float32 scores equal up to rounding. The tolerance scales with the scores' magnitude:
    chunked and whole passes sum in other orders, which moves a score of about 50 by a few
    float32 ulps (1.3e-5 on an AMD EPYC without AVX-512), more than a fixed 1e-5."""
    ref = np.asarray(ref)
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    np.testing.assert_allclose(np.asarray(got), ref, rtol=rel, atol=rel * scale)


@pytest.mark.parametrize("name", ["ResidualSAGE", "EarlyJoinSAGE", "LateJoinResGCN", DEFAULT_AWARE])
def test_forward_chunks_agree_with_one_chunk_and_with_call(name, kernels):
    graph = kernels[0]
    n = num_configs_of(graph)
    whole = build(name, num_configs=n)
    whole.forward(graph, n)
    chunked = build(name, num_configs=n, chunk_size=7)
    chunked.forward(graph, n)
    copy_in_order(chunked, whole)
    ref = whole.forward(graph, n).numpy()
    assert ref.shape == (1, n)
    assert_scores_close(chunked.forward(graph, n).numpy(), ref)
    assert_scores_close(whole(graph).numpy(), ref)
    # A tensor config count gives the same scores as a Python int.
    assert_scores_close(whole.forward(graph, tf.constant(n)).numpy(), ref)


def _joined_reference(model, graph, n: int) -> np.ndarray:
    """Scores through the joined `[op_e || config || feats]` input and unsplit layers, as the
    early-join baselines computed them before their first layer was split."""
    op_e, feats = model._node_parts(graph)
    configs = models._config_features(graph, n)
    join = models.EarlyJoin(None, [], neighbours=False)  # the join itself, built
    x = model._backbone(graph, join(graph, (op_e, feats), configs))
    return model.head(models._pool(graph, x, [model._reduction])).numpy()


def _assert_same_ranking(scores: np.ndarray, ref: np.ndarray, k: int = 5) -> None:
    """Equal within float tolerance, and the same top-k but for configs tied within it."""
    assert_scores_close(scores, ref)
    for row, ref_row in zip(scores, ref):
        cutoff = np.sort(ref_row)[min(k, len(ref_row)) - 1] + 1e-5
        assert (ref_row[np.argsort(row, kind="stable")[:k]] <= cutoff).all()


@pytest.mark.parametrize("name", ["EarlyJoinSAGE", "EarlyJoinResGCN"])
def test_split_early_join_scores_like_the_joined_input(name, kernels, batch):
    """The first layer's node half, computed once per kernel, plus its config half: the same
    scores and top-5 as the joined input through the unsplit layer, chunked or not, and in
    training batches of several kernels."""
    model = build(name, num_gnns=2, chunk_size=7)
    for graph in kernels:
        n = num_configs_of(graph)
        scores = model.forward(graph, n).numpy()
        _assert_same_ranking(scores, _joined_reference(model, graph, n))
    _assert_same_ranking(model(batch).numpy(), _joined_reference(model, batch, CONFIGS))


def test_sage_layer_sums_neighbours_after_its_product_as_before(kernels):
    """`W [S x || x]` as `S (x W_n) + x W_self`: the scores of the concatenated formula."""
    graph = kernels[0]
    n = int(graph.node_sets["op"].sizes[0])
    x = tf.constant(np.random.default_rng(0).random((n, 5, 6)), tf.float32)
    layer = models.BidirectionalSAGELayer(units=8)
    got = layer(graph, x).numpy()
    dense = layer.dense
    concatenated = dense(tf.concat([models._neighbours(graph, x), x], axis=-1))
    ref = tf.math.l2_normalize(tf.nn.leaky_relu(concatenated), axis=-1).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_sums_over_edges_match_tf_gnn_pooling():
    """The sparse-product neighbour sums and means equal TF-GNN's broadcast-and-pool, with a
    repeated edge, a self-loop, an isolated node and two components."""
    import tensorflow_gnn as tfgnn

    edges = np.array([[0, 1], [0, 1], [2, 0], [1, 1], [4, 3]])  # node 5 has no edges
    graph = tfgnn.GraphTensor.from_pieces(
        node_sets={"op": tfgnn.NodeSet.from_fields(sizes=[3, 3], features={})},
        edge_sets={
            "feed": tfgnn.EdgeSet.from_fields(
                sizes=[4, 1],
                adjacency=tfgnn.Adjacency.from_indices(("op", edges[:, 0]), ("op", edges[:, 1])),
            )
        },
    )
    h = tf.constant(np.random.default_rng(0).random((6, 3, 2)), tf.float32)

    def pooled(receiver, reduction="sum"):
        sender = tfgnn.reverse_tag(receiver)
        messages = tfgnn.broadcast_node_to_edges(graph, "feed", sender, feature_value=h)
        return tfgnn.pool_edges_to_node(graph, "feed", receiver, reduction, feature_value=messages)

    for receiver in (tfgnn.SOURCE, tfgnn.TARGET):
        got = models._neighbours(graph, h, (receiver,))
        np.testing.assert_allclose(got, pooled(receiver), rtol=1e-6)
        got = models._neighbours(graph, h, (receiver,), mean=True)
        np.testing.assert_allclose(got, pooled(receiver, "mean"), rtol=1e-6)
    both = pooled(tfgnn.SOURCE) + pooled(tfgnn.TARGET)
    np.testing.assert_allclose(models._neighbours(graph, h), both, rtol=1e-6)


def _with_configs_in_order(graph, order: np.ndarray):
    """`graph` (one kernel) with its config rows in `order`."""
    configs = graph.node_sets["config"]
    moved = {k: tf.gather(configs[k], order) for k in ("feats", "runtimes", "normalizers")}
    return graph.replace_features(node_sets={"config": moved})


def test_default_context_reads_position_0_and_learns_nothing_fixed(kernels):
    """The default-aware model sees which config stands first; the others do not care."""
    graph = kernels[1]
    n = num_configs_of(graph)
    aware = build(DEFAULT_AWARE, num_configs=n, config_attention=False)
    plain = build("ResidualSAGE", num_configs=n, config_attention=False)
    assert (aware.default_first, plain.default_first) == (True, False)
    spec = [{"model": "ResidualSAGE", "kwargs": TINY[DEFAULT_AWARE]}, {"model": "MLP"}]
    assert models.Ensemble(CONFIGS, 121, members=spec).default_first
    assert models.Ensemble(CONFIGS, 121, members=spec[1:]).default_first is False
    with pytest.raises(ValueError, match="default_context must be true or false"):
        models.ResidualSAGE(CONFIGS, 121, default_context="yes")
    swap = np.arange(n)
    swap[[0, 2]] = [2, 0]
    base = aware.forward(graph, n).numpy()[0]
    swapped = aware.forward(_with_configs_in_order(graph, swap), n).numpy()[0]
    # A config moved to position 0 is scored as the default...
    assert not np.allclose(swapped[swap], base, atol=1e-5)
    # ...and configs 3.. keep their own features but see another default: their scores change.
    assert not np.allclose(swapped[3:], base[3:], atol=1e-5)
    # Without the context, a config's score does not depend on where it stands.
    base = plain.forward(graph, n).numpy()[0]
    swapped = plain.forward(_with_configs_in_order(graph, swap), n).numpy()[0]
    np.testing.assert_allclose(swapped[swap], base, atol=1e-5)


@pytest.mark.parametrize("value", [1, "yes", None, "alone"])  # "alone": an ablation, gone
def test_config_attention_takes_its_set_contexts_only(value):
    with pytest.raises(ValueError, match="config_attention=.* is not one of"):
        models.ResidualSAGE(CONFIGS, 121, config_attention=value)


def test_gated_set_context_starts_small_and_reads_the_other_configs(kernels):
    """The gated block's gates start at GATE_INIT and at 0 leave `h` as it is; its FFN is two
    layers; it reads the other configs (config 0's score moves when the others change)."""
    graph = kernels[1]
    n = num_configs_of(graph)
    gated = build("ResidualSAGE", num_configs=n, config_attention="gated")
    gated.forward(graph, n)
    block = gated._attention
    np.testing.assert_array_equal(
        np.stack(block._gates), np.full([2, 16], models.GATE_INIT, np.float32)
    )
    assert [d.kernel.shape.as_list() for d in block._ffn] == [[16, 64], [64, 16]]
    ungated = build("ResidualSAGE", num_configs=n, config_attention=True)
    ungated.forward(graph, n)
    extra = [("a:0", [16]), ("f:0", [16]), ("kernel:0", [64, 16]), ("bias:0", [16])]
    assert len(shapes(gated)) == len(shapes(ungated)) + len(extra)
    h = tf.random.stateless_normal([2, 5, 16], seed=[1, 2])
    shut = models.ConfigSetAttention(units=16, gated=True)
    shut(h)
    for gate in shut._gates:
        gate.assign(tf.zeros([16]))
    np.testing.assert_array_equal(shut(h).numpy(), h.numpy())

    other = _with_configs_in_order(graph, np.minimum(np.arange(n), 1))  # all but 0 as config 1
    for gate in block._gates:  # open, so that what the attention reads shows
        gate.assign(tf.ones([16]))
    base, moved = (gated.raw_scores(g, n).numpy()[0] for g in (graph, other))
    assert abs(moved[0] - base[0]) > 1e-5 * max(1.0, abs(base[0]))
    from tpu_tiles_models import scoring

    assert not scoring.KernelScorer(gated).grouped  # its configs are scored together


def _kernel_with_6000_configs(stats) -> tuple:
    """A 12-node kernel with 6000 configs: the config count is the point, not the graph."""
    rng = np.random.default_rng(0)
    n, e, c = 12, 16, 6000
    producers = rng.integers(0, n - 1, size=e)
    split = data.Split(
        name="big",
        tile_ids=["big"],
        files=["big.npz"],
        node_feat=rng.random((n, data.NODE_FEAT_DIM), dtype=np.float32),
        node_opcode=rng.integers(1, 120, size=n).astype(np.int32),
        edge_index=np.stack([np.minimum(producers + 1, n - 1), producers], 1).astype(np.int32),
        config_feat=rng.random((c, data.CONFIG_FEAT_DIM), dtype=np.float32),
        config_runtime=rng.random(c) + 1,
        config_runtime_normalizers=np.ones(c),
        node_offsets=np.array([0, n]),
        edge_offsets=np.array([0, e]),
        config_offsets=np.array([0, c]),
    )
    return data.kernel_graph(split, 0, stats), c


@pytest.mark.parametrize("name", ["ResidualSAGE", "Ensemble"])
def test_forward_on_a_6000_config_kernel(name, dataset):
    """Big kernels run in chunks: [nodes, chunk, dim] at a time, never all configs at once."""
    graph, c = _kernel_with_6000_configs(dataset.stats)
    small = {"hidden_dim": 8, "num_layers": 1, "op_embed_dim": 4}
    kwargs = (
        {"members": [{"model": "ResidualSAGE", "kwargs": small}, {"model": "MLP"}]}
        if name == "Ensemble"
        else small
    )
    scores = getattr(models, name)(CONFIGS, 121, **kwargs).forward(graph, c).numpy()
    assert scores.shape == (1, c) and np.isfinite(scores).all()
    assert np.unique(scores).size > c // 2, "configs must get distinct scores"


# ---------------------------------------------------------------------------------------------
# Upstream's life cycle: compile, fit, save, load_model, rebuild, forward, in-order copy
# ---------------------------------------------------------------------------------------------


def _easy_labels(graph, labels):
    """A target any model can learn: runtime grows linearly with every config feature."""
    feats = tf.reshape(graph.node_sets["config"]["feats"], [BATCH, CONFIGS, -1])
    weights = tf.linspace(1.0, 2.0, tf.shape(feats)[-1])
    return graph, 1.0 + tf.linalg.matvec(feats, weights)


@pytest.fixture(scope="module")
def fit_data(dataset) -> dict:
    """`model.fit` arguments: train and validation batches with easy labels, made once.

    Cached, repeated and read with fixed steps, so that every fit replays the same batches and
    opens one iterator per split (opening one over the GraphTensor pipeline per epoch cost more
    than the training itself).
    """
    splits = {}
    for key, split, shuffle in (("train", dataset.train, True), ("valid", dataset.valid, False)):
        batches = data.training_batches(
            split, dataset.stats, num_configs=CONFIGS, batch_size=BATCH, seed=0, shuffle=shuffle
        )
        batches = batches.map(_easy_labels).cache()
        splits[key] = (batches.repeat(), sum(1 for _ in batches))
    (train, train_steps), (valid, valid_steps) = splits["train"], splits["valid"]
    return dict(
        x=train,
        steps_per_epoch=train_steps,
        validation_data=valid,
        validation_steps=valid_steps,
    )


# Fitted as upstream's trainer fits: unbuilt, its variables made in the first trace of the
# training step. The others are built first, by one call and the optimizer's `build`: a first
# trace that makes variables is traced again, so this halves their fit. (That one call makes
# every variable, and a training call none: test_variables_do_not_depend_on_configs_....)
FITTED_UNBUILT = "MLP"


def _fit_like_upstream(name: str, fit_data: dict, epochs: int):
    tf.keras.utils.set_random_seed(0)
    model = build(name)
    if name != FITTED_UNBUILT:
        model(next(iter(fit_data["x"]))[0])
    model.compile(
        loss=CombinedLoss("ListMLELoss:1,MSE:0.02"),
        optimizer=tf.keras.optimizers.Adam(learning_rate=1e-2, clipnorm=1e-3),
        metrics=[ranking.OrderedPairAccuracy(name="opa_metric")],
    )
    if name != FITTED_UNBUILT:
        model.optimizer.build(model.trainable_variables)
    history = model.fit(epochs=epochs, verbose=0, **fit_data)
    return model, history.history


@pytest.fixture(scope="module")
def fitted(fit_data):
    """`fitted(name)` -> (model, history): each class fitted once for the whole module."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _fit_like_upstream(name, fit_data, epochs=4)
        return cache[name]

    return get


# The tests of fitted models are one work unit of their own (tests/conftest.py): one worker fits
# each class once, while the other runs the rest of this file.
_FITTED = pytest.mark.xdist_group("models_fitted")


# ResidualSAGE goes through it as DEFAULT_AWARE: the same layers and its default context, so
# the variant without the context would repeat its life cycle (ResidualSAGEPlain has neither).
@pytest.mark.slow
@_FITTED
@pytest.mark.parametrize("name", [n for n in CLASSES if n != "ResidualSAGE"] + [DEFAULT_AWARE])
def test_upstream_life_cycle(name, fitted, kernels, tmp_path):
    """Construct, compile, fit, save, load_model, rebuild, forward, copy: identical scores."""
    model, history = fitted(name)
    assert history["loss"][-1] < history["loss"][0]
    # Learning is judged on the validation batches, scored by the epoch's final weights: the
    # train metric is a running mean over six batches of four kernels while the weights move
    # at lr 1e-2, too noisy on tiny data to fall steadily.
    assert history["val_opa_metric"][-1] > max(0.6, history["val_opa_metric"][0])

    model_dir = tmp_path / "model_0123"
    model.save(str(model_dir))
    with tf.keras.saving.custom_object_scope({"CombinedLoss": CombinedLoss}):
        loaded = tf.keras.models.load_model(str(model_dir))
    fresh = build(name, num_configs=CONFIGS, num_ops=60)
    fresh.forward(kernels[1], num_configs_of(kernels[1]))
    copy_in_order(fresh, loaded)
    for graph in kernels:
        n = num_configs_of(graph)
        assert_scores_close(fresh.forward(graph, n).numpy(), model.forward(graph, n).numpy())


# ---------------------------------------------------------------------------------------------
# Ensemble
# ---------------------------------------------------------------------------------------------


def _ranking(model, graph) -> np.ndarray:
    return np.argsort(model.forward(graph, num_configs_of(graph)).numpy()[0], kind="stable")


def _ensemble_of(name, copies, combine, kernels, weights_from):
    """An Ensemble of `copies` members of class `name`, each given `weights_from`'s weights."""
    spec = {"model": name, "kwargs": TINY[name]}
    ensemble = models.Ensemble(CONFIGS, 121, members=[spec] * copies, combine=combine)
    ensemble.forward(kernels[1], num_configs_of(kernels[1]))
    for member in ensemble.members:
        copy_in_order(member, weights_from)
    return ensemble


@_FITTED
@pytest.mark.parametrize("combine", models.COMBINE_METHODS)
def test_ensemble_of_one_or_twice_the_same_model_ranks_like_it(combine, fitted, kernels):
    model, _ = fitted("MLP")
    one = _ensemble_of("MLP", 1, combine, kernels, model)
    two = _ensemble_of("MLP", 2, combine, kernels, model)
    for graph in kernels:
        assert _ranking(one, graph).tolist() == _ranking(model, graph).tolist()
        assert _ranking(two, graph).tolist() == _ranking(model, graph).tolist()
        n = num_configs_of(graph)
        assert_scores_close(two.forward(graph, n), one.forward(graph, n), rel=1e-6)


@_FITTED
def test_ensemble_averages_normalised_member_scores(fitted, kernels, batch):
    ensemble, _ = fitted("Ensemble")
    members = ensemble.members
    assert [m.__class__.__name__ for m in members] == ["MLP", "LateJoinSAGE"]
    # The members' variables in member order, then its own two: its ranking rule's.
    refs = [v.ref() for v in ensemble.trainable_variables]
    own = ensemble.trainable_variables[-2:]
    assert refs == [v.ref() for m in members for v in m.trainable_variables] + [
        v.ref() for v in own
    ]
    assert [v.name.split(":")[0] for v in own] == ["keep_default_gate", "default_margin"]
    assert margin.rule_of(ensemble) is False and margin.margin_of(ensemble) == 0.0
    graph = kernels[0]
    n = num_configs_of(graph)
    per_member = [models.normalise_scores(m.raw_scores(graph, n), "zscore") for m in members]
    assert_scores_close(ensemble.forward(graph, n), sum(per_member) / 2)
    per_member = [models.normalise_scores(m(batch), "zscore") for m in members]
    assert_scores_close(ensemble(batch), sum(per_member) / 2)


def test_normalise_scores_per_kernel():
    scores = tf.constant([[3.0, 1.0, 2.0, 6.0], [5.0, 5.0, 5.0, 5.0]])
    z = models.normalise_scores(scores, "zscore").numpy()
    np.testing.assert_allclose(z[0].mean(), 0.0, atol=1e-6)
    np.testing.assert_allclose(z[0].std(), 1.0, atol=1e-5)
    np.testing.assert_allclose(
        models.normalise_scores(scores, "minmax").numpy()[0], [0.4, 0.0, 0.2, 1.0], atol=1e-6
    )
    np.testing.assert_allclose(
        models.normalise_scores(scores, "rank").numpy()[0], [2 / 3, 0.0, 1 / 3, 1.0], atol=1e-6
    )
    for method in models.COMBINE_METHODS:  # a kernel whose configs all tie stays finite
        assert np.isfinite(models.normalise_scores(scores, method).numpy()[1]).all()
    np.testing.assert_allclose(z[1], 0.0)


# One model of each way `score_split` groups kernels: without and with the default context.
GROUPED = ("EarlyJoinSAGE", "ResidualSAGEPlain:default_context")


@pytest.mark.parametrize("name", GROUPED)
def test_kernels_scored_together_score_as_one_by_one(name, dataset, monkeypatch):
    """`score_split` scores small kernels of models with `independent_configs` several per call,
    padded to the most configs among them: the scores, top-5, runtimes and order of one call
    per kernel. The default context sees only position 0, which the padding (appended) leaves
    in place. (Models whose configs see each other are scored one by one: which are grouped
    is checked for every class in test_variables_do_not_depend_on_configs_ops_or_first_call.)"""
    from tpu_tiles_models import scoring

    model = build(name)
    first = next(iter(data.graph_dataset(dataset.valid, dataset.stats)))
    model.forward(first, num_configs_of(first))
    assert scoring.KernelScorer(model).grouped
    monkeypatch.setattr(scoring, "GROUP_PADDING", 4.0)  # tiny kernels: let groups form
    order = [5, 0, 3, 1, 7, 2]
    for max_configs in (None, 7):
        together = scoring.KernelScorer(model)
        alone = scoring.KernelScorer(model)
        alone.grouped = False
        got, want = (
            scoring.score_split(
                model,
                dataset.valid,
                dataset.stats,
                kernels=order,
                max_configs=max_configs,
                scorer=scorer,
                progress=False,
            )
            for scorer in (together, alone)
        )
        assert [g.tile_id for g in got] == [dataset.valid.tile_ids[k] for k in order]
        assert [g.tile_id for g in got] == [w.tile_id for w in want]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.runtimes, w.runtimes)
            _assert_same_ranking(g.scores[np.newaxis], w.scores[np.newaxis])
    plan = scoring.plan_groups(order, dataset.valid.config_counts()[order], np.ones(6, int))
    assert sorted(k for g in plan for k in g) == sorted(order) and len(plan) < len(order)


@pytest.mark.parametrize("name", ["EarlyJoinSAGE", "ResidualSAGE"])
def test_a_reused_sample_is_prepared_once_and_scores_as_fresh(name, dataset, monkeypatch):
    """`score_split(..., reuse=True)` (the trainer's per-epoch sample) prepares its kernels on
    the first call only; later calls replay them, with the scores of a fresh pass after the
    weights change. Another sample, or `reuse=False`, is prepared anew."""
    from tpu_tiles_models import scoring

    model = build(name)
    first = next(iter(data.graph_dataset(dataset.valid, dataset.stats)))
    model.forward(first, num_configs_of(first))
    prepared = []
    components = data._components
    monkeypatch.setattr(
        data,
        "_components",
        lambda split, stats, kernels, *a, **k: (
            prepared.extend(kernels) or components(split, stats, kernels, *a, **k)
        ),
    )
    scorer = scoring.KernelScorer(model)
    sample = dict(kernels=[4, 1, 6], max_configs=5, scorer=scorer, progress=False)

    def score(**changes):
        kwargs = {**sample, **changes}
        return scoring.score_split(model, dataset.valid, dataset.stats, **kwargs)

    score(reuse=True)
    assert sorted(prepared) == [1, 4, 6]
    for v in model.trainable_variables:  # other weights, as after an epoch
        v.assign(v * 1.5)
    prepared.clear()
    kept = score(reuse=True)
    assert prepared == []
    fresh = score()
    assert sorted(prepared) == [1, 4, 6]
    assert [s.tile_id for s in kept] == [dataset.valid.tile_ids[k] for k in (4, 1, 6)]
    for a, b in zip(kept, fresh):
        np.testing.assert_array_equal(a.runtimes, b.runtimes)
        np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6, atol=1e-6)
    prepared.clear()
    score(kernels=[4, 1], reuse=True)
    assert sorted(prepared) == [1, 4]


def _with_repeated_configs(split: data.Split) -> data.Split:
    """`split` with every odd config's features replaced by the config before it (runtimes
    left as they were): each kernel repeats about half its feature rows, as real kernels do."""
    feats = split.config_feat.copy()
    for k in range(len(split)):
        start, stop = split.config_offsets[k], split.config_offsets[k + 1]
        feats[start + 1 : stop : 2] = feats[start:stop][: (stop - start) // 2 * 2 : 2]
    return dataclasses.replace(split, config_feat=feats)


def test_distinct_configs_keep_file_order_and_map_back_bit_for_bit(dataset):
    repeated = _with_repeated_configs(dataset.valid)
    for k in range(len(repeated)):
        start, stop = repeated.config_offsets[k], repeated.config_offsets[k + 1]
        for spread, first_alone in itertools.product((None, 7), (False, True)):
            d = data.DistinctConfigs.of(repeated, k, spread, first_alone=first_alone)
            picks = data._pick_configs(start, stop, -1, np.random.default_rng(0), spread)
            np.testing.assert_array_equal(d.picks, picks)
            assert d.rows[0] == start and (np.diff(d.rows) > 0).all()  # config 0 first
            np.testing.assert_array_equal(
                repeated.config_feat[d.rows][d.inverse], repeated.config_feat[picks]
            )
            others = repeated.config_feat[d.rows[first_alone:]]
            assert len(np.unique(others, axis=0)) == len(others)
            if first_alone:  # position 0 (the default) shares its row with no other config
                assert (d.inverse == 0).sum() == 1
        if stop - start >= 4:
            n = stop - start
            assert len(data.DistinctConfigs.of(repeated, k).rows) == (n + 1) // 2
            assert len(data.DistinctConfigs.of(repeated, k, first_alone=True).rows) == (
                (n + 1) // 2 + 1
            )


@pytest.mark.parametrize("name", GROUPED)
def test_repeated_configs_are_scored_once_with_the_scores_of_every_config(
    name, dataset, monkeypatch
):
    """`score_split` feeds the model each distinct config row of a kernel once and copies its
    score to the repeats: the scores, top-5 and runtimes of scoring every config."""
    from tpu_tiles_models import scoring

    model = build(name)
    first = next(iter(data.graph_dataset(dataset.valid, dataset.stats)))
    model.forward(first, num_configs_of(first))
    repeated = _with_repeated_configs(dataset.valid)
    fed = []
    components = data._components
    monkeypatch.setattr(
        data,
        "_components",
        lambda *a, **k: fed.append(components(*a, **k)) or fed[-1],
    )
    together = scoring.KernelScorer(model)
    alone = scoring.KernelScorer(model)
    alone.grouped = False  # one kernel a call, every config: the reference
    got = scoring.score_split(model, repeated, dataset.stats, scorer=together, progress=False)
    fed_rows = sum(len(f["config_feats"]) for f in fed)
    want = scoring.score_split(model, repeated, dataset.stats, scorer=alone, progress=False)
    assert fed_rows < 0.75 * repeated.config_counts().sum()
    for g, w in zip(got, want):
        assert g.tile_id == w.tile_id
        np.testing.assert_array_equal(g.runtimes, w.runtimes)
        _assert_same_ranking(g.scores[np.newaxis], w.scores[np.newaxis])
        pairs = len(g.scores) // 2 * 2  # config 1 repeats config 0, the default, for some
        np.testing.assert_array_equal(g.scores[3:pairs:2], g.scores[2:pairs:2])
