"""Installs tpu-tiles-models: TF-GNN cost models for the TpuGraphs tile:xla collection."""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

# The drop-in files live at the top level, where users copy them from; a built wheel carries
# copies in tpu_tiles_models/dropin/ so that `tpu-tiles install` and the registry find them.
DROPIN_FILES = ("models.py", "tiles_gen_predictions_csv.py", "create_kaggle_csv.py")


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
    python_requires=">=3.9,<3.12",
    packages=find_packages(include=["tpu_tiles_models", "tpu_tiles_models.*"]),
    install_requires=[
        # TF >= 2.16 ships Keras 3, which TF-GNN 1.0 and TF-Ranking 0.5.5 do not support.
        "tensorflow>=2.13,<2.16",
        "tensorflow-gnn==1.0.3",
        "tensorflow-ranking==0.5.5",
        "numpy<2",
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
    # pandas: tests compare our Kaggle CSV with what the course script (pandas) writes.
    extras_require={"test": ["pytest", "pytest-xdist", "ruff", "pandas"]},
    entry_points={"console_scripts": ["tpu-tiles=tpu_tiles_models.cli:main"]},
    cmdclass={"build_py": BuildWithDropins},
)
