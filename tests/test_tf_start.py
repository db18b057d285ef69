"""TensorFlow's native start-up notices are kept off stderr; anything else written while it
loads still reaches the user. A TensorFlow setting the package cannot use fails the first
import of TensorFlow in one line, and only that."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tpu_tiles_models
from tpu_tiles_models import tf_start

NOTICES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795690960.473004   22970 port.cc:153] oneDNN custom operations are on.\n",
    "I0000 00:00:1795690960.473477   22970 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.\n",
]


def test_notices_are_dropped_and_other_lines_kept(monkeypatch, capfd):
    def noisy_load():
        for line in NOTICES:
            os.write(2, line.encode())
        os.write(2, b"E0000 real.cc:1] a real error from the load\n")

    monkeypatch.setattr(tf_start, "_loaded", False)
    monkeypatch.setattr(tf_start, "_load", noisy_load)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    tf_start.load_tensorflow()
    tf_start.load_tensorflow()  # once per process
    assert capfd.readouterr().err == "E0000 real.cc:1] a real error from the load\n"


def test_asking_for_tensorflows_logs_keeps_them(monkeypatch, capfd):
    monkeypatch.setattr(tf_start, "_loaded", False)
    monkeypatch.setattr(tf_start, "_load", lambda: os.write(2, NOTICES[1].encode()))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    tf_start.load_tensorflow()
    assert capfd.readouterr().err == NOTICES[1]


@pytest.mark.slow
def test_a_process_that_loads_tensorflow_this_way_prints_nothing_on_stderr():
    code = (
        "from tpu_tiles_models import tf_start; tf_start.load_tensorflow(); "
        "import tensorflow as tf; print(int(tf.reduce_sum(tf.ones([3]))))"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "3\n", "")


# -- a TensorFlow setting it cannot use fails only what needs TensorFlow (issue 48) ----------

_KERAS_2_BUILT_IN = tpu_tiles_models.tensorflow_version() is None or tpu_tiles_models.major_minor(
    tpu_tiles_models.tensorflow_version()
) < (2, 16)


def _tpu_tiles(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tpu_tiles_models.cli", *argv],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.skipif(_KERAS_2_BUILT_IN, reason="TensorFlow < 2.16 has Keras 2 built in")
@pytest.mark.parametrize("value", ["0", "false"])
def test_a_keras_3_setting_fails_only_the_commands_that_need_tensorflow(value, tmp_path):
    """Before, `TF_USE_LEGACY_KERAS=0` was an ImportError traceback from every command."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS=value)
    (tmp_path / "sample.csv").write_text(
        "ID,TopConfigs\ntile:xla:a,0;1;2;3;4\nlayout:xla:default:x,0;1\n"
    )
    (tmp_path / "p.csv").write_text("ID,TopConfigs\ntile:xla:a,3;1;2;0;4\n")
    argv = ["kaggle", "--sample", "sample.csv", "--inputcsv", "p.csv", "--out", "k.csv"]
    kaggle = _tpu_tiles(argv, env, tmp_path)
    assert (kaggle.returncode, kaggle.stderr) == (0, "")
    assert (tmp_path / "k.csv").read_text().splitlines()[1] == "tile:xla:a,3;1;2;0;4"
    synth = _tpu_tiles(["synth", "D", "--train", "1", "--valid", "1", "--test", "1"], env, tmp_path)
    assert synth.returncode == 0 and len(list((tmp_path / "D" / "test").glob("*.npz"))) == 1
    models = _tpu_tiles(["models"], env, tmp_path)
    assert (models.returncode, models.stdout) == (2, "")
    assert models.stderr == (
        f"tpu-tiles models: error: TF_USE_LEGACY_KERAS={value} selects Keras 3, which TF-GNN "
        "1.0.3 cannot use: unset TF_USE_LEGACY_KERAS or set it to 1\n"
    )


@pytest.mark.slow
@pytest.mark.skipif(_KERAS_2_BUILT_IN, reason="TensorFlow < 2.16 has Keras 2 built in")
def test_a_keras_3_setting_fails_a_librarys_import_of_tensorflow_in_one_line():
    """In Python too, the package imports and its TensorFlow-free modules work; the first
    import of TensorFlow is the one that fails, as an ImportError that says the fix."""
    code = (
        "import tpu_tiles_models, tpu_tiles_models.kaggle\n"
        "try:\n    import tpu_tiles_models.runs\n"
        "except ImportError as e:\n    print(type(e).__name__, e)\n"
    )
    env = dict(os.environ, TF_USE_LEGACY_KERAS="0")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "TensorFlowUnusable TF_USE_LEGACY_KERAS=0 selects Keras 3, which TF-GNN 1.0.3 cannot "
        "use: unset TF_USE_LEGACY_KERAS or set it to 1\n"
    )
