"""Hand-ins cross the two supported stacks (docs/install.md): a run written on this stack
reloads by the course procedure on the other, and one written on the other reloads here, each
with the same test top 5 on both and the one its run file stored.

The other stack is the Python named by `TPU_TILES_OTHER_PYTHON`, with this repository
installed in it; `.ci/run` sets it when it runs the suite on the course stack. Without it
these tests are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

OTHER_PYTHON = os.environ.get("TPU_TILES_OTHER_PYTHON", "")
RELOAD = REPO / "tests" / "course_reload.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not OTHER_PYTHON, reason="TPU_TILES_OTHER_PYTHON names no other stack's Python"
    ),
]


def _run(python: str, *argv: str) -> str:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [python, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _reload(python: str, model_dir: Path, data_root: Path) -> dict:
    return json.loads(_run(python, str(RELOAD), str(model_dir), str(data_root)).splitlines()[-1])


def _stored_top5(model_dir: Path) -> dict:
    """The test top 5 the run's own scoring wrote into its results CSV's rows (ranks 1-5)."""
    from tpu_tiles_models.runs import TrainedRun

    stored = TrainedRun.open(model_dir).info["test_predictions"]
    return {tile: ranking[:5] for tile, ranking in stored.items()}


def _versions() -> tuple[str, str]:
    here = _run(sys.executable, "-c", "import tensorflow as tf; print(tf.__version__)")
    there = _run(OTHER_PYTHON, "-c", "import tensorflow as tf; print(tf.__version__)")
    return here.split()[-1], there.split()[-1]


def test_the_other_python_is_another_stack():
    here, there = _versions()
    assert here.split(".")[:2] != there.split(".")[:2], (here, there)


def test_a_run_from_this_stack_reloads_on_the_other(residual_run, synth_root):
    model_dir = residual_run.model_dir
    here = _reload(sys.executable, model_dir, synth_root)
    there = _reload(OTHER_PYTHON, model_dir, synth_root)
    assert here["tensorflow"] != there["tensorflow"]
    assert there["top5"] == here["top5"] == _stored_top5(model_dir)


def test_a_run_from_the_other_stack_reloads_here(synth_root, tmp_path):
    """Trained there with cross-config attention (the residual_run fixture has none)."""
    kwargs = '{"hidden_dim": 8, "num_layers": 1, "config_attention": true}'
    _run(
        OTHER_PYTHON, "-m", "tpu_tiles_models.cli", "train", f"--data_root={synth_root}",
        f"--out_dir={tmp_path}", "--cache_dir=", "--configs=4", "--batch=4", "--epochs=1",
        "--model=ResidualSAGE", f"--model_kwargs_json={kwargs}", "--no_progress",
    )  # fmt: skip
    (model_dir,) = tmp_path.glob("model_*")
    there = _reload(OTHER_PYTHON, model_dir, synth_root)
    here = _reload(sys.executable, model_dir, synth_root)
    assert here["tensorflow"] != there["tensorflow"]
    assert here["top5"] == there["top5"] == _stored_top5(model_dir)
