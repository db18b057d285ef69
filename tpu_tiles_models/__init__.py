"""tpu-tiles-models: learned cost models for TpuGraphs tile:xla kernels.

Importing the package does not import TensorFlow (the CSV tools need none of it); it only
checks, from the installed metadata, that the TensorFlow present is one TF-GNN 1.0 can use.
"""

from __future__ import annotations

from importlib import metadata

__version__ = "0.1.0"

_TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly")


def _installed_tensorflow() -> str | None:
    """The version of the installed TensorFlow distribution, or None if there is none."""
    for name in _TF_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _check_tensorflow() -> None:
    """Fails fast, in one line, on a TensorFlow that TF-GNN 1.0 cannot use."""
    version = _installed_tensorflow()
    if version is None:
        return  # TensorFlow-free use (kaggle CSVs); modules that need TF fail on import
    major, minor = (int(p) for p in version.split(".")[:2])
    if (major, minor) < (2, 13) or (major, minor) >= (2, 16):
        raise ImportError(
            f"tpu-tiles-models needs TensorFlow 2.13-2.15 (found {version}); "
            "TF >= 2.16 ships Keras 3, which tensorflow-gnn 1.0.3 and tensorflow-ranking "
            "0.5.5 do not support. Run: pip install 'tensorflow>=2.13,<2.16'"
        )


_check_tensorflow()
