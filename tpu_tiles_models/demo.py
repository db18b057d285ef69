"""`tpu-tiles demo`: the whole journey on the embedded synthetic data, in a few minutes.

Generates a synthetic tile:xla set, trains the recommended model and EarlyJoinSAGE briefly
with upstream's default flags, evaluates both on the validation split beside the baselines,
ranks the test split from the exported model and merges it into a Kaggle submission.
Deterministic: a rerun into the same `--out` reuses the data set and the runs an earlier one
made. A demo that is stopped (or fails) removes what it added to `--out` and keeps what was
there before.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from tpu_tiles_models.registry import RECOMMENDED_MODEL
from tpu_tiles_models.train_args import TrainArgs

# The recommended model and upstream's baseline, by their names alone (class defaults), each
# with upstream's default flags (docs/choosing.md).
DEMO_MODELS = {RECOMMENDED_MODEL: "{}", "EarlyJoinSAGE": "{}"}
DEMO_ARGS = TrainArgs(early_stop=0, cache_dir="")
EVALUATION_COLUMNS = ("model", "top1", "top5", "top10", "score", "opa")
LAYOUT_ROWS = 3  # the synthetic sample keeps a few layout rows, as the real one has 50
# What the demo writes into --out besides data/ and models/ (SAMPLE_CSV without --sample).
EVALUATION_CSV, EVALUATION_PNG = "evaluation.csv", "evaluation.png"
PREDICTIONS_CSV, KAGGLE_CSV = "predictions_model_output.csv", "predictions_kaggle.csv"
SAMPLE_CSV = "sample_submission.csv"
TEST_KERNELS = 20
# What the demo writes per synthetic kernel, about (29 MB of data for the default 600 train,
# 120 valid and 20 test kernels), and for its two models, evaluation and CSVs.
_BYTES_PER_KERNEL = 40_000
_BYTES_BESIDE_DATA = 40 * 2**20


@dataclasses.dataclass(frozen=True)
class DemoArgs:
    """The options of `tpu-tiles demo` (`add_flags` documents each and holds the defaults)."""

    out: str
    train: int
    epochs: int
    sample: str | None
    no_progress: bool

    @classmethod
    def from_namespace(cls, a: argparse.Namespace) -> DemoArgs:
        return cls(**{f.name: getattr(a, f.name) for f in dataclasses.fields(cls)})


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="tpu_tiles_demo", help="the folder everything goes into")
    # 600 kernels and 6 epochs keep the whole demo within about 3 minutes on 2 CPU cores.
    p.add_argument("--train", type=int, default=600, help="synthetic train kernels")
    p.add_argument("--epochs", type=int, default=6, help="training epochs of each model")
    p.add_argument(
        "--sample",
        default=None,
        help="the competition's sample_submission.csv: test ids are taken from it; "
        "without it (the default) the demo writes a synthetic one",
    )
    p.add_argument("--no_progress", action="store_true", help="no progress bars")


def _write_sample(path: Path, test_dir: Path) -> None:
    """A sample_submission.csv for the synthetic test ids, shaped like the real one."""
    from tpu_tiles_models import safe
    from tpu_tiles_models.formats import TILE_PREFIX

    ids = sorted(p.stem for p in test_dir.glob("*.npz"))
    rows = [f"{TILE_PREFIX}{i},0;1;2;3;4" for i in ids]
    rows += [f"layout:xla:default:demo{i},0;1;2" for i in range(LAYOUT_ROWS)]
    safe.write_bytes(path, ("ID,TopConfigs\n" + "\n".join(rows) + "\n").encode(), flag="--out")


def _train_args(a: DemoArgs, out: Path) -> dict[str, TrainArgs]:
    """Each model's training options, every flag checked before anything is written."""
    from tpu_tiles_models import files, run_file
    from tpu_tiles_models.errors import FlagError

    if a.train < 1:
        raise FlagError(f"--train must be at least 1, got {a.train}")
    kind = files.not_a_file(a.sample) if a.sample else ""
    if kind:
        what = "no such file" if kind == "not found" else f"{kind}, not a file"
        raise FlagError(f"--sample {a.sample}: {what}; pass the competition's CSV or leave it out")
    models_dir = out / "models"
    return {
        name: DEMO_ARGS.replace(
            model=name,
            model_kwargs_json=kwargs,
            data_root=str(out / "data"),
            out_dir=str(models_dir),
            epochs=a.epochs,
            results_csv=run_file.results_csv_path(models_dir, name),
            no_progress=a.no_progress,
        )
        for name, kwargs in DEMO_MODELS.items()
    }


def run(a: DemoArgs) -> None:
    """`tpu-tiles demo`: synthetic data, two models trained and evaluated, the test split
    ranked and merged into a Kaggle submission, all under `a.out`; prints the figures.

    Raises:
      FlagError: a bad `--train` or `--sample`.
      UserError: any step's, as that command says it.
    """
    import tensorflow as tf

    from tpu_tiles_models import evaluate, files, kaggle, predict, run_file, safe, synthetic, train

    out = Path(files.canonical(a.out, what="--out"))
    train_args = _train_args(a, out)
    tf.config.experimental.enable_op_determinism()  # the same figures on every run
    start = time.perf_counter()
    data_root, models_dir = out / "data", out / "models"
    progress = not a.no_progress
    have_data = (data_root / "train").is_dir()
    valid = max(a.train // 5, 20)  # upstream's flags need 10 with >= 10 configs
    new_kernels = 0 if have_data else a.train + valid + TEST_KERNELS
    need = _BYTES_BESIDE_DATA + new_kernels * _BYTES_PER_KERNEL
    written = [EVALUATION_CSV, EVALUATION_PNG, PREDICTIONS_CSV, KAGGLE_CSV]
    written += [] if a.sample else [SAMPLE_CSV]
    safe.claim(
        [safe.Output(out, "--out", folder=True, adds_to=True, need_bytes=need)]
        + [safe.Output(out / name, "--out") for name in written],
        [safe.Input(a.sample, "--sample file")] if a.sample else [],
    )
    before = _entries(out)
    made = files.make_dirs(out, flag="--out")
    try:
        if not have_data:
            synthetic.generate(
                data_root,
                train=a.train,
                valid=valid,
                test=TEST_KERNELS,
                seed=0,
                max_configs=300,
                test_ids_from=a.sample,
                progress=progress,
            )
        model_dirs = {}
        for name, args in train_args.items():
            print(f"\n== training {name}")
            # An earlier demo into --out trained it: deterministic, reused.
            if run_file.completed_run(models_dir, args.hash()) is not None:
                model_dirs[name] = Path(run_file.model_dir_path(models_dir, args.hash()))
                print(f"reusing {model_dirs[name]}, trained by an earlier demo into {out}")
                continue
            # What an earlier demo left of this run is incomplete: replaced.
            model_dirs[name] = train.train(args.replace(overwrite=True)).model_dir

        print("\n== evaluating on the validation split")
        result = evaluate.evaluate_dirs(list(model_dirs.values()), data_root, progress=progress)
        print(evaluate.format_table(result))
        chart = evaluate.write_outputs(result, png_path=out / EVALUATION_PNG)[0]
        rows = evaluate.rankings(result, name="model")
        table = [[name, *(f"{row[c]:.4f}" for c in EVALUATION_COLUMNS[1:])] for name, row in rows]
        with safe.atomic_path(out / EVALUATION_CSV) as tmp:
            tmp.write_text("\n".join(",".join(r) for r in [EVALUATION_COLUMNS, *table]) + "\n")

        print(f"\n== predicting the test split with the exported {RECOMMENDED_MODEL}")
        predictions, kernels = predict.predict_to_csv(
            model_dirs[RECOMMENDED_MODEL],
            data_root,
            out / PREDICTIONS_CSV,
            progress=progress,
        )
        sample = Path(a.sample) if a.sample else out / SAMPLE_CSV
        if not a.sample:
            _write_sample(sample, data_root / "test")
        kaggle_csv = out / KAGGLE_CSV
        kaggle.merge_kaggle(sample, predictions, kaggle_csv)

        print(f"\n== done in {time.perf_counter() - start:.0f} s; artifacts:")
        for label, path in (
            ("synthetic data", data_root),
            *((f"model {n}", d) for n, d in model_dirs.items()),
            *((f"run file {n}", run_file.run_file_for(d)) for n, d in model_dirs.items()),
            ("evaluation table and chart", f"{out / EVALUATION_CSV}, {chart}"),
            (f"predictions ({kernels} kernels)", predictions),
            ("Kaggle submission", kaggle_csv),
        ):
            print(f"  {label:<28} {path}")
        print("\n== validation split, every config of every kernel (errors: lower is better)")
        print("\n".join(evaluate.rankings_table(result, name="model")))
    except BaseException:  # stopped or failed: what this demo added to --out goes again
        for path in sorted(_entries(out) - before):
            files.remove(path)
        files.remove_made_dirs(made, out)
        raise


def _entries(out: Path) -> set[Path]:
    """What `--out` and its `models/` hold, hidden names left out: locks and staged files are
    their writers' to remove."""
    folders = [f for f in (out, out / "models") if f.is_dir()]
    return {p for f in folders for p in f.iterdir() if not p.name.startswith(".")}
