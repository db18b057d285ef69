"""Loads TensorFlow without its native start-up notices on stderr.

TensorFlow 2.16 and later print a few C++ log lines as their native libraries load (absl's
"before InitializeLog" notice, oneDNN, CUDA drivers, CPU instructions), whatever
`TF_CPP_MIN_LOG_LEVEL` says, and a command that promises one line on a fault would drown in
them. `load_tensorflow` loads them with stderr's file descriptor through `filtered_stderr`,
which passes on every line that is not such a notice (and filters Beam's workers' start-up
lines the same way, `pipelines.quiet_workers`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator

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
    notices = [n.encode() for n in START_UP_NOTICES]
    with filtered_stderr(lambda line: any(n in line for n in notices)) as pump:
        _load()  # a real message from a failed load reaches the user too
    if pump is not None:
        pump.join()  # every line passed on before the command's own


def _load() -> None:
    # TF-GNN's import reaches tf.keras, which loads the last native library. No op is run:
    # the first one would set up the runtime, which a multi-worker strategy must still be
    # able to configure (`--strategy=multi_worker`).
    import tensorflow_gnn  # noqa: F401


@contextlib.contextmanager
def filtered_stderr(drop: Callable[[bytes], bool]) -> Iterator[threading.Thread | None]:
    """Within the block, file descriptor 2 (this process's, and that of every process started
    in it) goes through a pipe whose lines `drop` does not match a thread writes to stderr.
    Yields that thread (None when there is no stderr to filter): it ends once every writer
    has closed the pipe, the block's end for this process."""
    try:
        sys.stderr.flush()
        stderr = os.dup(2)
    except (OSError, ValueError):  # no stderr to filter
        yield None
        return
    read_end, write_end = os.pipe()

    def pump() -> None:
        with os.fdopen(read_end, "rb") as lines:
            for line in lines:
                if not drop(line):
                    os.write(stderr, line)
        os.close(stderr)  # every writer has gone

    thread = threading.Thread(target=pump, name="stderr-filter", daemon=True)
    thread.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield thread
    finally:
        sys.stderr.flush()
        os.dup2(stderr, 2)  # ours again; the pipe closes when its last writer exits
