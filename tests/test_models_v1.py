"""Models trained before models.py's rewrite rebuild and rank as they did.

`tests/data/v1/` was made with models.py at 6869d06 (its two scripts say how):
- `models_v1.{npz,json}`: every model class and variant, its variables (random values, a margin
  and the keep-default gate on) and its scores on two kernels and a training batch;
- a tiny trained run (`model_<h>/`, `run_<h>.jsonz`) with its data's valid and test splits and
  every kernel's `forward` after the course's reload (`run1_scores.npz`).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tpu_tiles_models import data, margin, registry, runs, train_args

V1 = Path(__file__).parent / "data" / "v1"
models = registry.load_models_module()
META = json.loads((V1 / "models_v1.json").read_text())
ARRAYS = np.load(V1 / "models_v1.npz")


# Keywords added since v1, at the value that builds what v1 built (their defaults).
ADDED_SINCE_V1 = {"tile_geometry": False}


def _as_v1(resolved):
    """`resolved` keywords without those added since v1 at their v1 value (members' too)."""
    if isinstance(resolved, list):
        return [_as_v1(v) for v in resolved]
    if not isinstance(resolved, dict):
        return resolved
    added = lambda k, v: k in ADDED_SINCE_V1 and v == ADDED_SINCE_V1[k]  # noqa: E731
    return {k: _as_v1(v) for k, v in resolved.items() if not added(k, v)}


def _graph(prefix: str):
    pieces = {k.split("/", 1)[1]: ARRAYS[k] for k in ARRAYS.files if k.startswith(prefix + "/")}
    return data._to_graph({k: tf.convert_to_tensor(v) for k, v in pieces.items()})


def _configs(graph) -> int:
    return int(graph.node_sets["config"].sizes[0])


@pytest.mark.parametrize("label", sorted(META))
def test_each_class_rebuilds_with_the_same_variables_and_scores(label):
    meta = META[label]
    kernel0, kernel1, batch = _graph("k0"), _graph("k1"), _graph("b")
    n0, n1 = _configs(kernel0), _configs(kernel1)
    extra = {} if meta["class"] == "Ensemble" else {"chunk_size": 7}
    model = getattr(models, meta["class"])(6, 121, **meta["kwargs"], **extra)
    model.forward(kernel0, n0)
    variables = model.trainable_variables
    assert [v.name.split("/")[-1] for v in variables] == meta["names"]
    for i, v in enumerate(variables):
        v.assign(ARRAYS[f"{label}/var{i}"])  # shapes must match, in order
    resolved = registry.resolved_kwargs(meta["class"], meta["kwargs"], models)
    assert _as_v1(resolved) == meta["resolved"]
    assert margin.margin_of(model) == pytest.approx(0.05) and margin.rule_of(model)

    def close(got, key):
        ref = ARRAYS[f"{label}/{key}"]
        scale = max(1.0, float(np.abs(ref).max()))
        # Float order differs between x86-64 CPUs (oneDNN's kernels); an ensemble's z-scores,
        # divided by a kernel's spread of scores, carry that to about 1e-4 of their scale.
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-3, atol=2e-4 * scale, err_msg=key)

    close(model.forward(kernel0, n0), "forward0")  # places: equal means the same ranking
    close(model.forward(kernel1, n1), "forward1")
    close(model.config_scores(kernel0, n0), "config0")
    close(model.raw_scores(kernel1, n1), "raw1")
    close(model(batch, training=False), "call")
    losses = float(tf.add_n(model.losses)) if model.losses else 0.0
    assert losses == pytest.approx(float(ARRAYS[f"{label}/losses"]), rel=1e-5)


def test_a_run_trained_before_reloads_and_ranks_identically(tmp_path):
    """The stored run opens, rebuilds by the course procedure and gives every kernel's
    `forward` as before; its SavedModel loads as the course script loads it."""
    folder = tmp_path / "run1"
    shutil.copytree(V1, folder, ignore=shutil.ignore_patterns("*.py", "models_v1.*"))
    model_dir = next(folder.glob("model_*"))
    run = runs.TrainedRun.open(model_dir)
    expected = np.load(V1 / "run1_scores.npz")
    for split in ("valid", "test"):
        model, dataset = run.load(folder / "data", split=split, cache_dir=None, progress=False)
        kernels = getattr(dataset, split)
        for i in range(len(kernels)):
            graph = data.kernel_graph(kernels, i, dataset.stats)
            got = model.forward(graph, kernels.num_configs(i)).numpy()
            np.testing.assert_allclose(got, expected[f"{split}/{i}"], rtol=1e-5, atol=1e-4)
            assert (
                np.argsort(got[0], kind="stable")
                == np.argsort(expected[f"{split}/{i}"][0], kind="stable")
            ).all()
    assert len(run.saved_model.trainable_variables) == len(model.trainable_variables)


def test_a_run_recording_options_removed_since_reloads_without_them(tmp_path):
    """`--head_configs`, `--head_share` and `--pad_configs` are gone. The stored run
    records them at their defaults: its options read, and name it, as before. A run trained
    with one set keeps its name (its run file lists what entered it) and reloads and ranks
    like any other: those options only chose which configs training drew."""
    h = "afa7391cd496ce4e7c7bb01691550548"
    stored = runs.TrainedRun.open(V1 / f"model_{h}")
    assert {k: stored.extras["train_args"][k] for k in ("head_configs", "head_share")} == {
        "head_configs": 0,
        "head_share": 0.1,
    }
    assert stored.train_args.hash() == h
    info = json.loads(gzip.decompress((V1 / f"run_{h}.jsonz").read_bytes()))
    extras = info["tpu_tiles"]
    extras["train_args"].update(head_configs=3, head_share=0.01, pad_configs=True)
    extras["identity"].update(head_configs=3, head_share=0.01, pad_configs=True)
    head = train_args.args_hash(info["args"], extras["identity"])
    shutil.copytree(V1 / f"model_{h}", tmp_path / f"model_{head}")
    (tmp_path / f"run_{head}.jsonz").write_bytes(gzip.compress(json.dumps(info).encode()))
    run = runs.TrainedRun.open(tmp_path / f"model_{head}")
    assert run.train_args == stored.train_args
    model, dataset = run.load(V1 / "data", split="valid", cache_dir=None, progress=False)
    graph = data.kernel_graph(dataset.valid, 0, dataset.stats)
    got = model.forward(graph, dataset.valid.num_configs(0)).numpy()
    want = np.load(V1 / "run1_scores.npz")["valid/0"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
