"""A whole synthetic tree: tile ids per split, one kernel per npz file (`tpu-tiles inspect`
reports on it)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import threading
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from tpu_tiles_models import files, interrupts, locks, pipelines, safe
from tpu_tiles_models.errors import FlagError, UserError
from tpu_tiles_models.formats import SPLITS, TILE_PREFIX
from tpu_tiles_models.synthetic.families import DEFAULT_FAMILY, Family, get_family
from tpu_tiles_models.synthetic.graph import pick

# Upstream tiles_train.py defaults: validation keeps kernels with >= --configs configs and
# batches them --batch at a time, dropping the remainder; with no full batch Keras reports
# no val_loss and the trainer fails with KeyError: 'val_loss'.
UPSTREAM_CONFIGS = 10
UPSTREAM_BATCH = 10
# The real tile:xla collection's split sizes (what `tpu-tiles synth --scale full` writes).
REAL_SPLIT_SIZES = {"train": 5709, "valid": 676, "test": 844}
# Below this many kernels one process is faster: the multi-processing DirectRunner takes about
# 5 s to start its workers, and a kernel takes 4-15 ms to make and write (README, full scale).
PARALLEL_MIN_KERNELS = 1000
# Kernels per Beam element: small enough to spread a heavy-tailed cost over the workers.
_CHUNK = 16
# Every zip member gets this timestamp, so a kernel's file is a function of its content only
# (np.savez stamps the current time, which made two identical data sets differ in bytes).
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)

Item = tuple[str, int, str, tuple[float, ...]]  # (split, index, tile id, kind weights)
T = TypeVar("T")


class DataSetExistsError(UserError, FileExistsError):
    """The output folder already holds a data set and `--overwrite` was not given."""


class ValidationSplitWarning(UserWarning):
    """The validation split is too small for upstream's trainer to validate on."""


# Benchmark groups: model names with their kernel-kind mix (conv, dot, reduce, elementwise).
BENCHMARK_GROUPS: dict[str, tuple[list[str], tuple[float, float, float, float]]] = {
    "convnet": (
        "resnet50 resnet101 inception_v3 efficientnet_b0 efficientnet_b7 mobilenet_v2 "
        "mask_rcnn retinanet unet3d densenet121 shapemask vgg16 alexnet".split(),
        (0.62, 0.06, 0.1, 0.22),
    ),
    "transformer": (
        "bert_base bert_large transformer_lm t5_small gpt2_medium vit_b16 wmt_transformer "
        "albert xlnet".split(),
        (0.12, 0.46, 0.18, 0.24),
    ),
    "recsys": ("ncf dlrm wide_deep rnn_lm lstm_translate deepfm".split(), (0.05, 0.4, 0.2, 0.35)),
}


# (programs, odds of a kernel) per split and group, as in the real collection: train kernels
# come from 61 programs of very uneven size, valid from 7 not in train, test from its own,
# mixed like valid. Fixed, not drawn: convnet kernels hold far more configs, so a drawn mix
# would swing a split's configs-per-kernel histogram from seed to seed.
PROGRAMS = {
    "train": {"convnet": (37, 0.6), "transformer": (18, 0.3), "recsys": (6, 0.1)},
    "valid": {"convnet": (4, 0.72), "transformer": (3, 0.28)},
    "test": {"convnet": (5, 0.72), "transformer": (3, 0.28)},
}
PROGRAM_SIGMA = 1.1  # lognormal spread of program sizes


def _programs(seed: int) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """Disjoint `(name, weight)` programs per split and group (a kernel's odds: the weight)."""
    rng = np.random.default_rng([seed, 7919])
    names: set[str] = set()
    out: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for split, quota in PROGRAMS.items():
        out[split] = {}
        for group, (n, _) in quota.items():
            programs: list[tuple[str, float]] = []
            while len(programs) < n:
                model = str(pick(rng, BENCHMARK_GROUPS[group][0]))
                mode = str(pick(rng, ("train", "inference")))
                name = f"{model}_{mode}_batch_{int(pick(rng, (1, 8, 16, 32, 64, 128, 256)))}"
                if name not in names:
                    names.add(name)
                    programs.append((name, float(np.exp(PROGRAM_SIGMA * rng.standard_normal()))))
            out[split][group] = programs
    return out


def _split_plan(counts: dict[str, int], seed: int, test_ids: list[str] | None) -> list[Item]:
    """`(split, index, tile_id, kind weights)` for every kernel, deterministic in `seed`."""
    programs = _programs(seed)
    plan, seen = [], set(test_ids or ())  # given test ids stand; a generated id avoids them
    for s_idx, split in enumerate(SPLITS):
        rng = np.random.default_rng([seed, 104729, s_idx])
        groups = list(PROGRAMS[split])
        group_odds = np.asarray([PROGRAMS[split][g][1] for g in groups])
        for i in range(counts[split]):
            group = groups[int(rng.choice(len(groups), p=group_odds))]
            names, weights = zip(*programs[split][group])
            j = int(rng.choice(len(names), p=np.asarray(weights) / sum(weights)))
            if split == "test" and test_ids is not None:
                tid = test_ids[i]  # distinct (`read_test_ids`)
            else:
                tid = rng.bytes(16).hex() if split == "test" else f"{names[j]}_{rng.bytes(8).hex()}"
                while tid in seen:  # never two kernels with one id
                    tid += "0"
                seen.add(tid)
            plan.append((split, i, tid, BENCHMARK_GROUPS[group][1]))
    return plan


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """`np.savez`'s layout with a fixed timestamp."""
    with zipfile.ZipFile(path, "w", allowZip64=True) as z:
        for key, value in arrays.items():
            member = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_TIME)
            with z.open(member, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)


def read_test_ids(path: str | Path) -> list[str]:
    """Tile ids (without `tile:xla:`) of a sample_submission-style csv, in file order."""
    try:
        text = files.read_bytes(path).decode("utf-8")  # a named pipe: refused, not waited on
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        why = getattr(err, "strerror", None) or err.__class__.__name__
        raise FlagError(
            f"--test_ids_from {path}: cannot read it ({why}); give the competition's "
            "sample_submission.csv"
        ) from None
    ids = [r[0][len(TILE_PREFIX) :] for r in rows if r and r[0].startswith(TILE_PREFIX)]
    if not ids:
        raise FlagError(
            f"--test_ids_from {path} has no {TILE_PREFIX}* rows; give the competition's "
            "sample_submission.csv"
        )
    first: dict[str, int] = {}
    for number, tile_id in enumerate(ids, 1):
        where = f"--test_ids_from {path}: id {number}, {TILE_PREFIX + tile_id!r},"
        why = _not_a_name(tile_id)
        if why:
            raise FlagError(
                f"{where} {why}; each id names a file in test/, so it must be a plain name (no / "
                "or \\, no leading dot); give the competition's sample_submission.csv"
            )
        if tile_id in first:  # one file per id: a second kernel would need an invented one
            raise FlagError(
                f"{where} repeats id {first[tile_id]}; each id names one test kernel, so keep "
                "one row per id (the competition's sample_submission.csv has each once)"
            )
        first[tile_id] = number
    return ids


def _not_a_name(tile_id: str) -> str:
    """Why `tile_id` cannot name `test/<tile_id>.npz` ('' if it can): a separator or `..`
    would write outside OUT, a leading dot a hidden file that no reader sees."""
    if not tile_id:
        return "is empty after the prefix"
    if "/" in tile_id or "\\" in tile_id or os.path.isabs(tile_id):
        return "holds a path separator"
    if tile_id.startswith("."):
        return "starts with a dot (a hidden file, or a parent folder)"
    if not tile_id.isprintable():
        return "holds a control character"
    return ""


def existing_npz(out: Path) -> list[Path]:
    """The npz files of a data set already in `out/{train,valid,test}/`."""
    return [p for split in SPLITS for p in sorted((out / split).glob("*.npz"))]


def usable_valid_kernels(out: str | Path) -> int:
    """Validation kernels with at least `UPSTREAM_CONFIGS` configs (those upstream keeps)."""
    count = 0
    for path in sorted(Path(out, "valid").glob("*.npz")):
        with np.load(path) as d:
            count += len(d["config_runtime"]) >= UPSTREAM_CONFIGS
    return count


def generate(
    out_dir: str | Path,
    *,
    train: int = 300,
    valid: int = 60,
    test: int = 60,
    seed: int = 0,
    max_configs: int | None = None,
    min_configs: int = 2,
    family: str = DEFAULT_FAMILY,
    test_ids_from: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
    num_workers: int | None = None,
) -> dict[str, Any]:
    """Writes a data set `out_dir/{train,valid,test}/<tile_id>.npz`; test runtimes are zeros.

    Each kernel is written under a hidden name beside its place and all are put in place when
    all are done (`safe.Stage`), so an error or Ctrl-C leaves `out_dir` as it was. Kernel `i`
    of a split has its own generator seeded with `(seed, split, i)`: the files do not depend on
    `num_workers` (1: this process; more: a Beam pipeline; None: `default_workers`).
    `max_configs` None is `autotuner.MAX_CONFIGS`; `test_ids_from` (a sample_submission.csv)
    sets the test split's ids. Returns the counts and settings `tpu-tiles synth` prints.

    Raises:
      FlagError: a bad count, seed, size or family, or `out_dir` clashing with an input.
      DataSetExistsError: `out_dir` holds a data set already, without `overwrite`.
    """
    maker = get_family(family)
    counts = {"train": train, "valid": valid, "test": test}
    for split, n in counts.items():
        if n < 0:
            raise FlagError(f"--{split} must be a kernel count >= 0, got {n}")
    if seed < 0:
        raise FlagError(f"--seed must be >= 0, got {seed}")
    if min_configs < 1:
        raise FlagError(f"min_configs must be >= 1, got {min_configs}")
    if max_configs is not None and max_configs < min_configs:
        raise FlagError(
            f"--max_configs must be at least {min_configs} (the fewest configs a kernel gets), "
            f"got {max_configs}"
        )
    if num_workers is not None and num_workers < 1:
        raise FlagError(f"--num_workers must be at least 1, got {num_workers}")
    test_ids = read_test_ids(test_ids_from) if test_ids_from is not None else None
    if test_ids is not None:
        counts["test"] = len(test_ids)
    if not sum(counts.values()):
        raise FlagError("--train, --valid and --test are all 0: nothing to generate")
    workers = num_workers or default_workers(sum(counts.values()))
    out = Path(out_dir)
    with locks.claim(out, flag="OUT", command="synth"):  # one synth into OUT at a time
        old = existing_npz(out) if out.is_dir() else []  # replaced by the new set
        if old and not overwrite:
            raise DataSetExistsError(
                f"{out} already holds a data set ({len(old)} npz files in {{train,valid,test}}/); "
                "pass --overwrite to replace it, or choose another folder"
            )
        inputs = [safe.Input(test_ids_from, "--test_ids_from file")] if test_ids_from else []
        outs = [safe.Output(out, "OUT", folder=True, adds_to=True)]
        outs += [safe.Output(out / split, "OUT", folder=True) for split in SPLITS]
        safe.claim(outs, inputs)  # before any kernel; removes what killed runs left there
        plan = _split_plan(counts, seed, test_ids)
        with safe.Stage() as stage:  # each kernel beside its place, all put in place at the end
            job = _Job(str(out), stage.tag, seed, maker, max_configs, min_configs)
            for split in SPLITS:
                stage.make_dirs(out / split, flag="OUT")
            tmps = [stage.path(job.place(item), flag="OUT") for item in plan]
            interrupts.check()  # a Ctrl-C while the plan was made
            try:
                with _progress_bar(tmps, progress):
                    if workers > 1:
                        total_configs = _write_in_beam(job, plan, workers)
                    else:
                        total_configs = 0
                        for item in plan:
                            total_configs += job.write(item)
                            interrupts.check()  # the command line's Ctrl-C: between kernels
            finally:
                files.remove(job.stop)
        new = {job.place(item) for item in plan}
        for path in old:  # the replaced set's other kernels
            if path not in new:
                path.unlink(missing_ok=True)
        usable, valid = usable_valid_kernels(out), counts["valid"]
        if usable < UPSTREAM_BATCH:  # upstream's trainer would get no validation batch
            fix = f"--valid {max(2 * UPSTREAM_BATCH, 2 * valid)} or more"
            if max_configs is not None and max_configs < UPSTREAM_CONFIGS:
                fix = f"--max_configs {UPSTREAM_CONFIGS} or more"
            warnings.warn(
                f"only {usable} of {valid} validation kernels have >= {UPSTREAM_CONFIGS} "
                f"configs; upstream's tiles_train.py (--configs {UPSTREAM_CONFIGS} --batch "
                f"{UPSTREAM_BATCH}) needs {UPSTREAM_BATCH} or stops with KeyError: 'val_loss' "
                f"(use {fix})",
                ValidationSplitWarning,
                stacklevel=2,
            )
        return {
            **counts,
            "kernels": sum(counts.values()),
            "configs": total_configs,
            "out_dir": str(out),
            "family": family,
            "seed": seed,
            "usable_valid": usable,
            "replaced": len(old),
            "workers": workers,
        }


def default_workers(kernels: int) -> int:
    """Worker processes for `kernels` kernels: the cores from `PARALLEL_MIN_KERNELS` on."""
    return pipelines.cores() if kernels >= PARALLEL_MIN_KERNELS else 1


@dataclass(frozen=True)
class _Job:
    """What every kernel of one `generate` call shares (Beam pickles it: the family's
    functions by module name, so a worker needs no registry): each kernel is written under
    the hidden name of `safe.Stage` `tag` beside its place in `root`."""

    root: str
    tag: str
    seed: int
    family: Family
    max_configs: int | None
    min_configs: int

    @property
    def stop(self) -> Path:
        """Written on Ctrl-C; the workers then skip their remaining kernels."""
        return safe.hidden_path(Path(self.root, "synth-stop"), tag=self.tag)

    def place(self, item: Item) -> Path:
        split, _, tile_id, _ = item
        return Path(self.root, split, f"{tile_id}.npz")

    def write(self, item: Item) -> int:
        """Makes kernel `item` from its own generator and writes it; returns its configs."""
        split, i, _, weights = item
        if self.stop.exists():  # Ctrl-C: the run will be removed
            return 0
        rng = np.random.default_rng([self.seed, SPLITS.index(split), i, 1])
        arrays = self.family.make_kernel(
            rng,
            kind_weights=weights,
            labelled=split != "test",
            max_configs=self.max_configs,
            min_configs=self.min_configs,
        )
        _write_npz(safe.hidden_path(self.place(item), tag=self.tag), arrays)
        return len(arrays["config_feat"])


@contextlib.contextmanager
def _progress_bar(paths: list[Path], show: bool) -> Iterator[None]:
    """A progress bar of the kernels written at `paths`, counted by a thread (Beam's workers
    write them in other processes)."""
    if not show:
        yield
        return
    from tqdm import tqdm

    with tqdm(total=len(paths), desc="synthetic kernels", unit="kernel") as bar:
        done = threading.Event()

        def poll() -> None:
            while not done.wait(0.5):
                bar.update(sum(map(os.path.exists, paths)) - bar.n)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            bar.update(sum(map(os.path.exists, paths)) - bar.n)


def _write_chunk(chunk: str, job: _Job) -> int:
    """Beam's Map: writes a JSON list of plan items; counts their configs in a Beam counter."""
    from apache_beam.metrics import Metrics

    total = sum(job.write((s, i, t, tuple(w))) for s, i, t, w in json.loads(chunk))
    Metrics.counter("synth", "configs").inc(total)
    return total


def _write_in_beam(job: _Job, plan: list[Item], workers: int) -> int:
    """`Create(chunks) | Reshuffle | Map(_write_chunk)` on the multi-processing DirectRunner;
    returns the configs written. The Reshuffle spreads the chunks over the workers."""
    with pipelines.quiet_beam():
        import apache_beam as beam
        from apache_beam.metrics.metric import MetricsFilter
        from apache_beam.options.pipeline_options import PipelineOptions

        options = PipelineOptions(
            [],
            runner="DirectRunner",
            direct_running_mode="multi_processing",
            direct_num_workers=workers,
            default_sdk_harness_log_level="ERROR",
        )
        size = max(1, min(_CHUNK, math.ceil(len(plan) / workers)))
        chunks = [json.dumps(plan[k : k + size]) for k in range(0, len(plan), size)]
        pipeline = beam.Pipeline(options=options)
        _ = (
            pipeline
            | "Chunks" >> beam.Create(chunks)
            | "Spread" >> beam.Reshuffle()
            | "Write" >> beam.Map(_write_chunk, job=job)
        )
        result = _shielded(pipeline.run, job.stop)
        result.wait_until_finish()
        query = result.metrics().query(MetricsFilter().with_name("configs"))
    return int(sum(c.committed for c in query["counters"]))


def _shielded(run: Callable[[], T], stop: Path) -> T:
    """Runs `run` (the Beam pipeline) under `pipelines.run_shielded`: the first Ctrl-C writes
    `stop`, the workers skip their remaining kernels, and KeyboardInterrupt comes once the
    pipeline is done, so the caller removes a folder no one writes into."""
    interrupts.check()  # a Ctrl-C the command line noted before the shield went up
    value, pressed = pipelines.run_shielded(run, lambda previous: stop.touch())
    if pressed:
        raise KeyboardInterrupt
    return value
