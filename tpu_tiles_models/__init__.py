"""tpu-tiles-models: learned cost models for TpuGraphs tile:xla kernels."""

__version__ = "0.1.0"


def _check_tensorflow() -> None:
    """Fails fast, in one line, on a TensorFlow that TF-GNN 1.0 cannot use."""
    import tensorflow as tf

    major, minor = (int(p) for p in tf.__version__.split(".")[:2])
    if (major, minor) < (2, 13) or (major, minor) >= (2, 16):
        raise ImportError(
            f"tpu-tiles-models needs TensorFlow 2.13-2.15 (found {tf.__version__}); "
            "TF >= 2.16 ships Keras 3, which tensorflow-gnn 1.0.3 and tensorflow-ranking "
            "0.5.5 do not support. Run: pip install 'tensorflow>=2.13,<2.16'"
        )


_check_tensorflow()
