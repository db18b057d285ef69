"""One ranking from training to the grader: the rule a run ranks by lives in its model.

When a run's validation chooses a margin for config 0 (the compiler's default) or to keep it
in the top 5, our trainer sets the model's weights for them (models.py's `_RankingRule`), so
the course's prediction script, which only calls `forward`, ranks the test split as the run
did: single runs and ensembles. Runs written before the rule existed still reload, and
training never moves it.
"""

from __future__ import annotations

import dataclasses
import gzip
import json

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_MLP, tiny_args, write_hand_made_run
from course_reload import main as course_top5

from tpu_tiles_models import (
    data,
    ensemble,
    export,
    formats,
    kaggle,
    margin,
    predict,
    registry,
    run_file,
    scoring,
    train,
)
from tpu_tiles_models.runs import TrainedRun
from tpu_tiles_models.train_args import TrainArgs


def _always_keep(original):
    """`KeepDefault.measure` with `chosen` forced on, and a margin that moves config 0 first
    on about half the kernels: validation 'chose' both parts of the rule."""

    def measure(kernels, *, fit_margin=False):
        gaps = [s[0] - s[1:].min() for _, s in kernels if len(s) > 1]
        forced = float(np.median(gaps)) if fit_margin else 0.0
        return dataclasses.replace(
            original(kernels, fit_margin=fit_margin), chosen=True, margin=forced
        )

    return measure


@pytest.fixture(scope="module")
def kept_runs(synth_root, tmp_path_factory):
    """Two tiny MLP runs (seeds 0, 1) and their ensemble, each with config 0 kept."""
    patch = pytest.MonkeyPatch()
    patch.setattr(margin.KeepDefault, "measure", _always_keep(margin.KeepDefault.measure))
    try:
        out = tmp_path_factory.mktemp("kept")
        runs = [
            train.train(tiny_args(synth_root, out, model="MLP", model_kwargs_json=TINY_MLP, seed=s))
            for s in (0, 1)
        ]
        pair = ensemble.build_ensemble(
            [r.model_dir for r in runs], out / "ensemble", data_root=synth_root, progress=False
        )
    finally:
        patch.undo()
    return [*runs, pair]


def _stored(result: export.TrainResult) -> dict:
    return json.loads(gzip.decompress(result.run_file.read_bytes()))


@pytest.mark.parametrize("which", [0, 2], ids=["run", "ensemble"])
def test_the_course_procedure_ranks_as_the_run_did(which, kept_runs, synth_root):
    result = kept_runs[which]
    info = _stored(result)
    assert info[run_file.EXTRAS_KEY][run_file.KEEP_DEFAULT_KEY]["chosen"] is True
    course = course_top5(str(result.model_dir), str(synth_root))["top5"]
    stored = {tile: top[:5] for tile, top in info["test_predictions"].items()}
    csv = kaggle.read_predictions_csv(result.results_csv)
    assert course == stored
    assert {f"tile:xla:{tile}": top for tile, top in course.items()} == {
        tile: top[:5] for tile, top in csv.items()
    }
    assert all(0 in top for top in course.values())
    # The rule mattered: the model's own scores rank config 0 below the 5th on some kernels.
    run = TrainedRun.open(result.model_dir)
    model, ds = run.load(synth_root, progress=False)
    assert margin.rule_of(model) is True and run.keeps_default_in(model) is True
    record = info[run_file.EXTRAS_KEY][run_file.KEEP_DEFAULT_KEY]
    assert record["margin"] != 0 and margin.margin_of(model) == pytest.approx(record["margin"])
    scored = scoring.score_split(model, ds.test, ds.stats, progress=False)
    plain = {s.tile_id: scoring.upstream_top(s.scores, 5) for s in scored}
    assert any(0 not in top for top in plain.values())
    assert plain != course
    # The margin mattered too: without it, config 0 comes first on other kernels.
    margin.set_rule(model, margin=0.0)
    raw = scoring.score_split(model, ds.test, ds.stats, progress=False)
    first = {s.tile_id: scoring.upstream_top(s.scores, 5, keep_default=True)[0] for s in raw}
    assert first != {tile: top[0] for tile, top in course.items()}


def test_the_gate_follows_the_rule_of_the_metric():
    """`forward` with the gate on ranks exactly as `margin.keep_default` on `config_scores`,
    ties included (stable, in index order)."""
    rng = np.random.default_rng(0)
    module = registry.load_models_module()
    assert module.KEEP_DEFAULT_TOP == margin.KEEP_TOP
    for n in (1, 3, 5, 6, 40):
        scores = rng.integers(0, 4, size=(3, n)).astype(np.float32)  # many ties
        places = module.keep_default_places(tf.constant(scores)).numpy()
        for row, got in zip(scores, places):
            np.testing.assert_array_equal(got, margin.keep_default(row))


def test_predict_follows_the_model_unless_told(kept_runs, synth_root, tmp_path):
    result = kept_runs[2]
    stored = {f"tile:xla:{t}": top[:5] for t, top in _stored(result)["test_predictions"].items()}
    rows = {}
    for mode in ("auto", "yes", "no"):
        out = tmp_path / f"{mode}.csv"
        predict.predict_to_csv(result.model_dir, synth_root, out, keep_default=mode, progress=False)
        rows[mode] = kaggle.read_predictions_csv(out)
    assert rows["auto"] == rows["yes"] == stored
    assert rows["no"] != stored and any(0 not in top for top in rows["no"].values())


def test_an_ensemble_applies_its_own_rule_not_its_members(kept_runs, synth_root):
    """Members kept config 0 too; the ensemble combines their own scores, then its rule."""
    run = TrainedRun.open(kept_runs[2].model_dir)
    model, ds = run.load(synth_root, progress=False)
    assert [margin.rule_of(m) for m in model.members] == [True, True]
    graph = data.kernel_graph(ds.test, 0, ds.stats)
    n = ds.test.num_configs(0)
    assert all(margin.margin_of(m) != 0 for m in model.members)
    module = run.module
    members = [module.normalise_scores(m.raw_scores(graph, n), "zscore") for m in model.members]
    combined = (tf.add_n(members) / float(len(members))).numpy()[0]
    np.testing.assert_array_equal(model.raw_scores(graph, n).numpy()[0], combined)
    shifted = combined.copy()
    shifted[0] -= np.float32(margin.margin_of(model))
    np.testing.assert_allclose(model.config_scores(graph, n).numpy()[0], shifted, atol=1e-6)
    np.testing.assert_array_equal(
        model.forward(graph, n).numpy()[0],
        margin.keep_default(model.config_scores(graph, n).numpy()[0]),
    )
    margin.set_rule(model, keep=False)
    np.testing.assert_array_equal(
        model.forward(graph, n).numpy()[0], model.config_scores(graph, n).numpy()[0]
    )


def test_training_leaves_the_rule_as_it_is(synth_root):
    """Our trainer's step and Keras `fit` (upstream's trainer), Adam with clipping, and
    upstream's best-weights snapshot: the rule's two weights keep their values, the others
    move."""
    ds = data.load_dataset(synth_root, splits=("train",), progress=False)
    batches = data.training_batches(ds.train, ds.stats, num_configs=4, batch_size=4, seed=0)
    graph, labels = next(iter(batches))
    for how in ("ours", "fit"):
        model = registry.build_model("MLP", 4, ds.num_ops, TINY_MLP)
        model(graph)
        margin.set_rule(model, margin=0.25, keep=True)
        before = [v.numpy() for v in model.trainable_variables]
        if how == "ours":
            args = TrainArgs(model="MLP", model_kwargs_json=TINY_MLP, configs=4, batch=4)
            loop = train._Loop(model, args, 3, tf.distribute.get_strategy())
            loop.run(batches.take(3), train=True, progress=False, desc="", total=None)
        else:
            model.compile(loss="mse", optimizer=tf.keras.optimizers.Adam(0.1, clipnorm=0.5))
            model.fit(batches.take(3), epochs=1, verbose=0)
            best = {v.ref(): v + 0 for v in model.trainable_variables}
            for v in model.trainable_variables:
                v.assign(best[v.ref()])
        after = [v.numpy() for v in model.trainable_variables]
        names = [v.name for v in model.trainable_variables[-2:]]
        assert [n.split(":")[0].split("/")[-1] for n in names] == [
            "keep_default_gate",
            "default_margin",
        ]
        assert after[-2] == before[-2] == 1.0 and margin.rule_of(model) is True
        assert after[-1] == before[-1] == 0.25 and margin.margin_of(model) == 0.25
        assert any(not np.array_equal(a, b) for a, b in zip(after[:-2], before[:-2]))
    del labels


@pytest.mark.parametrize("missing", [("keep_default_gate", "default_margin"), ("default_margin",)])
def test_a_run_recorded_before_the_rule_still_reloads(missing, synth_root, tmp_path):
    """Recorded kwargs without the rule's keywords (before either existed, or before the
    margin did) and a checkpoint without their variables: rebuilt without them, ranked by its
    run file's record."""
    ds = data.load_dataset(synth_root, splits=("train",), progress=False)
    stored = json.loads(TINY_MLP)
    recorded = registry.resolved_kwargs("MLP", stored)
    for key in missing:
        del recorded[key]  # as recorded before the keyword existed
    # The model of that time: without the variables it did not have.
    then = {**{k: registry.ADDED_KEYWORDS[k] for k in missing}, **recorded}
    model = registry.build_model("MLP", 4, ds.num_ops, json.dumps(then))
    batches = data.training_batches(ds.train, ds.stats, num_configs=4, batch_size=4, seed=0)
    model(next(iter(batches))[0])  # called like a training batch: Keras then saves it
    assert margin.rule_of(model) is (None if "keep_default_gate" in missing else False)
    assert margin.margin_of(model) is None
    for i, v in enumerate(model.trainable_variables):
        v.assign(tf.fill(v.shape, 0.01 * (i + 1)))
    args = TrainArgs(
        model="MLP",
        model_kwargs_json=TINY_MLP,
        configs=4,
        out_dir=str(tmp_path),
        data_root=str(synth_root),
        cache_dir="",
    ).resolved(now_ms=1)
    write_hand_made_run(
        tmp_path,
        args,
        ds.stats,
        **{
            run_file.MODEL_KWARGS_KEY: recorded,
            run_file.KEEP_DEFAULT_KEY: {"chosen": True, "val": {}, "val_kept": {}},
        },
    )
    model_dir = tmp_path / formats.model_dir_name(args.hash())
    export.save_model(model, model_dir)
    run = TrainedRun.open(model_dir)
    assert run.model_kwargs == {**recorded, **{k: False for k in missing}}
    rebuilt, _ = run.load(synth_root, split="valid", progress=False)
    assert margin.margin_of(rebuilt) is None
    if "keep_default_gate" in missing:
        assert margin.rule_of(rebuilt) is None and run.keeps_default_in(rebuilt) is True
    for a, b in zip(rebuilt.trainable_variables, model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.slow
def test_a_geometry_run_given_the_printed_map_reranks_by_the_course_procedure(synth_root, tmp_path):
    """As an upstream user trains it: ResidualSAGE with the gated set context and the map
    `tpu-tiles columns` prints, passed in `--model_kwargs_json`. The course's reload (the
    SavedModel, a fresh build from that JSON, the in-order copy) ranks the test split as the
    run did, and the saved map is the printed one."""
    ds = data.load_dataset(synth_root, splits=("train",), min_train_configs=4, progress=False)
    column_map = registry.column_map(ds.stats, ds.train)
    kwargs = {"hidden_dim": 8, "num_layers": 1, "config_attention": "gated"}
    kwargs["tile_geometry"] = column_map
    result = train.train(
        tiny_args(synth_root, tmp_path, model="ResidualSAGE", model_kwargs_json=json.dumps(kwargs))
    )
    course = course_top5(str(result.model_dir), str(synth_root))["top5"]
    stored = _stored(result)["test_predictions"]
    assert course == {tile: top[:5] for tile, top in stored.items()}
    saved = TrainedRun.open(result.model_dir).saved_model.geometry.columns.numpy()
    np.testing.assert_array_equal(saved, np.float32(column_map["columns"]))
