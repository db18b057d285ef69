"""Shared fixtures: small synthetic TpuGraphs-format data sets, made once per session."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory) -> Path:
    """A tiny synthetic tile:xla tree: {train,valid,test}/*.npz, test runtimes zero."""
    from tpu_tiles_models import synthetic

    root = tmp_path_factory.mktemp("synth")
    synthetic.generate(root, train=24, valid=8, test=6, seed=0, max_configs=48, progress=False)
    return root


@pytest.fixture(scope="session")
def sample_submission() -> Path:
    """The competition's real sample_submission.csv (never committed to this repo)."""
    path = SHARED_DATA / "sample_submission.csv"
    if not path.exists():
        pytest.skip(f"{path} not found (it lives in shared/data beside the checkout)")
    return path
