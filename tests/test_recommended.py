"""The recommended model by its name alone, and runs written before its defaults changed.

`--model=ResidualSAGE` builds what the suite recommends: the class defaults in models.py are
the recommendation, which `tpu-tiles models`, the demo and the suite read from there. Run files
record the resolved keywords; one written before (no record) meant the earlier defaults and
still reloads as it was trained.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from conftest import load_benchmark, write_hand_made_run
from tensorflow.core.protobuf import saved_model_pb2

from tpu_tiles_models import bundle, cli, data, demo, formats, margin, registry, run_file
from tpu_tiles_models.runs import TrainedRun
from tpu_tiles_models.train_args import TrainArgs

RECOMMENDED = {"hidden_dim": 32, "config_attention": False, "default_context": True}


def test_the_name_alone_builds_the_recommendation():
    model = registry.build_model("ResidualSAGE", 10, 121)
    kwargs = registry.recommended_kwargs()
    assert {k: kwargs[k] for k in RECOMMENDED} == RECOMMENDED
    assert model._attention is None and model.default_first
    assert model._node_in.units == 32
    assert demo.DEMO_MODELS[registry.RECOMMENDED_MODEL] == "{}"


def test_models_prints_the_recommendation_in_a_stable_form(capsys):
    assert cli.main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "recommended: --model=ResidualSAGE" in lines
    at = lines.index("recommended: --model=ResidualSAGE")
    assert lines[at + 1] == (
        f"  its class defaults: {json.dumps(registry.recommended_kwargs(), sort_keys=True)}"
    )
    assert all(any(line.startswith(name + " ") for line in lines) for name in registry.MODELS)


@pytest.mark.bench  # a test of benchmarks/suite.py
def test_the_suite_judges_the_model_by_its_name():
    suite = load_benchmark("suite")
    assert suite.RECOMMENDED == registry.RECOMMENDED_MODEL
    assert suite.parse_args(["--work", "w"]).candidate == suite.RECOMMENDED
    # A label is an architecture: the bare name is the defaults however they are spelled.
    assert suite.label_of("ResidualSAGE", {}) == "ResidualSAGE"
    assert suite.label_of("ResidualSAGE", dict(RECOMMENDED)) == "ResidualSAGE"
    first = registry.EARLIER_DEFAULTS["ResidualSAGE"]
    assert suite.label_of("ResidualSAGE", dict(first)) == "ResidualSAGE:first"


def test_a_new_run_records_its_resolved_kwargs(residual_run):
    run = TrainedRun.open(residual_run.model_dir)
    stored = json.loads(run.args["model_kwargs_json"])
    assert run.extras[run_file.MODEL_KWARGS_KEY] == registry.resolved_kwargs("ResidualSAGE", stored)
    assert run.model_kwargs["default_context"] is True  # left out: today's default


# Left out of the kwargs below, so the earlier defaults decide them: 48 wide, attention on.
_OLD_KWARGS = {"num_layers": 1, "op_embed_dim": 8}


@pytest.fixture(scope="module")
def old_run(synth_root, tmp_path_factory):
    """A run as our trainer wrote it before run files recorded their kwargs: stored kwargs
    that leave the changed defaults out, no `model_kwargs` record; its checkpoint holds a
    model built with the earlier defaults (written by hand: no training needed)."""
    ds = data.load_dataset(synth_root, splits=("train", "valid"), progress=False)
    earlier = {
        **registry.EARLIER_DEFAULTS["ResidualSAGE"],
        **registry.ADDED_KEYWORDS,  # no ranking rule's variable then
        **_OLD_KWARGS,
    }
    model = registry.build_model("ResidualSAGE", 4, ds.num_ops, json.dumps(earlier))
    model.forward(data.kernel_graph(ds.train, 0, ds.stats), ds.train.num_configs(0))
    for i, v in enumerate(model.trainable_variables):  # values a fresh build cannot have
        v.assign(tf.fill(v.shape, 0.01 * (i + 1)))
    out = tmp_path_factory.mktemp("old_run")
    args = TrainArgs(
        model="ResidualSAGE",
        model_kwargs_json=json.dumps(_OLD_KWARGS),
        configs=4,
        out_dir=str(out),
        data_root=str(synth_root),
        cache_dir="",
    ).resolved(now_ms=1)
    run_file = write_hand_made_run(out, args, ds.stats)
    model_dir = out / formats.model_dir_name(args.hash())
    (model_dir / "variables").mkdir(parents=True)
    # A SavedModel of one tagged, empty graph: opening checks it, loading never reads it (the
    # checkpoint fits the rebuilt model).
    saved = saved_model_pb2.SavedModel()
    saved.meta_graphs.add().meta_info_def.tags.append("serve")
    (model_dir / formats.SAVED_MODEL_FILE).write_bytes(saved.SerializeToString())
    # Keras 2's layout of a SavedModel's variables: `variables/<i>` in `model.variables` order.
    tf.train.Checkpoint(variables=list(model.trainable_variables)).write(
        str(model_dir / "variables" / "variables")
    )
    assert run_file.name == formats.run_file_name(args.hash())
    return model_dir, [v.numpy() for v in model.trainable_variables]


def test_an_old_run_file_rebuilds_the_earlier_architecture(old_run, synth_root):
    model_dir, saved = old_run
    run = TrainedRun.open(model_dir)
    assert run_file.MODEL_KWARGS_KEY not in run.extras and run.stored_kwargs == _OLD_KWARGS
    assert run.model_kwargs == {
        **_OLD_KWARGS,
        **registry.EARLIER_DEFAULTS["ResidualSAGE"],
        **registry.ADDED_KEYWORDS,
    }
    model, _ = run.load(synth_root, split="valid", progress=False)
    assert model._attention is not None and not model.default_first
    assert margin.rule_of(model) is None  # built without the ranking rule, as it was trained
    rebuilt = [v.numpy() for v in model.trainable_variables]
    assert [r.shape for r in rebuilt] == [s.shape for s in saved]
    for r, s in zip(rebuilt, saved):
        np.testing.assert_array_equal(r, s)
    # Today's defaults would build another model: the record is what makes it reload.
    today = registry.build_model("ResidualSAGE", 4, 121, json.dumps(_OLD_KWARGS))
    ds = data.load_dataset(synth_root, splits=("valid",), stats=run.stats, progress=False)
    today.forward(data.kernel_graph(ds.valid, 0, ds.stats), ds.valid.num_configs(0))
    assert [tuple(v.shape) for v in today.trainable_variables] != [s.shape for s in saved]


def test_an_old_run_is_not_handed_in_with_todays_models_py(old_run, tmp_path):
    """A grader rebuilds from the run file's kwargs alone, with the models.py handed in."""
    model_dir, _ = old_run
    path = run_file.run_file_for(model_dir)
    with pytest.raises(bundle.BundleError) as err:
        bundle.make_bundle(model_dir, tmp_path / "handin")
    assert str(err.value) == (
        f"{path}: trained as ResidualSAGE with config_attention=true, "
        "default_context=false, default_margin=false, hidden_dim=48, keep_default_gate=false, "
        f"but {registry.dropin_file('models.py')} builds config_attention=false, "
        "default_context=true, default_margin=true, hidden_dim=32, keep_default_gate=true from "
        "its model_kwargs_json "
        '{"num_layers": 1, '
        '"op_embed_dim": 8}, so a grader would rebuild another model; retrain it, or hand in '
        "the models.py it was trained with (--models)"
    )
    assert not (tmp_path / "handin").exists()
