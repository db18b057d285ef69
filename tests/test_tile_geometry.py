"""`TileGeometry`: the tile counts and padding it computes, where the raw columns come from, and
that our trainer sets them (ResidualSAGE's `tile_geometry`)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_gnn as tfgnn
from conftest import TINY_RESIDUAL, tiny_args

from tpu_tiles_models import data, registry

models = registry.load_models_module()

# Raw values as features (index i, lo 0, hi 1): 6 shape dims, 6 layout entries; 6 bounds.
IDENTITY = [[float(i), 0.0, 1.0] for i in range(12)] + [[float(i), 0.0, 1.0] for i in range(6)]


def _graph(nodes: np.ndarray, configs: np.ndarray) -> tfgnn.GraphTensor:
    """One kernel: `nodes` `[n, 12]` (shape, layout), a chain of `feed` edges, `configs`
    `[c, 6]` (output bounds)."""
    n = len(nodes)
    return tfgnn.GraphTensor.from_pieces(
        node_sets={
            "op": tfgnn.NodeSet.from_fields(
                sizes=[n], features={"op": tf.zeros([n], tf.int32), "feats": nodes}
            ),
            "config": tfgnn.NodeSet.from_fields(sizes=[len(configs)], features={"feats": configs}),
        },
        edge_sets={
            "feed": tfgnn.EdgeSet.from_fields(
                sizes=[n - 1],
                adjacency=tfgnn.Adjacency.from_indices(
                    ("op", tf.range(n - 1)), ("op", tf.range(1, n))
                ),
            )
        },
    )


def _features(nodes, configs, columns=IDENTITY) -> np.ndarray:
    nodes, configs = np.asarray(nodes, np.float32), np.asarray(configs, np.float32)
    layer = models.TileGeometry()
    layer.set_columns(columns)
    graph = _graph(nodes, configs)
    part = layer.kernel_part(tf.constant(nodes))
    return layer(graph, part, tf.constant(configs)[tf.newaxis]).numpy()  # [n, c, 21]


def test_tile_counts_and_padding_slot_by_slot_from_the_minor_most_dim():
    # Node 0: shape (200, 300), dim 1 minor-most: slot 0 is dim 1 (128-lanes), slot 1 dim 0 (8).
    # Node 1: a layout that is no permutation of its rank's dims: the last dim is minor-most.
    nodes = [[200, 300, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0], [16, 1000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
    configs = [[5, 2, 0, 0, 0, 0], [100, 9, 0, 0, 0, 0]]  # bounds by dim, in granules
    out = _features(nodes, configs)
    assert out.shape == (2, 2, 21)
    # Node 0, config 0: slot 0: 3 units of 128 over 300, 2 a tile -> 2 tiles of 256 elements;
    # slot 1: 25 units of 8 over 200, 5 a tile -> 5 tiles of 40.
    expected = [math.log(2), math.log(5), 0, 0, 0, 0]
    expected += [300 / 512, 200 / 200, 0, 0, 0, 0]
    expected += [math.log(256 / 300), math.log(40 / 200), 0, 0, 0, 0]
    expected += [math.log(10), 300 / 512, math.log(256 * 40)]
    np.testing.assert_allclose(out[0, 0], expected, rtol=1e-5, atol=1e-6)
    # Config 1 asks more than the dims hold: one tile each (bounds clipped to the units).
    np.testing.assert_allclose(out[0, 1, :2], [0, 0], atol=1e-6)
    np.testing.assert_allclose(out[0, 1, 6:8], [300 / 384, 1.0], rtol=1e-5)
    # Node 1, config 0: slot 0 is dim 1 (1000 over 128-lanes: 8 units, bound 2 -> 4 tiles of
    # 256), slot 1 dim 0 (16 over 8: 2 units, bound 5 clipped to 2 -> 1 tile of 16).
    np.testing.assert_allclose(out[1, 0, :2], [math.log(4), 0], atol=1e-6)
    np.testing.assert_allclose(out[1, 0, 6:8], [1000 / 1024, 1.0], rtol=1e-5)


def test_at_its_zeros_the_features_are_constant_and_no_gradient_moves_the_columns():
    nodes = [[200, 300, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0], [16, 1000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
    zeros = np.zeros((18, 3)).tolist()
    constant = np.zeros(21)
    constant[19] = 1.0  # the whole tile's padding: an empty product
    np.testing.assert_array_equal(
        _features(nodes, [[5, 2, 0, 0, 0, 0]], zeros)[:, 0], [constant] * 2
    )
    layer = models.TileGeometry()
    layer.set_columns(IDENTITY)
    graph = _graph(np.float32(nodes), np.float32([[5, 2, 0, 0, 0, 0]]))
    with tf.GradientTape() as tape:
        out = layer(
            graph,
            layer.kernel_part(tf.constant(nodes, tf.float32)),
            graph.node_sets["config"]["feats"][tf.newaxis],
        )
        loss = tf.reduce_sum(out)
    gradient = tape.gradient(loss, layer.columns)
    assert gradient is not None and not np.any(gradient.numpy())


def test_raw_columns_locate_kept_columns_and_carry_dropped_constants():
    keep = np.zeros(data.NODE_FEAT_DIM, bool)
    keep[[3, 21, 22]] = True  # column 21 is the second kept one
    config_keep = np.zeros(data.CONFIG_FEAT_DIM, bool)
    config_keep[8] = True
    stats = data.FeatureStats(
        node_keep=keep,
        node_min=np.float32([0, 2, 1]),
        node_max=np.float32([1, 500, 64]),
        config_keep=config_keep,
        config_min=np.float32([1]),
        config_max=np.float32([32]),
        num_ops=4,
        train_files=[],
    )
    node_feat = np.zeros((2, data.NODE_FEAT_DIM), np.float32)
    node_feat[:, 23] = 7.0  # constant on train: dropped
    train = SimpleNamespace(node_feat=node_feat, config_feat=np.ones((3, 24), np.float32))
    got = stats.raw_columns(train, [21, 22, 23], [8, 9])
    assert got == [[1, 2, 500], [2, 1, 64], [-1, 7, 7], [0, 1, 32], [-1, 1, 1]]


@pytest.mark.parametrize("in_ensemble", [False, True])
def test_our_trainer_sets_where_the_raw_columns_sit(in_ensemble, synth_root, tmp_path):
    from tpu_tiles_models import train

    kwargs = {**json.loads(TINY_RESIDUAL), "tile_geometry": True}
    model = "ResidualSAGE"
    if in_ensemble:
        model, kwargs = "Ensemble", {"members": [{"model": model, "kwargs": kwargs}]}
    result = train.train(
        tiny_args(synth_root, tmp_path, model=model, model_kwargs_json=json.dumps(kwargs))
    )
    dataset = data.load_dataset(str(synth_root), progress=False)
    node = models.SHAPE_COLUMNS + models.LAYOUT_COLUMNS
    expected = dataset.stats.raw_columns(dataset.train, node, models.OUTPUT_BOUND_COLUMNS)
    trained = result.model.members[0] if in_ensemble else result.model
    got = trained.geometry.columns.numpy()
    np.testing.assert_allclose(got, np.float32(expected))
    assert np.any(got[:, 0] >= 0)  # shape dims vary on the synthetic kernels: kept columns


@pytest.mark.parametrize("bad", ["yes", 1])
def test_tile_geometry_must_be_a_switch(bad):
    with pytest.raises(ValueError, match="tile_geometry must be true or false"):
        models.ResidualSAGE(4, 8, tile_geometry=bad)


def test_the_columns_travel_in_the_courses_in_order_copy(synth_root):
    # The course script restores a model by copying `trainable_variables` in order into a
    # fresh build: the columns our trainer set must travel with them.
    dataset = data.load_dataset(str(synth_root), progress=False)
    graph, n = data.kernel_graph(dataset.valid, 0, dataset.stats), dataset.valid.num_configs(0)
    kwargs = {**json.loads(TINY_RESIDUAL), "tile_geometry": True}
    trained, fresh = (models.ResidualSAGE(4, dataset.num_ops, **kwargs) for _ in range(2))
    for model in (trained, fresh):
        model.forward(graph, n)
    node = models.SHAPE_COLUMNS + models.LAYOUT_COLUMNS
    trained.geometry.set_columns(
        dataset.stats.raw_columns(dataset.train, node, models.OUTPUT_BOUND_COLUMNS)
    )
    for target, source in zip(fresh.trainable_variables, trained.trainable_variables):
        target.assign(source)
    np.testing.assert_array_equal(fresh.forward(graph, n), trained.forward(graph, n))
    unset = models.ResidualSAGE(4, dataset.num_ops, **kwargs)
    unset.forward(graph, n)
    for target, source in zip(unset.trainable_variables, trained.trainable_variables):
        if target is not unset.geometry.columns:
            target.assign(source)
    assert not np.array_equal(unset.forward(graph, n), trained.forward(graph, n))
