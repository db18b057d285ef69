"""Top-k errors of a random ranking on a data set's valid split: the floor any model must beat.

python benchmarks/random_baseline.py /tmp/tpu_tiles_bench_data
"""

import sys
from pathlib import Path

import numpy as np

from tpu_tiles_models import metrics


def main(root: str, seeds: int = 20) -> None:
    kernels = []
    for path in sorted(Path(root, "valid").glob("*.npz")):
        arrays = np.load(path)
        kernels.append(arrays["config_runtime"] / arrays["config_runtime_normalizers"])
    rows = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        rows.append(metrics.top_k_errors((r, rng.random(len(r))) for r in kernels))
    mean = {k: float(np.mean([r[k] for r in rows])) for k in metrics.TOP_KS}
    print(f"random ranking over {seeds} seeds, {len(kernels)} valid kernels of {root}:")
    print(" ".join(f"top{k} {v:.3f}" for k, v in mean.items()) + f"  score {1 - mean[5]:.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
