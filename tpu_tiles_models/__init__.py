"""tpu-tiles-models: learned cost models for TpuGraphs tile:xla kernels.

Importing the package imports no TensorFlow. From the installed metadata it checks that the
TensorFlow present is one TF-GNN 1.0 can use, and makes `tf.keras` mean Keras 2 (TF 2.16 and
later: `tf-keras` with `TF_USE_LEGACY_KERAS=1`, as TF-GNN's guide says). An unusable one fails
the first import of TensorFlow in one line (`TensorFlowUnusable`), not the package's: the
modules that need no TensorFlow (`kaggle`, `synth`) still work.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata, util

from tpu_tiles_models.errors import UserError

__version__ = "0.1.0"

_TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly")
# The TensorFlow releases the package is tested on (docs/install.md names the two stacks).
SUPPORTED_TF = ((2, 13), (2, 21))
LEGACY_KERAS_VARIABLE = "TF_USE_LEGACY_KERAS"


def major_minor(version: str) -> tuple[int, int]:
    """`"2.21.0"` -> `(2, 21)`."""
    major, minor = version.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


class TensorFlowUnusable(UserError, ImportError):
    """The installed TensorFlow (or its Keras setting) is one TF-GNN 1.0 cannot use; raised
    by the first import of TensorFlow, so the command line says it in one line (exit 2)."""


def _keras_2_problem(tf_version: str) -> str | None:
    """Routes tf.keras to `tf_keras` where Keras 3 would be the default; None, or what stops
    that."""
    if major_minor(tf_version) < (2, 16):
        return None  # Keras 2 is built in
    legacy = os.environ.get(LEGACY_KERAS_VARIABLE) in ("1", "true", "True")
    if "tensorflow" in sys.modules:
        if legacy:
            return None
        return (
            f"TensorFlow {tf_version} was imported with Keras 3 before tpu_tiles_models, "
            "which needs Keras 2: install tf-keras matching TensorFlow (pip install "
            f"'tf-keras~=X.Y.0' for TF X.Y) and set {LEGACY_KERAS_VARIABLE}=1 before TensorFlow "
            "is first imported (in a notebook: restart it and run `import os; "
            f"os.environ['{LEGACY_KERAS_VARIABLE}'] = '1'` first)"
        )
    if util.find_spec("tf_keras") is None:
        major, minor = major_minor(tf_version)
        return (
            f"TensorFlow {tf_version} needs the tf-keras package for Keras 2 (TF-GNN 1.0.3 "
            f"runs on Keras 2 only): pip install 'tf-keras~={major}.{minor}.0'"
        )
    os.environ.setdefault(LEGACY_KERAS_VARIABLE, "1")
    if os.environ[LEGACY_KERAS_VARIABLE] not in ("1", "true", "True"):
        return (
            f"{LEGACY_KERAS_VARIABLE}={os.environ[LEGACY_KERAS_VARIABLE]} selects Keras 3, "
            f"which TF-GNN 1.0.3 cannot use: unset {LEGACY_KERAS_VARIABLE} or set it to 1"
        )
    return None


def tensorflow_version() -> str | None:
    """The installed TensorFlow's version, from its metadata (TensorFlow is not imported)."""
    for name in _TF_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def tensorflow_problem() -> str | None:
    """Why the installed TensorFlow cannot run TF-GNN 1.0 here, in one line; None when it can
    (or when there is none: the modules that need it then fail on import)."""
    version = tensorflow_version()
    if version is None:
        return None
    low, high = SUPPORTED_TF
    if not low <= major_minor(version) <= high:
        return (
            f"tpu-tiles-models needs TensorFlow {low[0]}.{low[1]}-{high[0]}.{high[1]} (found "
            f"{version}): pip install 'tensorflow>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}'"
        )
    return _keras_2_problem(version)


class _RefuseTensorFlow:
    """A `sys.meta_path` finder that fails every import of TensorFlow with `problem`."""

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "tensorflow":
            raise TensorFlowUnusable(self.problem)


def _check_tensorflow() -> None:
    """Makes the first import of an unusable TensorFlow fail in one line (and sets Keras 2
    up where it can be); fails at once where one was imported already (a notebook)."""
    problem = tensorflow_problem()
    if problem is None:
        return
    if "tensorflow" in sys.modules:
        raise TensorFlowUnusable(problem)
    sys.meta_path.insert(0, _RefuseTensorFlow(problem))


_check_tensorflow()
