"""The sweep in TensorBoard's HParams dashboard: the experiment (its axes and metrics) in
`<tensorboard>/`, and each ok point's session in `<tensorboard>/run_<h>/`, beside the per-epoch
scalars the trainer wrote there. TensorFlow is imported when the summaries are written.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from tpu_tiles_models import export, files
from tpu_tiles_models.sweep.leaderboard import Row

HPARAMS_SUFFIX = ".sweep_hparams"  # the events files written here; replaced on every sweep


def write_hparams(tensorboard: str, rows: Sequence[Row], axes: Sequence[str]) -> None:
    """The HParams dashboard's experiment (in `tensorboard/`) and each ok point's session
    (in `tensorboard/run_<h>/`, beside the trainer's per-epoch scalars); idempotent."""
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp

    ok = [r for r in rows if r.ok]
    if not ok:
        return
    root = files.expand(tensorboard)
    hparams = [
        hp.HParam(a, _domain(hp, [r.point.values[a] for r in ok if a in r.point.values]))
        for a in axes
    ]
    metrics = [
        hp.Metric(f"final/{m}") for m in ("score", "top1_error", "top5_error", "top10_error", "opa")
    ]
    metrics += [hp.Metric(m) for m in ("val_score", "val_opa", "train_loss")]
    for old in files.glob(files.join(root, f"*{HPARAMS_SUFFIX}")):
        files.remove(old)
    with tf.summary.create_file_writer(root, filename_suffix=HPARAMS_SUFFIX).as_default():
        hp.hparams_config(hparams=hparams, metrics=metrics)
    for r in ok:
        run_dir = export.tensorboard_dir(root, r.point.hash)
        if files.glob(files.join(run_dir, f"*{HPARAMS_SUFFIX}")):
            continue
        values = {a: _hparam_value(r.point.values[a]) for a in axes if a in r.point.values}
        with tf.summary.create_file_writer(run_dir, filename_suffix=HPARAMS_SUFFIX).as_default():
            hp.hparams(values, trial_id=r.point.key)
            finals = dict(
                score=r.score, top1_error=r.top1, top5_error=r.top5, top10_error=r.top10, opa=r.opa
            )
            for name, value in finals.items():
                if value is not None:
                    tf.summary.scalar(f"final/{name}", value, step=r.best_epoch or 0)


def _hparam_value(value: Any) -> bool | float | str:
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return json.dumps(value)


def _domain(hp, values: list[Any]):
    """A Discrete domain of the values seen (HParams needs one type: bool, float or str)."""
    typed = sorted({_hparam_value(v) for v in values}, key=str)
    kinds = {type(v) for v in typed}
    if len(kinds) > 1:
        typed = sorted({str(v) for v in typed})
    return hp.Discrete(typed)
