"""`TileGeometry`: the tile counts and padding it computes, where the raw columns come from (the
column map, ResidualSAGE's `tile_geometry`), what `tpu-tiles columns` prints and our trainer
builds with, and that the map travels as upstream's trainer and the course's reload move it."""

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
IDENTITY = [[i, 0.0, 1.0] for i in range(12)] + [[i, 0.0, 1.0] for i in range(6)]


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
    layer = models.TileGeometry(columns=columns, widths=[12, 6])
    graph = _graph(nodes, configs)
    return layer(graph, layer.kernel_part(graph), tf.constant(configs)[tf.newaxis]).numpy()


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
    layer = models.TileGeometry(columns=IDENTITY)
    graph = _graph(np.float32(nodes), np.float32([[5, 2, 0, 0, 0, 0]]))
    with tf.GradientTape() as tape:
        configs = graph.node_sets["config"]["feats"][tf.newaxis]
        loss = tf.reduce_sum(layer(graph, layer.kernel_part(graph), configs))
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


def _run_columns(synth_root, capsys, *flags) -> dict:
    """`tpu-tiles columns` in-process: its JSON."""
    from tpu_tiles_models import cli

    assert cli.main(["columns", str(synth_root), "--cache_dir=", "--no_progress", *flags]) == 0
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def test_columns_prints_the_map_upstreams_preprocessing_gives(synth_root, capsys):
    """Fitted on the train kernels with at least --configs configs (upstream's filter), for
    each raw column its place among the kept ones and its train min and max."""
    printed = _run_columns(synth_root, capsys, "--configs=4")
    train = data.load_split(str(synth_root), "train", min_configs=4, progress=False)
    node, config = train.node_feat, train.config_feat
    geometry = printed["tile_geometry"]
    node_kept = int((node.min(0) != node.max(0)).sum())
    assert geometry["widths"] == [node_kept, int((config.min(0) != config.max(0)).sum())]
    raw = [(node, c) for c in models.SHAPE_COLUMNS + models.LAYOUT_COLUMNS]
    raw += [(config, c) for c in models.OUTPUT_BOUND_COLUMNS]
    for (feats, c), (index, lo, hi) in zip(raw, geometry["columns"]):
        column = feats[:, c]
        kept = np.flatnonzero(feats.min(0) != feats.max(0))
        assert index == (int(np.searchsorted(kept, c)) if c in kept else -1)
        assert (lo, hi) == (float(column.min()), float(column.max()))
    assert any(index >= 0 for index, _, _ in geometry["columns"])
    # The map is keywords as they are: ResidualSAGE builds with it.
    models.ResidualSAGE(4, 8, **json.loads(TINY_RESIDUAL), **printed)


@pytest.mark.slow
@pytest.mark.parametrize("in_ensemble", [False, True])
def test_our_trainer_builds_with_the_datas_map(in_ensemble, synth_root, tmp_path, capsys):
    """`tile_geometry: true` is built with the map `tpu-tiles columns` prints (same --configs),
    which the run records; its stored `model_kwargs_json` keeps `true` (the course rebuilds,
    then copies the map in)."""
    from tpu_tiles_models import train

    kwargs = {**json.loads(TINY_RESIDUAL), "tile_geometry": True}
    model = "ResidualSAGE"
    if in_ensemble:
        model, kwargs = "Ensemble", {"members": [{"model": model, "kwargs": kwargs}]}
    args = tiny_args(synth_root, tmp_path, model=model, model_kwargs_json=json.dumps(kwargs))
    result = train.train(args)
    column_map = _run_columns(synth_root, capsys, "--configs=4")["tile_geometry"]
    trained = result.model.members[0] if in_ensemble else result.model
    got = trained.geometry.columns.numpy()
    np.testing.assert_array_equal(got, np.float32(column_map["columns"]))
    assert np.any(got[:, 0] >= 0)  # shape dims vary on the synthetic kernels: kept columns
    from tpu_tiles_models.runs import TrainedRun

    run = TrainedRun.open(result.model_dir)
    recorded = run.extras["model_kwargs"]
    recorded = recorded["members"][0]["kwargs"] if in_ensemble else recorded
    assert recorded["tile_geometry"] == column_map
    assert json.loads(run.args["model_kwargs_json"]) == kwargs


def test_our_trainer_refuses_a_map_of_other_data(synth_root, tmp_path, capsys):
    from tpu_tiles_models import train
    from tpu_tiles_models.errors import FlagError

    column_map = _run_columns(synth_root, capsys, "--configs=4")["tile_geometry"]
    column_map["columns"][0][2] += 1.0  # another data set's largest shape
    kwargs = {**json.loads(TINY_RESIDUAL), "tile_geometry": column_map}
    args = tiny_args(
        synth_root, tmp_path, model="ResidualSAGE", model_kwargs_json=json.dumps(kwargs)
    )
    with pytest.raises(FlagError, match="tile_geometry is not this data's column map"):
        train.train(args)
    assert not list(tmp_path.glob("*/run_*")) and not list(tmp_path.glob("run_*"))


GOOD_MAP = {"widths": [12, 6], "columns": IDENTITY}


@pytest.mark.parametrize(
    "bad",
    [
        "yes",
        1,
        {"widths": [12, 6]},
        {**GOOD_MAP, "widths": [12]},
        {**GOOD_MAP, "columns": IDENTITY[:17]},
        {**GOOD_MAP, "columns": [[12, 0, 1], *IDENTITY[1:]]},  # past the node width
        {**GOOD_MAP, "columns": [[0, 0, float("nan")], *IDENTITY[1:]]},
        {**GOOD_MAP, "extra": 1},
    ],
)
def test_tile_geometry_is_a_switch_or_a_column_map(bad):
    models.ResidualSAGE(4, 8, tile_geometry=GOOD_MAP)
    with pytest.raises(ValueError, match="tile_geometry must be true, false or"):
        models.ResidualSAGE(4, 8, tile_geometry=bad)


def test_a_map_for_other_widths_fails_at_the_first_call_naming_them(synth_root):
    dataset = data.load_dataset(str(synth_root), progress=False)
    graph, n = data.kernel_graph(dataset.valid, 0, dataset.stats), dataset.valid.num_configs(0)
    node, config = dataset.stats.node_width, dataset.stats.config_width
    wrong = {"widths": [node + 1, config], "columns": [[-1, 0.0, 0.0]] * 18}
    model = models.ResidualSAGE(
        4, dataset.num_ops, **json.loads(TINY_RESIDUAL), tile_geometry=wrong
    )
    message = (
        f"TileGeometry: the column map is for {node + 1} node and {config} config feature "
        f"columns, the data has {node} and {config}; print this data's map with"
    )
    with pytest.raises(ValueError, match=message):
        model.forward(graph, n)


@pytest.mark.slow
def test_the_map_stays_through_upstreams_fit_and_the_courses_copy(synth_root):
    """Keras `fit` with Adam and clipping (upstream's trainer) and its best-weights snapshot
    leave the map as given; the course's build from `true` (zeros) and in-order copy restores
    it, and the model ranks as the trained one; without the map it would not."""
    dataset = data.load_dataset(str(synth_root), progress=False)
    column_map = registry.column_map(dataset.stats, dataset.train)
    kwargs = {**json.loads(TINY_RESIDUAL), "tile_geometry": column_map}
    trained = models.ResidualSAGE(4, dataset.num_ops, **kwargs)
    batches = data.training_batches(
        dataset.train, dataset.stats, num_configs=4, batch_size=4, seed=0
    )
    trained(next(iter(batches))[0])
    trained.compile(loss="mse", optimizer=tf.keras.optimizers.Adam(0.1, clipnorm=0.5))
    trained.fit(batches.take(2), epochs=1, verbose=0)
    best = {v.ref(): v + 0 for v in trained.trainable_variables}
    for v in trained.trainable_variables:
        v.assign(best[v.ref()])
    np.testing.assert_array_equal(trained.geometry.columns.numpy(), column_map["columns"])
    graph, n = data.kernel_graph(dataset.valid, 0, dataset.stats), dataset.valid.num_configs(0)
    kwargs["tile_geometry"] = True  # a run that stored only `true`: the map in its variables
    fresh, unset = (models.ResidualSAGE(4, dataset.num_ops, **kwargs) for _ in range(2))
    for model in (fresh, unset):
        model.forward(graph, n)
    for target, source in zip(fresh.trainable_variables, trained.trainable_variables):
        target.assign(source)
    np.testing.assert_array_equal(fresh.forward(graph, n), trained.forward(graph, n))
    for target, source in zip(unset.trainable_variables, trained.trainable_variables):
        if target is not unset.geometry.columns:
            target.assign(source)
    assert not np.array_equal(unset.forward(graph, n), trained.forward(graph, n))
