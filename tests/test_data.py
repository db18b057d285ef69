"""Tests for tpu_tiles_models.data: npz files -> validated arrays -> GraphTensors."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_gnn as tfgnn

from tpu_tiles_models import data, kernel_files

# ---------------------------------------------------------------------------------------------
# A tiny npz writer, independent of synthetic.py, for hand-made and broken kernels.
# ---------------------------------------------------------------------------------------------


def kernel_arrays(rng: np.random.Generator, *, nodes=5, edges=6, configs=7, test=False) -> dict:
    """One valid kernel in the real files' dtypes (uint8 opcodes, int64 edges/runtimes)."""
    node_feat = rng.normal(size=(nodes, data.NODE_FEAT_DIM)).astype(np.float32)
    node_feat[:, 3] = 1.5  # a column constant everywhere, which must be dropped
    config_feat = rng.integers(1, 64, size=(configs, data.CONFIG_FEAT_DIM)).astype(np.float32)
    config_feat[:, 0] = 2.0
    runtime = rng.integers(1_000, 50_000, size=configs).astype(np.int64)
    normalizer = np.full(configs, runtime[0], np.int64)
    if test:
        runtime[:] = 0
        normalizer[:] = 0
    return {
        "node_feat": node_feat,
        "node_opcode": rng.integers(1, 100, size=nodes).astype(np.uint8),
        "edge_index": rng.integers(0, nodes, size=(edges, 2)).astype(np.int64),
        "config_feat": config_feat,
        "config_runtime": runtime,
        "config_runtime_normalizers": normalizer,
    }


def write_npz(path: Path, arrays: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:  # np.savez on a name would append ".npz" only sometimes
        np.savez(f, **arrays)
    return path


@pytest.fixture()
def random_root(tmp_path: Path) -> Path:
    """train: 4 kernels (one with 3 configs), valid: 2, test: 2 with zero runtimes."""
    rng = np.random.default_rng(1)
    root = tmp_path / "tiles"
    for i in range(4):
        configs = 3 if i == 2 else 7
        write_npz(root / "train" / f"bench{i}_abc{i}.npz", kernel_arrays(rng, configs=configs))
    for i in range(2):
        write_npz(root / "valid" / f"val{i}_x.npz", kernel_arrays(rng, nodes=4 + i))
        write_npz(root / "test" / f"{i:032x}.npz", kernel_arrays(rng, test=True))
    return root


def scale_like_upstream(x: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Upstream's TF normalisation, recomputed independently with tf ops."""
    lo = tf.reduce_min(train, axis=0, keepdims=True)
    hi = tf.reduce_max(train, axis=0, keepdims=True)
    keep = lo[0] != hi[0]
    x = tf.boolean_mask(x, keep, axis=1)
    lo, hi = tf.boolean_mask(lo, keep, axis=1), tf.boolean_mask(hi, keep, axis=1)
    return ((x - lo) / (hi - lo)).numpy()


# ---------------------------------------------------------------------------------------------
# Round trip and schema
# ---------------------------------------------------------------------------------------------


def test_round_trip_preserves_every_value(random_root: Path):
    ds = data.load_dataset(random_root, progress=False)
    train, stats = ds.train, ds.stats
    raw = {
        kernel_files.tile_id_of(f): dict(np.load(f))
        for f in sorted((random_root / "train").glob("*.npz"))
    }
    assert sorted(train.tile_ids) == sorted(raw)
    assert stats.node_width == data.NODE_FEAT_DIM - 1  # column 3 is constant
    assert stats.config_width == data.CONFIG_FEAT_DIM - 1
    assert stats.num_ops == 1 + max(
        int(np.load(f)["node_opcode"].max()) for f in random_root.glob("*/*.npz")
    )

    for i, tile_id in enumerate(train.tile_ids):
        arrays = raw[tile_id]
        graph = data.kernel_graph(train, i, stats)
        op, config = graph.node_sets["op"], graph.node_sets["config"]
        # Features: bit-identical to upstream's float32 TF math on the concatenated train set.
        np.testing.assert_array_equal(
            op["feats"].numpy(), scale_like_upstream(arrays["node_feat"], train.node_feat)
        )
        np.testing.assert_array_equal(
            config["feats"].numpy(), scale_like_upstream(arrays["config_feat"], train.config_feat)
        )
        np.testing.assert_array_equal(op["op"].numpy(), arrays["node_opcode"])
        feed = graph.edge_sets["feed"].adjacency
        np.testing.assert_array_equal(feed.source.numpy(), arrays["edge_index"][:, 0])
        np.testing.assert_array_equal(feed.target.numpy(), arrays["edge_index"][:, 1])
        ratio = arrays["config_runtime"] / arrays["config_runtime_normalizers"]
        np.testing.assert_array_equal(config["runtimes"].numpy(), ratio.astype(np.float32))
        np.testing.assert_array_equal(
            config["normalizers"].numpy(), arrays["config_runtime_normalizers"]
        )
        assert graph.node_sets["g"]["tile_id"].numpy().tolist() == [tile_id.encode()]


def test_schema_matches_upstream_contract(random_root: Path):
    ds = data.load_dataset(random_root, progress=False)
    graph = next(iter(data.graph_dataset(ds.valid, ds.stats)))
    spec = graph.spec
    assert set(spec.node_sets_spec) == {"op", "config", "g"}
    assert set(spec.edge_sets_spec) == {"feed", "g_op", "g_config"}
    features = {name: dict(ns.features_spec) for name, ns in spec.node_sets_spec.items()}
    assert {n: set(f) for n, f in features.items()} == {
        "op": {"op", "feats"},
        "config": {"feats", "runtimes", "normalizers"},
        "g": {"tile_id"},
    }
    assert features["op"]["op"].dtype == tf.int32
    assert features["op"]["feats"].shape[-1] == ds.stats.node_width
    assert features["config"]["feats"].shape[-1] == ds.stats.config_width
    assert features["config"]["runtimes"].dtype == tf.float32
    assert features["g"]["tile_id"].dtype == tf.string

    n = ds.valid.node_offsets[1]
    c = ds.valid.num_configs(0)
    assert graph.node_sets["op"].sizes.numpy().tolist() == [n]
    assert graph.node_sets["config"].sizes.numpy().tolist() == [c]
    assert graph.node_sets["g"].sizes.numpy().tolist() == [1]
    adjacency = {name: graph.edge_sets[name].adjacency for name in ("feed", "g_op", "g_config")}
    assert (adjacency["feed"].source_name, adjacency["feed"].target_name) == ("op", "op")
    assert (adjacency["g_op"].source_name, adjacency["g_op"].target_name) == ("g", "op")
    assert adjacency["g_op"].target.numpy().tolist() == list(range(n))
    assert (adjacency["g_config"].source_name, adjacency["g_config"].target_name) == (
        "g",
        "config",
    )
    assert adjacency["g_config"].source.numpy().tolist() == [0] * c
    assert adjacency["g_config"].target.numpy().tolist() == list(range(c))


def test_synthetic_tree_loads_in_upstream_order(synth_root: Path):
    ds = data.load_dataset(synth_root, progress=False)
    assert (len(ds.train), len(ds.valid), len(ds.test)) == (24, 8, 6)
    expected = tf.io.gfile.glob(os.path.join(str(synth_root), "train", "*.npz"))
    assert ds.train.files == expected
    assert kernel_files.split_files(synth_root, "train", toy_data=True) == expected[:100]
    graphs = list(data.graph_dataset(ds.test, ds.stats))
    assert [g.node_sets["g"]["tile_id"][0].numpy().decode() for g in graphs] == ds.test.tile_ids
    for i, g in enumerate(graphs):
        assert int(g.node_sets["config"].sizes[0]) == ds.test.num_configs(i)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


def _broken(kind: str, rng: np.random.Generator) -> dict:
    arrays = kernel_arrays(rng)
    if kind == "missing key":
        del arrays["config_runtime"]
    elif kind == "wrong shape":
        arrays["node_feat"] = arrays["node_feat"][:, :139]
    elif kind == "lengths disagree":
        arrays["node_opcode"] = arrays["node_opcode"][:-1]
    elif kind == "edge out of range":
        arrays["edge_index"][2, 1] = 5
    elif kind == "no configs":
        for key in ("config_feat", "config_runtime", "config_runtime_normalizers"):
            arrays[key] = arrays[key][:0]
    elif kind == "zero runtime":
        arrays["config_runtime"][1] = 0
    elif kind == "float opcodes":
        arrays["node_opcode"] = arrays["node_opcode"].astype(np.float32)
    return arrays


@pytest.mark.parametrize(
    "kind, words",
    [
        ("missing key", "missing key(s) config_runtime"),
        ("wrong shape", "node_feat has shape (5, 139), expected (?, 140)"),
        ("lengths disagree", "node_opcode has shape (4,), expected (5,)"),
        ("edge out of range", "edge_index refers to node 5"),
        ("no configs", "has no configs"),
        ("zero runtime", "config_runtime has zeros"),
        ("float opcodes", "node_opcode has dtype float32, expected integer"),
    ],
)
def test_bad_file_names_file_and_problem(random_root: Path, kind: str, words: str):
    bad = write_npz(random_root / "train" / "zz_bad.npz", _broken(kind, np.random.default_rng(2)))
    with pytest.raises(data.DataError) as err:
        data.load_split(random_root, "train", skip_hint="train with --skip_bad", progress=False)
    message = str(err.value)
    assert "\n" not in message
    assert str(bad) in message and words in message
    assert message.endswith("re-download the file or delete it (or train with --skip_bad)")


def test_bad_test_file_offers_no_skipping(random_root: Path):
    """Every test kernel needs a prediction row, so --skip_bad is not offered there."""
    write_npz(random_root / "test" / "zz.npz", _broken("missing key", np.random.default_rng(2)))
    with pytest.raises(data.DataError) as err:
        data.load_split(random_root, "test", progress=False)
    assert "skip_bad" not in str(err.value) and "zz.npz" in str(err.value)


def test_single_config_train_kernel_is_left_out_with_a_warning(random_root: Path):
    write_npz(
        random_root / "train" / "one_cfg.npz", kernel_arrays(np.random.default_rng(3), configs=1)
    )
    write_npz(
        random_root / "valid" / "one_cfg.npz", kernel_arrays(np.random.default_rng(4), configs=1)
    )
    with pytest.warns(
        UserWarning, match=r"train: left out 1 kernel\(s\) with a single config \(one_cfg\)"
    ):
        ds = data.load_dataset(random_root, progress=False)
    assert "one_cfg" not in ds.train.tile_ids and len(ds.train) == 4
    assert (
        "one_cfg" in ds.valid.tile_ids
    )  # valid and test keep theirs: they are ranked, not trained


def test_corrupt_zip_and_missing_split_dir(random_root: Path):
    bad = random_root / "valid" / "truncated.npz"
    good = next((random_root / "valid").glob("val0*.npz")).read_bytes()
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(data.DataError, match="truncated.npz: not a readable npz file"):
        data.load_split(random_root, "valid", progress=False)

    bad.unlink()
    shutil.rmtree(random_root / "test")
    with pytest.raises(data.DataError, match=r"test: split directory not found"):
        data.load_dataset(random_root, progress=False, skip_bad=True)
    (random_root / "test").mkdir()
    with pytest.raises(kernel_files.DataError, match=r"test: no \*\.npz files"):
        kernel_files.split_files(random_root, "test")


def test_skip_bad_warns_with_count_and_names(random_root: Path):
    write_npz(
        random_root / "train" / "zz_bad1.npz", _broken("missing key", np.random.default_rng())
    )
    (random_root / "train" / "zz_bad2.npz").write_bytes(b"not a zip")
    with pytest.warns(UserWarning, match=r"skipped 2 bad file\(s\) in train: .*zz_bad"):
        split = data.load_split(random_root, "train", skip_bad=True, progress=False)
    assert len(split) == 4 and not any("zz_bad" in t for t in split.tile_ids)


def test_test_split_zero_runtimes_give_finite_zeros(random_root: Path):
    ds = data.load_dataset(random_root, progress=False)
    for graph in data.graph_dataset(ds.test, ds.stats):
        config = graph.node_sets["config"]
        for name in ("runtimes", "normalizers"):
            values = config[name].numpy()
            assert np.isfinite(values).all() and (values == 0).all()


# ---------------------------------------------------------------------------------------------
# Cache
# ---------------------------------------------------------------------------------------------


def test_cache_reused_and_invalidated_on_change(random_root: Path, tmp_path: Path, monkeypatch):
    cache = tmp_path / "cache"
    first = data.load_split(random_root, "train", cache_dir=cache, progress=False)
    assert len(list(cache.glob("*.cache"))) == 1 and not list(cache.glob(".tmp-*"))

    # Unchanged files: served from the cache without reading any npz.
    def no_reads(path):
        raise AssertionError(f"read {path} although the cache is valid")

    with monkeypatch.context() as m:
        m.setattr(kernel_files, "read_members", no_reads)
        again = data.load_split(random_root, "train", cache_dir=cache, progress=False)
    np.testing.assert_array_equal(again.config_feat, first.config_feat)
    assert again.files == first.files

    # A rewritten file (same shapes, so the same size) must be re-read.
    i = 1
    path = Path(first.files[i])
    arrays = dict(np.load(path))
    arrays["config_feat"] = arrays["config_feat"] + 100
    write_npz(path, arrays)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # coarse-clock filesystems
    fresh = data.load_split(random_root, "train", cache_dir=cache, progress=False)
    c0, c1 = fresh.config_offsets[i], fresh.config_offsets[i + 1]
    np.testing.assert_array_equal(fresh.config_feat[c0:c1], arrays["config_feat"])

    # Options are part of the key too.
    filtered = data.load_split(random_root, "train", cache_dir=cache, min_configs=5, progress=False)
    assert len(filtered) == 3


def test_cache_format_round_trip_and_damage(tmp_path: Path, monkeypatch):
    """Arrays come back bit for bit, in frames or not; a damaged file is an error to rebuild."""
    from tpu_tiles_models import cache

    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.random((1000, 24), dtype=np.float32) * 1e6,
        "f64": np.round(rng.random(1000) * 1e9),
        "i32": rng.integers(-5, 5, size=(700, 2)).astype(np.int32),
        "u8": rng.integers(0, 255, size=9).astype(np.uint8),
        "empty": np.zeros((0, 140), np.float32),
    }
    meta = {"files": ["a.npz", "b.npz"], "skipped": []}
    for frame_bytes in (cache.FRAME_BYTES, 1000):  # one frame per array, and many
        monkeypatch.setattr(cache, "FRAME_BYTES", frame_bytes)
        path = tmp_path / f"c{frame_bytes}"
        with open(path, "wb") as out:
            cache.write(out, arrays, meta)
        with open(path, "rb") as f:
            back, back_meta = cache.read(f)
        assert back_meta == meta and list(back) == list(arrays)
        for name, array in arrays.items():
            assert back[name].dtype == array.dtype
            np.testing.assert_array_equal(back[name], array)
    raw = path.read_bytes()
    for damaged in (raw[: len(raw) // 2], raw[:100] + bytes(50) + raw[150:], b"not a cache"):
        path.write_bytes(damaged)
        with open(path, "rb") as f, pytest.raises(cache.CacheFormatError):
            cache.read(f)


def test_damaged_cache_is_rebuilt(random_root: Path, tmp_path: Path):
    cache_dir = tmp_path / "cache"
    first = data.load_split(random_root, "valid", cache_dir=cache_dir, progress=False)
    (path,) = cache_dir.glob("*.cache")
    path.write_bytes(path.read_bytes()[:-200])
    again = data.load_split(random_root, "valid", cache_dir=cache_dir, progress=False)
    np.testing.assert_array_equal(again.config_feat, first.config_feat)
    with open(path, "rb") as f:  # rewritten whole
        assert data.cache.read(f)[1]["files"] == first.files


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------


def test_toy_stats_stored_and_reloaded_reproduce_features(synth_root: Path):
    full_train = data.load_split(synth_root, "train", progress=False)
    toy = data.Split(**vars(full_train))  # a 5-kernel "toy" subset
    k = 5
    for name in ("tile_ids", "files"):
        setattr(toy, name, getattr(full_train, name)[:k])
    n, e, c = full_train.node_offsets[k], full_train.edge_offsets[k], full_train.config_offsets[k]
    toy.node_feat, toy.node_opcode = full_train.node_feat[:n], full_train.node_opcode[:n]
    toy.edge_index = full_train.edge_index[:e]
    toy.config_feat = full_train.config_feat[:c]
    toy.config_runtime = full_train.config_runtime[:c]
    toy.config_runtime_normalizers = full_train.config_runtime_normalizers[:c]
    for name in ("node_offsets", "edge_offsets", "config_offsets"):
        setattr(toy, name, getattr(full_train, name)[: k + 1])

    stats = data.FeatureStats.fit(toy, source="toy")
    assert stats.train_files == [os.path.basename(f) for f in full_train.files[:k]]
    trained = [data.kernel_graph(toy, i, stats) for i in range(k)]

    # As a run file stores them: plain JSON.
    reloaded = data.FeatureStats.from_json(json.loads(json.dumps(stats.to_json())))
    assert reloaded.to_json() == stats.to_json()

    full = data.load_dataset(synth_root, splits=("train", "test"), stats=reloaded, progress=False)
    assert full.valid is None and full.stats is reloaded
    for i in range(k):
        graph = data.kernel_graph(full.train, i, reloaded)
        for set_name in ("op", "config"):
            np.testing.assert_array_equal(
                graph.node_sets[set_name]["feats"].numpy(),
                trained[i].node_sets[set_name]["feats"].numpy(),
            )
    # The full set's features use the toy width even where full-data stats would differ.
    graph = data.kernel_graph(full.test, 0, reloaded)
    assert graph.node_sets["op"]["feats"].shape[1] == stats.node_width


def test_malformed_stats_and_a_root_without_train_are_refused(tmp_path: Path):
    with pytest.raises(data.DataError, match="feature statistics are malformed"):
        data.FeatureStats.from_json({"node_keep": [True]})
    with pytest.raises(data.DataError, match="load the train split"):
        data.load_dataset(tmp_path, splits=("test",))


def test_unknown_opcodes_map_to_zero_with_warning(random_root: Path):
    ds = data.load_dataset(random_root, progress=False)
    stats = data.FeatureStats.from_json({**ds.stats.to_json(), "num_ops": 10})
    with pytest.warns(UserWarning, match="opcodes >= num_ops=10"):
        data.load_dataset(random_root, splits=("valid",), stats=stats, progress=False)
    graph = data.kernel_graph(ds.valid, 0, stats)
    raw = ds.valid.node_opcode[: ds.valid.node_offsets[1]]
    np.testing.assert_array_equal(graph.node_sets["op"]["op"].numpy(), np.where(raw < 10, raw, 0))


# ---------------------------------------------------------------------------------------------
# Sampling and batching
# ---------------------------------------------------------------------------------------------


def test_sampling_gives_distinct_configs_matching_their_runtimes(random_root: Path):
    ds = data.load_dataset(random_root, progress=False)
    train, stats = ds.train, ds.stats
    scaled = stats.config(train.config_feat)
    ratios = train.config_runtime / train.config_runtime_normalizers
    k = 4
    seen = set()
    for graph in data.graph_dataset(train, stats, num_configs=k, min_configs=k, shuffle=True):
        tile_id = graph.node_sets["g"]["tile_id"][0].numpy().decode()
        i = train.tile_ids.index(tile_id)
        seen.add(i)
        c0, c1 = train.config_offsets[i], train.config_offsets[i + 1]
        config = graph.node_sets["config"]
        feats = config["feats"].numpy()
        assert feats.shape[0] == k
        # Locate each sampled row among the kernel's configs: distinct, and runtimes agree.
        rows = [int(np.flatnonzero((scaled[c0:c1] == row).all(axis=1))[0]) for row in feats]
        assert len(set(rows)) == k
        np.testing.assert_array_equal(
            config["runtimes"].numpy(), ratios[c0:c1][rows].astype(np.float32)
        )
    # bench2 has only 3 configs: left out; every other kernel is sampled.
    assert sorted(train.tile_ids[i] for i in seen) == ["bench0_abc0", "bench1_abc1", "bench3_abc3"]


def test_epochs_resample_reproducibly(random_root: Path):
    ds = data.load_dataset(random_root, progress=False)

    def passes(seed):
        gds = data.graph_dataset(ds.train, ds.stats, num_configs=2, shuffle=True, seed=seed)
        return [[g.node_sets["config"]["runtimes"].numpy().tolist() for g in gds] for _ in range(3)]

    a, b = passes(0), passes(0)
    assert a == b and a[0] != a[1]


def test_training_batches_shapes_and_labels(synth_root: Path):
    ds = data.load_dataset(synth_root, progress=False)
    k, b = 5, 4
    usable = int((ds.train.config_counts() >= k).sum())
    batches = list(data.training_batches(ds.train, ds.stats, num_configs=k, batch_size=b))
    assert len(batches) == usable // b
    for graph, labels in batches:
        assert labels.shape == (b, k) and labels.dtype == tf.float32
        assert graph.node_sets["config"].sizes.numpy().tolist() == [k] * b
        assert graph.node_sets["g"].sizes.numpy().tolist() == [1] * b
        assert graph.node_sets["op"]["feats"].shape[1] == ds.stats.node_width
        np.testing.assert_array_equal(
            labels.numpy().ravel(), graph.node_sets["config"]["runtimes"].numpy()
        )
        assert (labels.numpy() > 0).all()
    with pytest.raises(data.DataError, match="fewer than --batch=4; lower --configs or --batch$"):
        data.training_batches(ds.train, ds.stats, num_configs=10**6, batch_size=b)


def test_default_first_draws_config_0_first_then_distinct_others(synth_root: Path):
    """For a model that reads position 0 as the default: config 0 first in every draw."""
    ds = data.load_dataset(synth_root, progress=False)
    train, k, b = ds.train, 5, 4
    ratios = (train.config_runtime / train.config_runtime_normalizers).astype(np.float32)
    firsts = ratios[train.config_offsets[:-1]]
    plain = data.training_batches(train, ds.stats, num_configs=k, batch_size=b, seed=3)
    first = data.training_batches(
        train, ds.stats, num_configs=k, batch_size=b, seed=3, default_first=True
    )
    batches = 0
    for (graph, labels), (plain_graph, _) in zip(first, plain):
        ids = [t.decode() for t in graph.node_sets["g"]["tile_id"].numpy()]
        # The kernels come in the same order as without it: only the configs drawn differ.
        assert ids == [t.decode() for t in plain_graph.node_sets["g"]["tile_id"].numpy()]
        for tile_id, row in zip(ids, labels.numpy()):
            i = train.tile_ids.index(tile_id)
            assert row[0] == firsts[i]
            # The others are drawn without replacement from the rest: no value more often
            # than the kernel's other configs have it.
            rest = ratios[train.config_offsets[i] + 1 : train.config_offsets[i + 1]]
            for value in row[1:]:
                assert (row[1:] == value).sum() <= (rest == value).sum()
        batches += 1
    assert batches == int((train.config_counts() >= k).sum()) // b
    rng = np.random.default_rng(0)
    picks = data._pick_configs(10, 16, 6, rng, default_first=True)
    assert picks[0] == 10 and sorted(picks) == list(range(10, 16))
    assert data._pick_configs(10, 11, 6, rng, default_first=True).tolist() == [10]


def test_no_warnings_on_clean_load(random_root: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data.load_dataset(random_root, progress=False)


def test_merged_batches_equal_upstream_batch_and_merge(random_root: Path):
    """Our numpy-merged batches equal `.batch(B).map(merge_batch_to_components)`."""
    ds = data.load_dataset(random_root, progress=False)
    ours = data.graph_dataset(ds.train, ds.stats, batch_size=4)
    theirs = (
        data.graph_dataset(ds.train, ds.stats)
        .batch(4, drop_remainder=True)
        .map(tfgnn.GraphTensor.merge_batch_to_components)
    )
    a, b = next(iter(ours)), next(iter(theirs))
    assert a.spec == b.spec
    for name in ("op", "config", "g"):
        np.testing.assert_array_equal(a.node_sets[name].sizes, b.node_sets[name].sizes)
        for feature, value in b.node_sets[name].features.items():
            np.testing.assert_array_equal(a.node_sets[name][feature], value)
    for name in ("feed", "g_op", "g_config"):
        np.testing.assert_array_equal(a.edge_sets[name].sizes, b.edge_sets[name].sizes)
        np.testing.assert_array_equal(
            a.edge_sets[name].adjacency.source, b.edge_sets[name].adjacency.source
        )
        np.testing.assert_array_equal(
            a.edge_sets[name].adjacency.target, b.edge_sets[name].adjacency.target
        )


def test_spread_configs_are_a_fixed_even_subset(random_root: Path):
    ds = data.load_dataset(random_root, progress=False)
    rows = data._pick_configs(10, 110, -1, None, spread=5)
    assert rows.tolist() == [10, 35, 60, 84, 109]  # first and last, evenly spaced
    assert data._pick_configs(10, 13, -1, None, spread=5).tolist() == [10, 11, 12]
    i = int(np.argmax(ds.valid.config_counts()))
    c0, c1 = ds.valid.config_offsets[i], ds.valid.config_offsets[i + 1]
    want = data._pick_configs(int(c0), int(c1), -1, None, spread=3)
    for _ in range(2):  # the same configs every pass
        graph = next(iter(data.graph_dataset(ds.valid, ds.stats, kernels=[i], spread=3)))
        np.testing.assert_array_equal(
            graph.node_sets["config"]["feats"].numpy(), ds.stats.config(ds.valid.config_feat[want])
        )
