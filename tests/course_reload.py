"""The course's reload of a hand-in, as a script another stack's Python can run.

    python tests/course_reload.py MODEL_DIR DATA_ROOT

What the course's `tiles_gen_predictions_csv.py` does, step by step:
`tf.keras.models.load_model(MODEL_DIR)`, a fresh model of the run file's class built from its
stored `model_kwargs_json` alone and given one `forward`, the in-order copy of the loaded
trainable variables, then each test kernel's 5 lowest indices of one `forward` on all its
configs (a plain argsort, zero-padded; no rule of ours applied on top). Prints
`{"tensorflow": version, "top5": {tile_id: [5 indices]}}` as JSON on its last line.
"""

from __future__ import annotations

import json
import sys

import tpu_tiles_models  # noqa: F401  (before TensorFlow: tf.keras is Keras 2 on every stack)

TOP = 5


def main(model_dir: str, data_root: str) -> dict:
    import tensorflow as tf

    from tpu_tiles_models import data, registry, runs
    from tpu_tiles_models.runs import TrainedRun

    run = TrainedRun.open(model_dir)
    loaded = runs.load_saved_model(model_dir)  # the course's tf.keras.models.load_model
    dataset = run.dataset(data_root, progress=False)
    test, stats = dataset.test, dataset.stats
    args = run.args
    model = registry.build_model(
        args["model"], args["configs"], stats.num_ops, args["model_kwargs_json"], run.module
    )
    model.forward(data.kernel_graph(test, 0, stats), test.num_configs(0))
    assert len(model.trainable_variables) == len(loaded.trainable_variables)
    for mine, saved in zip(model.trainable_variables, loaded.trainable_variables):
        assert mine.shape == saved.shape
        mine.assign(saved)
    top5 = {}
    for i, tile_id in enumerate(test.tile_ids):
        n = test.num_configs(i)
        scores = tf.squeeze(model.forward(data.kernel_graph(test, i, stats), n), 0)
        order = tf.concat([tf.argsort(scores), tf.zeros([TOP], tf.int32)], axis=0)[:TOP]
        top5[tile_id] = order.numpy().tolist()
    return {"tensorflow": tf.__version__, "top5": top5}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:3])))
