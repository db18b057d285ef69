"""Made run1_scores.npz with models.py at 6869d06, in a folder holding the tiny run `run1/`
(`tpu-tiles synth d1 --train 8 --valid 3 --test 2 --max_configs 12 --seed 5`, then
`tpu-tiles train --model=ResidualSAGE --model_kwargs_json='{"hidden_dim": 8, "op_embed_dim": 4,
"num_layers": 1}' --epochs 2 --data_root d1 --out_dir run1 --cache_dir= --configs 6 --batch 2`):
every valid and test kernel's `forward` of the reloaded run."""

import glob
import os

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
from tpu_tiles_models import data, runs

d = glob.glob("run1/model_*")[0]
run = runs.TrainedRun.open(d)
out = {}
for split in ("valid", "test"):
    model, ds = run.load("d1", split=split, cache_dir=None, progress=False)
    s = getattr(ds, split)
    for i in range(len(s)):
        g = data.kernel_graph(s, i, ds.stats)
        out[f"{split}/{i}"] = model.forward(g, s.num_configs(i)).numpy()
        print(split, i, out[f"{split}/{i}"][0][:6])
np.savez("run1_scores.npz", **out)
