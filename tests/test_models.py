"""The contract of models.py with upstream: build, train, save, reload by the course procedure."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_ranking as tfr

from tpu_tiles_models import data, export, registry
from tpu_tiles_models.losses import CombinedLoss

models = registry.load_models_module()
CLASSES = list(registry.MODELS)
# Small widths keep CI fast; the contract does not depend on them.
TINY = {
    "ResidualSAGE": {"hidden_dim": 16, "num_layers": 2, "op_embed_dim": 8},
    "ResidualSAGEPlain": {"hidden_dim": 16, "num_layers": 2, "op_embed_dim": 8},
}
SMALL_PAPER = {"hidden_dim": 16, "op_embed_dim": 8}
CONFIGS, BATCH = 6, 4


def build(name: str, num_configs: int = CONFIGS, num_ops: int = 121, **extra):
    kwargs = {**TINY.get(name, SMALL_PAPER), **extra}
    return getattr(models, name)(num_configs, num_ops, **kwargs)


@pytest.fixture(scope="module")
def dataset(synth_root):
    return data.load_dataset(synth_root, min_train_configs=CONFIGS, progress=False)


@pytest.fixture(scope="module")
def kernels(dataset):
    """Every validation kernel, with all its configs."""
    return list(data.graph_dataset(dataset.valid, dataset.stats))


def shapes(model) -> list[tuple[str, list[int]]]:
    """Variable kinds and shapes in order (Keras numbers layer names per process: drop that)."""
    return [(v.name.split("/")[-1], v.shape.as_list()) for v in model.trainable_variables]


@pytest.mark.parametrize("name", CLASSES)
def test_variables_do_not_depend_on_configs_ops_or_first_call(name, kernels):
    small, big = kernels[0], max(kernels, key=lambda g: int(g.node_sets["config"].sizes[0]))
    a = build(name, num_configs=CONFIGS, num_ops=60)
    a.forward(small, int(small.node_sets["config"].sizes[0]))
    b = build(name, num_configs=50, num_ops=121)
    b.forward(big, int(big.node_sets["config"].sizes[0]))
    assert shapes(a) == shapes(b)
    assert len(a.trainable_variables) > 0
    # One forward created everything: calling `call` afterwards adds no variable.
    before = len(a.trainable_variables)
    a(small) if int(small.node_sets["config"].sizes[0]) == CONFIGS else None
    assert len(a.trainable_variables) == before
    assert not a.non_trainable_variables, "state the course copy would miss"


def test_too_many_opcodes_is_rejected():
    with pytest.raises(ValueError, match="num_ops=200"):
        models.ResidualSAGE(CONFIGS, 200)


def test_bad_kwargs_name_the_argument():
    with pytest.raises(ValueError, match="num_layers"):
        models.ResidualSAGE(CONFIGS, 121, num_layers=0)
    with pytest.raises(ValueError, match="chunk_size"):
        models.MLP(CONFIGS, 121, chunk_size=0)


@pytest.mark.parametrize("name", ["ResidualSAGE", "EarlyJoinSAGE"])
def test_forward_chunks_agree_with_one_chunk_and_with_call(name, kernels):
    graph = max(kernels, key=lambda g: int(g.node_sets["config"].sizes[0]))
    n = int(graph.node_sets["config"].sizes[0])
    whole = build(name, num_configs=n)
    whole.forward(graph, n)
    chunked = build(name, num_configs=n, chunk_size=7)
    chunked.forward(graph, n)
    export.copy_variables(chunked, whole, origin="test")
    ref = whole.forward(graph, n).numpy()
    assert ref.shape == (1, n)
    np.testing.assert_allclose(chunked.forward(graph, n).numpy(), ref, atol=1e-5)
    np.testing.assert_allclose(whole(graph).numpy(), ref, atol=1e-5)
    # A tensor config count gives the same scores as a Python int.
    np.testing.assert_allclose(whole.forward(graph, tf.constant(n)).numpy(), ref, atol=1e-5)


def test_forward_on_a_6000_config_kernel(dataset):
    """Big kernels run in chunks: [nodes, chunk, dim] at a time, never all configs at once."""
    rng = np.random.default_rng(0)
    n, e, c = 400, 700, 6000
    producers = rng.integers(0, n - 1, size=e)
    split = data.Split(
        name="big", tile_ids=["big"], files=["big.npz"],
        node_feat=rng.random((n, data.NODE_FEAT_DIM), dtype=np.float32),
        node_opcode=rng.integers(1, 120, size=n).astype(np.int32),
        edge_index=np.stack([np.minimum(producers + 1, n - 1), producers], 1).astype(np.int32),
        config_feat=rng.random((c, data.CONFIG_FEAT_DIM), dtype=np.float32),
        config_runtime=rng.random(c) + 1, config_runtime_normalizers=np.ones(c),
        node_offsets=np.array([0, n]), edge_offsets=np.array([0, e]),
        config_offsets=np.array([0, c]),
    )  # fmt: skip
    graph = data.kernel_graph(split, 0, dataset.stats)
    model = models.ResidualSAGE(CONFIGS, 121, hidden_dim=8, num_layers=1, op_embed_dim=4)
    scores = model.forward(graph, c).numpy()
    assert scores.shape == (1, c) and np.isfinite(scores).all()
    assert np.unique(scores).size > c // 2, "configs must get distinct scores"


def _easy_labels(graph, labels):
    """A target any model can learn: runtime grows linearly with every config feature."""
    feats = tf.reshape(graph.node_sets["config"]["feats"], [BATCH, CONFIGS, -1])
    weights = tf.linspace(1.0, 2.0, tf.shape(feats)[-1])
    return graph, 1.0 + tf.linalg.matvec(feats, weights)


def _fit_like_upstream(name, dataset, epochs):
    tf.keras.utils.set_random_seed(0)
    model = build(name)
    model.compile(
        loss=CombinedLoss("ListMLELoss:1,MSE:0.02"),
        optimizer=tf.keras.optimizers.Adam(learning_rate=1e-2, clipnorm=1e-3),
        metrics=[tfr.keras.metrics.OPAMetric(name="opa_metric")],
    )
    train = data.training_batches(
        dataset.train, dataset.stats, num_configs=CONFIGS, batch_size=BATCH, seed=0
    ).map(_easy_labels)
    valid = data.training_batches(
        dataset.valid, dataset.stats, num_configs=CONFIGS, batch_size=BATCH, shuffle=False
    ).map(_easy_labels)
    history = model.fit(train, epochs=epochs, validation_data=valid, verbose=0)
    return model, history.history


@pytest.mark.parametrize("name", CLASSES)
def test_upstream_life_cycle(name, dataset, kernels, tmp_path):
    """Construct, compile, fit, save, load_model, rebuild, forward, copy: identical scores."""
    model, history = _fit_like_upstream(name, dataset, epochs=4)
    assert history["loss"][-1] < history["loss"][0]
    assert history["opa_metric"][-1] > max(0.6, history["opa_metric"][0])

    model_dir = tmp_path / "model_0123"
    model.save(str(model_dir))
    with tf.keras.saving.custom_object_scope({"CombinedLoss": CombinedLoss}):
        loaded = tf.keras.models.load_model(str(model_dir))
    fresh = getattr(models, name)(num_configs=CONFIGS, num_ops=60, **TINY.get(name, SMALL_PAPER))
    n0 = int(kernels[0].node_sets["config"].sizes[0])
    fresh.forward(kernels[0], n0)
    assert len(fresh.trainable_variables) == len(loaded.trainable_variables)
    for target, source in zip(fresh.trainable_variables, loaded.trainable_variables):
        assert target.shape == source.shape
        target.assign(source)
    for graph in kernels:
        n = int(graph.node_sets["config"].sizes[0])
        np.testing.assert_allclose(
            fresh.forward(graph, n).numpy(), model.forward(graph, n).numpy(), atol=1e-5
        )
