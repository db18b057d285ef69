"""TensorFlow's native start-up notices are kept off stderr; anything else written while it
loads still reaches the user."""

from __future__ import annotations

import os
import subprocess
import sys

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


def test_a_process_that_loads_tensorflow_this_way_prints_nothing_on_stderr():
    code = (
        "from tpu_tiles_models import tf_start; tf_start.load_tensorflow(); "
        "import tensorflow as tf; print(int(tf.reduce_sum(tf.ones([3]))))"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "3\n", "")
