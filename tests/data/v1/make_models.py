"""Made models_v1.{npz,json} with models.py at 6869d06 (run from the repository root):
`TF_USE_LEGACY_KERAS=1 python tests/data/v1/make_models.py OUT_DIR DATA_DIR`.

Stores the variables and scores of every model class on a few tiny kernels (their graph pieces
included), so that a rewritten models.py can be checked to rebuild and score them identically.
"""

import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import warnings
from pathlib import Path

import numpy as np
import tensorflow as tf

from tpu_tiles_models import data, margin, registry, synthetic

out = Path(sys.argv[1])
root = Path(sys.argv[2])
if not root.exists():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic.generate(root, train=12, valid=4, test=2, seed=3, max_configs=20, progress=False)
ds = data.load_dataset(root, min_train_configs=6, progress=False)
models = registry.load_models_module()
rng = np.random.default_rng(0)
# pieces: 2 single kernels with all configs, one batch of 3 kernels x 6 configs
pieces = {}
for j, i in enumerate([0, 1]):
    p = data._components(ds.valid, ds.stats, [i], -1, np.random.default_rng(1))
    for k, v in p.items():
        pieces[f"k{j}/{k}"] = np.asarray(
            v if np.asarray(v).dtype != object else np.asarray(v).astype("U")
        )
p = data._components(ds.train, ds.stats, [0, 1, 2], 6, np.random.default_rng(2))
for k, v in p.items():
    pieces[f"b/{k}"] = np.asarray(v if np.asarray(v).dtype != object else np.asarray(v).astype("U"))


def graph(prefix):
    d = {k.split("/", 1)[1]: v for k, v in pieces.items() if k.startswith(prefix + "/")}
    return data._to_graph({k: tf.convert_to_tensor(v) for k, v in d.items()})


# tiny kwargs per variant
ONE = {"ResidualSAGE": "num_layers", "ResidualSAGEPlain": "num_layers", "MLP": "mlp_layers"}
variants = {}
for name in models.MEMBER_MODELS:
    kw = {"hidden_dim": 8, "op_embed_dim": 4, ONE.get(name, "num_gnns"): 2}
    variants[name] = (name, kw)
variants["ResidualSAGE:attention"] = (
    "ResidualSAGE",
    {
        "hidden_dim": 8,
        "op_embed_dim": 4,
        "num_layers": 2,
        "config_attention": True,
        "attention_heads": 2,
        "inducing_points": 3,
    },
)
variants["ResidualSAGEPlain:context"] = (
    "ResidualSAGEPlain",
    {"hidden_dim": 8, "op_embed_dim": 4, "num_layers": 1, "default_context": True},
)
variants["EarlyJoinSAGE:zero"] = (
    "EarlyJoinSAGE",
    {"hidden_dim": 8, "op_embed_dim": 4, "num_gnns": 0, "final_mlp_layers": 1},
)
variants["EarlyJoinResGCN:directed"] = (
    "EarlyJoinResGCN",
    {"hidden_dim": 8, "op_embed_dim": 4, "num_gnns": 2, "directed": True, "reduction": "mean"},
)
variants["LateJoinResGCN:directed"] = (
    "LateJoinResGCN",
    {"hidden_dim": 8, "op_embed_dim": 4, "num_gnns": 1, "directed": True, "mlp_layers": 1},
)
variants["Ensemble"] = (
    "Ensemble",
    {
        "members": [
            {"model": "MLP", "kwargs": {"hidden_dim": 8, "op_embed_dim": 4}},
            {
                "model": "EarlyJoinSAGE",
                "kwargs": {"hidden_dim": 8, "op_embed_dim": 4, "num_gnns": 1},
            },
        ]
    },
)
variants["Ensemble:rank"] = (
    "Ensemble",
    {
        "combine": "rank",
        "members": [
            {
                "model": "ResidualSAGE",
                "kwargs": {"hidden_dim": 8, "op_embed_dim": 4, "num_layers": 1},
            },
            {
                "model": "LateJoinSAGE",
                "kwargs": {"hidden_dim": 8, "op_embed_dim": 4, "num_gnns": 1},
            },
        ],
    },
)

arrays = dict(pieces)
meta = {}
k0, k1, b = graph("k0"), graph("k1"), graph("b")
n0, n1 = int(k0.node_sets["config"].sizes[0]), int(k1.node_sets["config"].sizes[0])
for label, (cls, kw) in variants.items():
    m = (
        getattr(models, cls)(6, ds.stats.num_ops, chunk_size=7, **kw)
        if cls != "Ensemble"
        else getattr(models, cls)(6, ds.stats.num_ops, **kw)
    )
    m.forward(k0, n0)
    vals = []
    for v in m.trainable_variables:
        x = rng.normal(size=v.shape.as_list()).astype(np.float32) * 0.5
        v.assign(x)
    # rule: a margin and the gate on
    margin.set_rule(m, margin=0.05, keep=True)
    for i, v in enumerate(m.trainable_variables):
        arrays[f"{label}/var{i}"] = v.numpy()
    meta[label] = {
        "class": cls,
        "kwargs": kw,
        "names": [v.name.split("/")[-1] for v in m.trainable_variables],
        "resolved": registry.resolved_kwargs(cls, kw, models),
    }
    arrays[f"{label}/forward0"] = m.forward(k0, n0).numpy()
    arrays[f"{label}/forward1"] = m.forward(k1, n1).numpy()
    arrays[f"{label}/config0"] = m.config_scores(k0, n0).numpy()
    arrays[f"{label}/raw1"] = m.raw_scores(k1, n1).numpy()
    arrays[f"{label}/call"] = m(b, training=False).numpy()
    arrays[f"{label}/losses"] = np.float32(float(tf.add_n(m.losses)) if m.losses else 0.0)
    print(label, len(m.trainable_variables), arrays[f"{label}/forward0"][0][:5])
np.savez_compressed(out / "models_v1.npz", **arrays)
(out / "models_v1.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
