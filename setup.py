"""Installs tpu-tiles-models: TF-GNN cost models for the TpuGraphs tile:xla collection."""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

# The drop-in files live at the top level, where users copy them from; a built wheel carries
# copies in tpu_tiles_models/dropin/ so that `tpu-tiles install` and the registry find them.
DROPIN_FILES = ("models.py", "tiles_gen_predictions_csv.py", "create_kaggle_csv.py")
DASK = ["apache-beam[dask]<3"]


class BuildWithDropins(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib, "tpu_tiles_models", "dropin")
        target.mkdir(parents=True, exist_ok=True)
        for name in DROPIN_FILES:
            shutil.copy2(name, target / name)


setup(
    name="tpu-tiles-models",
    version="0.1.0",
    description=(
        "Drop-in TF-GNN models, trainer, prediction and Kaggle tools for the "
        "TpuGraphs tile:xla collection (tpu_graphs baselines)."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    # Two stacks (docs/install.md): the modern one, TF 2.16-2.21 with Keras 2 from tf-keras
    # (Python 3.10-3.13, constraints.txt), and the course's TF 2.13-2.15 (Python 3.9-3.11,
    # constraints-course.txt).
    python_requires=">=3.9,<3.14",
    packages=find_packages(include=["tpu_tiles_models", "tpu_tiles_models.*"]),
    install_requires=[
        # TF-GNN 1.0.3 runs on Keras 2 only: TF 2.13-2.15 have it built in; on TF >= 2.16 it
        # comes from tf-keras, which pip matches to the installed TF (tf-keras X.Y needs TF X.Y)
        # and the package routes tf.keras to (tpu_tiles_models/__init__.py).
        "tensorflow>=2.13,<2.22",
        "tf-keras>=2.14,<2.22",
        "tensorflow-gnn==1.0.3",
        # `--tensorboard` and the sweep's hparams: TF <= 2.15 installs it, TF >= 2.16 no more.
        "tensorboard",
        "numpy",
        "tqdm",
        # The trainer parses upstream's absl flag syntax with absl's own parser.
        "absl-py",
        "matplotlib",
        # The sweep engine's pipelines. TF-GNN already installs Beam (unpinned); Beam 3 is
        # announced with breaking changes. constraints.txt pins the tested 2.77.0.
        "apache-beam<3",
        # The sweep reads YAML grid files (--grid g.yaml). constraints.txt pins the tested one.
        "pyyaml",
        # The data cache's compression (Beam installs it too; constraints.txt pins it).
        "zstandard",
    ],
    extras_require={
        # `tpu-tiles sweep --runner DaskRunner` (docs/sweeps.md): Beam's own Dask extra (dask
        # and distributed); the constraints files pin the tested versions.
        "dask": DASK,
        # pandas: tests compare our Kaggle CSV with what the course script (pandas) writes;
        # Dask: a test runs a sweep on a local Dask cluster.
        "test": ["pytest", "pytest-xdist", "ruff", "pandas", *DASK],
        # The course stack's extra: upstream's trainer needs TF-Ranking, which imports on
        # TF <= 2.15 only; the tests also check our ranking losses against it there.
        "course": ["tensorflow-ranking==0.5.5"],
    },
    entry_points={"console_scripts": ["tpu-tiles=tpu_tiles_models.cli:main"]},
    cmdclass={"build_py": BuildWithDropins},
)
