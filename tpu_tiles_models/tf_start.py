"""Loads TensorFlow without its native start-up notices on stderr.

TensorFlow 2.16 and later print a few C++ log lines as their native libraries load (absl's
"before InitializeLog" notice, oneDNN, CUDA drivers, CPU instructions), whatever
`TF_CPP_MIN_LOG_LEVEL` says, and a command that promises one line on a fault would drown in
them. `load_tensorflow` loads them with stderr's file descriptor on a temporary file, then
writes back every captured line that is not such a notice.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

# Pieces of the lines TensorFlow's native libraries print as they load, on any machine.
START_UP_NOTICES = (
    "All log messages before absl::InitializeLog() is called",
    "port.cc:",
    "cudart_stub.cc:",
    "cuda_executor.cc:",
    "cuda_dnn.cc:",
    "cuda_fft.cc:",
    "cuda_blas.cc:",
    "computation_placer.cc:",
    "cpu_feature_guard.cc:",
    "To enable the following instructions:",
    "TF-TRT Warning",
)

_loaded = False


def load_tensorflow() -> None:
    """Imports TensorFlow and TF-GNN and loads their native libraries (once per process),
    keeping the start-up notices off stderr when the user left TensorFlow's C++ logging at
    warnings or quieter (the commands default `TF_CPP_MIN_LOG_LEVEL` to 3)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    try:
        quiet = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0")) >= 1
    except ValueError:
        quiet = False
    if not quiet:
        _load()
        return
    captured: list[str] = []
    try:
        with _stderr_captured(captured):
            _load()
    finally:  # a real message from a failed load reaches the user too
        kept = [line for line in captured if not any(n in line for n in START_UP_NOTICES)]
        if kept:
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


def _load() -> None:
    # TF-GNN's import reaches tf.keras, which loads the last native library. No op is run:
    # the first one would set up the runtime, which a multi-worker strategy must still be
    # able to configure (`--strategy=multi_worker`).
    import tensorflow_gnn  # noqa: F401


@contextlib.contextmanager
def _stderr_captured(lines: list[str]) -> Iterator[None]:
    """Points file descriptor 2 at a temporary file; what was written there is appended to
    `lines` (with their newlines) when the block is left."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode("utf-8", "replace").splitlines(keepends=True))
