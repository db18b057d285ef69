"""Ranks every test kernel with a trained model and writes `predictions_model_output.csv`.

The course's prediction command, same flags:

    python tiles_gen_predictions_csv.py --dir ~/out/tpugraphs_tiles/model_<hash>

Copied into a `tpu_graphs` checkout (this file's folder or the working directory holds
`tpu_graphs/baselines/tiles/models.py`), it rebuilds the model from that checkout's models.py;
anywhere else, from the models.py of the installed `tpu_tiles_models` package. Either way the
package does the work (`tpu_tiles_models.predict.predict_to_csv`), so it must be installed.
Unlike the course script it reloads models trained with `--toy_data`, ranks faster, pads
kernels with fewer than `--top_k` configs with distinct indices instead of repeated zeros, and
ranks by the model's own rule as the course script does (config 0, the compiler's default, kept
in each top 5 when the model says so; `--keep_default` overrides it, as for `tpu-tiles predict`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow: no start-up noise

EXIT_USER_ERROR = 2  # like argparse and `tpu-tiles`
PROG = "tiles_gen_predictions_csv.py"
UPSTREAM_MODELS = Path("tpu_graphs", "baselines", "tiles", "models.py")
INSTALL_HINT = (
    f"{PROG}: error: the tpu_tiles_models package is not installed in {sys.executable}; "
    "run `pip install -e <your clone of the tpu-tiles-models repo>` (or `pip install "
    "tpu-tiles-models`) and retry"
)


def _defaults():
    """The package's shared defaults (`tpu_tiles_models.defaults`), or None when it is not
    installed: `main` then says how to install it."""
    try:
        from tpu_tiles_models import defaults
    except ImportError:
        return None
    return defaults


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The course script's flags (`--dir`, `--data_root`, `--cache_dir`) and ours; the data
    root and cache default to the package's, as for `tpu-tiles predict`."""
    shared = _defaults()
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the model_<hash> directory to load")
    parser.add_argument(
        "--data_root",
        default=shared.data_root() if shared else None,
        help=shared.DATA_ROOT_HELP if shared else None,
    )
    parser.add_argument(
        "--cache_dir",
        default=shared.CACHE_DIR if shared else None,
        help=shared.CACHE_DIR_HELP if shared else "'' for no cache",
    )
    parser.add_argument("--out", default="predictions_model_output.csv", help="CSV to write")
    parser.add_argument("--top_k", type=int, default=5, help="configs listed per kernel")
    parser.add_argument(
        "--keep_default",
        default="auto",
        choices=("auto", "yes", "no"),
        help="keep config 0 in each top 5: auto (as the model's own rule says), yes, no",
    )
    parser.add_argument("--no_progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.top_k < 1:  # before TensorFlow loads
        parser.error(f"--top_k must be at least 1, got {args.top_k}")
    return args


def upstream_root(script_dir: Path | None = None, cwd: Path | None = None) -> Path | None:
    """The `tpu_graphs` checkout this script runs in (cwd first, then its folder), if any."""
    script_dir = script_dir or Path(__file__).resolve().parent
    for candidate in (cwd or Path.cwd(), script_dir):
        if (candidate / UPSTREAM_MODELS).is_file():
            return candidate.resolve()
    return None


def _expand(path: str) -> str:
    return os.path.expanduser(path) if path else path


def run(args: argparse.Namespace) -> str:
    """Writes the predictions CSV; returns the line to print."""
    from tpu_tiles_models import predict

    root = upstream_root()
    path, rows = predict.predict_to_csv(
        _expand(args.dir),
        _expand(args.data_root),
        args.out,
        top_k=args.top_k,
        keep_default=args.keep_default,
        cache_dir=_expand(args.cache_dir) or None,
        models_path=root,  # None: the package's own models.py
        progress=not args.no_progress,
    )
    models = root / UPSTREAM_MODELS if root else "tpu_tiles_models' models.py"
    return f"wrote {path} ({rows} kernels; models from {models})"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        from tpu_tiles_models import interrupts, tf_start
        from tpu_tiles_models.errors import UserError
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        # Ctrl-C, SIGTERM, SIGHUP: noted, and acted on at the next safe point (between
        # kernels, before the CSV is put in place), so nothing is left half-written.
        with interrupts.deferred():
            tf_start.load_tensorflow()  # without TensorFlow's start-up notices on stderr
            line = run(args)
    except KeyboardInterrupt:
        how = "interrupted" if interrupts.name() == "SIGINT" else f"stopped by {interrupts.name()}"
        print(f"{PROG}: {how}; {args.out} not written", file=sys.stderr)
        return interrupts.exit_status()
    except UserError as e:
        print(f"{PROG}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
