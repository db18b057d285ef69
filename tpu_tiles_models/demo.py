"""`tpu-tiles demo`: the whole journey on the embedded synthetic data, in a few minutes.

Generates a synthetic tile:xla set, trains ResidualSAGE and EarlyJoinSAGE briefly with
upstream's artifacts, evaluates both on the validation split, ranks the test split from the
exported model (the course's prediction step) and merges it into a Kaggle submission.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tpu_tiles_models.train_args import TrainArgs

DEMO_MODELS = ("ResidualSAGE", "EarlyJoinSAGE")
# Both models train with the flags we recommend for ResidualSAGE (see registry.MODELS): more
# configs per kernel and a loss that ranks from the fastest config give far more signal per
# step than upstream's defaults, which matters in a short demo.
DEMO_ARGS = TrainArgs(configs=32, batch=8, lr=2e-3, losses="FastFirstListMLE:1,MSE:0.02")
LAYOUT_ROWS = 3  # the synthetic sample keeps a few layout rows, as the real one has 50


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="tpu_tiles_demo", help="everything goes here")
    p.add_argument("--train", type=int, default=160, help="synthetic train kernels")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument(
        "--sample",
        default=None,
        help="the competition's sample_submission.csv: test ids are taken from it; "
        "without it the demo writes a synthetic one",
    )
    p.add_argument("--no_progress", action="store_true")


def _write_sample(path: Path, test_dir: Path) -> None:
    """A sample_submission.csv for the synthetic test ids, shaped like the real one."""
    from tpu_tiles_models import kaggle

    ids = sorted(p.stem for p in test_dir.glob("*.npz"))
    rows = [f"{kaggle.TILE_PREFIX}{i},0;1;2;3;4" for i in ids]
    rows += [f"layout:xla:default:demo{i},0;1;2" for i in range(LAYOUT_ROWS)]
    path.write_text("ID,TopConfigs\n" + "\n".join(rows) + "\n")


def run(a: argparse.Namespace) -> None:
    from tpu_tiles_models import evaluate, export, kaggle, predict, synthetic, train

    start = time.perf_counter()
    out = Path(a.out).resolve()
    data_root, models_dir = out / "data", out / "models"
    progress = not a.no_progress
    if not (data_root / "train").is_dir():
        synthetic.generate(
            data_root,
            train=a.train,
            valid=max(a.train // 5, 10),
            test=20,
            seed=0,
            max_configs=300,
            test_ids_from=a.sample,
            progress=progress,
        )
    model_dirs = {}
    for name in DEMO_MODELS:
        print(f"\n== training {name}")
        args = DEMO_ARGS.replace(
            model=name,
            data_root=str(data_root),
            cache_dir="",
            out_dir=str(models_dir),
            epochs=a.epochs,
            early_stop=0,
            results_csv=str(models_dir / f"results_{name}.csv"),
            no_progress=not progress,
        )
        result = train.train(args)
        model_dirs[name] = result.model_dir

    print("\n== evaluating on the validation split")
    result = evaluate.evaluate_dirs(list(model_dirs.values()), data_root, progress=progress)
    print(evaluate.format_table(result))
    chart = evaluate.plot(result, out / "evaluation.png")

    print("\n== predicting the test split with the exported ResidualSAGE")
    predictions, rows = predict.predict_to_csv(
        model_dirs["ResidualSAGE"],
        data_root,
        out / "predictions_model_output.csv",
        progress=progress,
    )
    sample = Path(a.sample) if a.sample else out / "sample_submission.csv"
    if not a.sample:
        _write_sample(sample, data_root / "test")
    kaggle_csv = out / "predictions_kaggle.csv"
    kaggle.merge_kaggle(sample, predictions, kaggle_csv)

    print(f"\n== done in {time.perf_counter() - start:.0f} s; artifacts:")
    for label, path in (
        ("synthetic data", data_root),
        *((f"model {n}", d) for n, d in model_dirs.items()),
        *((f"run file {n}", export.run_file_for(d)) for n, d in model_dirs.items()),
        ("evaluation chart", chart),
        (f"predictions ({rows} kernels)", predictions),
        ("Kaggle submission", kaggle_csv),
    ):
        print(f"  {label:<28} {path}")
