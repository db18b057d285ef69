"""`TrainArgs`: every training flag as one typed, frozen value, from a command line (absl's
syntax, as upstream's `tiles_train.py`), a dict (a run file's `args`, a sweep's point) or code.

It gives upstream's 15-field args dict and the run's hash `h` (upstream's md5, with our options
not at their defaults in it: `identity`). No TensorFlow: a sweep driver hashes without it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from typing import Any, Mapping, Sequence

from absl import flags as absl_flags

from tpu_tiles_models import defaults, formats
from tpu_tiles_models.errors import FlagError

DEFAULT_LOSSES = "ListMLELoss:1,MSE:0.02"
# Where our options that shape a run go in the hashed dict (absent when all are at defaults).
# Must not change: it is inside every run's hash, so finished runs would no longer be found.
HASH_KEY = "tpu_tiles"
# Options that only say where things are cached or shown, or how a rerun treats an earlier
# run: two runs that differ only in these are the same run (same hash).
NOT_IN_HASH = frozenset({"cache_dir", "no_progress", "tensorboard", "overwrite"})
# Options added after sweeps began, at their "as before" value left out of sweep points' names.
ADDED_FLAGS: dict[str, Any] = {}
# Options the benchmark suite rejected, with the results file that says why: a run file that
# records one reloads without it (its hash never held it), a command line is refused.
REMOVED_FLAGS = {
    "head_configs": "benchmarks/results/suite_head.md",
    "head_share": "benchmarks/results/suite_head.md",
    # `train --seeds --ensemble`: ensembles of seeds, what `sweep --ensemble_top` also makes.
    "seeds": "benchmarks/results/ensemble_bench.md",
    "ensemble": "benchmarks/results/ensemble_bench.md",
    # A stratified fraction of the validation kernels each epoch: every kernel on 32 configs
    # chose as well at a twentieth of the work.
    "score_sample": "benchmarks/results/selection.md",
    # Kernels with fewer than --configs configs, their lists padded: only the rejected second
    # stage there trained with it, and no results file compares it with leaving them out.
    "pad_configs": "benchmarks/results/rerank_oof_all16.md",
}
# Losses removed the same way, every one that left `losses.LOSSES`: a run file that names
# one reads, training refuses it. (FastFirstListMLE's data set is not in this repository:
# docs/choosing.md records its verdict.)
REMOVED_LOSSES = {
    "LogMSE": "benchmarks/results/suite_logmse.md",
    "LambdaNDCG": "benchmarks/results/suite_pilot.md",
    "ApproxNDCG": "benchmarks/results/suite_small_approxndcg.md",
    "StandardisedHinge": "benchmarks/results/suite_small_zhinge.md",
    "TopListMLE": "benchmarks/results/suite_pilot.md",
    "SlowdownSoftmax": "benchmarks/results/suite_small_softmax.md",
    "FastFirstListMLE": "docs/choosing.md",
}


def removed(what: str, results: str) -> FlagError:
    """The one refusal of a removed flag or loss, naming the results file that says why."""
    return FlagError(
        f"{what} was removed (the benchmark suite rejected it: {results}); leave it out"
    )


# numpy's and TensorFlow's seeds are unsigned 32-bit integers.
MAX_SEED = 2**32 - 1

# Upstream's `TrainArgs` fields in its order, and the name each has here (= our flag name).
# Must not change: upstream's hash of them names every run's files.
UPSTREAM_FIELDS = {
    field: {"batch_size": "batch", "learning_rate": "lr"}.get(field, field)
    for field in (
        "epochs eval_every batch_size configs early_stop losses learning_rate clip_norm model "
        "model_kwargs_json test_mode out_dir results_csv validate_batches run_id"
    ).split()
}


def _flag(default: Any, help: str, choices: Sequence[str] = (), at_least: int | None = None) -> Any:
    """A dataclass field that is also a flag; a function `default` is called for each value."""
    metadata = {"help": help, "choices": tuple(choices), "at_least": at_least}
    if callable(default):
        return dataclasses.field(default_factory=default, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class TrainArgs:
    """Every option of one training run, by flag name: upstream's first, with its defaults;
    invalid values raise `FlagError` naming the flag."""

    # Upstream's flags (tiles_train.py / train_args.py).
    model: str = _flag("EarlyJoinSAGE", "class name in models.py (see: tpu-tiles models)")
    model_kwargs_json: str = _flag("{}", "JSON object of constructor kwargs")
    epochs: int = _flag(100, "training epochs", at_least=1)
    eval_every: int = _flag(5, "deprecated upstream; kept because upstream hashes it", at_least=1)
    early_stop: int = _flag(20, "stop after this many epochs without gain (0: never)", at_least=0)
    losses: str = _flag(DEFAULT_LOSSES, 'weighted losses, e.g. "ListMLELoss:1,MSE:0.02"')
    lr: float = _flag(1e-3, "Adam learning rate")
    clip_norm: float = _flag(1e-3, "gradient clipping norm")
    configs: int = _flag(10, "configs sampled per kernel per step", at_least=2)
    batch: int = _flag(10, "kernels per step", at_least=1)
    validate_batches: int = _flag(
        -1,
        ">0: validate on this many batches per epoch and score their kernels on every config "
        "(instead of --score_configs); -1: every batch",
    )
    test_mode: str = _flag(
        "predictions", "rank the test split or score it", ("predictions", "metrics")
    )
    out_dir: str = _flag(defaults.OUT_DIR, "where the artifacts go")
    results_csv: str = _flag("", "test predictions CSV (default <out_dir>/results_<ms>.csv)")
    run_id: str = _flag("", "a tag for the run; part of the hash")
    data_root: str = _flag(
        defaults.data_root,
        "folder holding train/ valid/ test/ (the competition's copy under /kaggle/input when "
        "only that exists)",
    )
    cache_dir: str = _flag(defaults.CACHE_DIR, "cache of loaded arrays ('': none)")
    toy_data: bool = _flag(False, "first 100 files of each split")
    # Ours.
    skip_bad: bool = _flag(False, "leave out unreadable npz files, with a warning")
    models: str = _flag("", "models.py file or upstream checkout to take classes from ('': ours)")
    lr_schedule: str = _flag("cosine", "learning-rate schedule", ("cosine", "constant"))
    select_by: str = _flag(
        "score",
        "keep weights by Kaggle-form score (ours) or OPA (upstream's)",
        ("score", "opa"),
    )
    score_configs: int = _flag(
        32,
        "each epoch, at most this many configs of each validation kernel, evenly spread in file "
        "order, the same every epoch (0: all; 32 chose epochs as well as 128 at under a third of "
        "the work, benchmarks/results/selection.md)",
        at_least=0,
    )
    score_candidates: int = _flag(
        3, "the epochs with the best sample scores, rescored on every config at the end", at_least=1
    )
    seed: int = _flag(0, "seed of weights and sampling")
    strategy: str = _flag(
        "default",
        "tf.distribute strategy: mirrored (this host's GPUs), multiworker (TF_CONFIG's hosts)",
        ("default", "mirrored", "multiworker"),
    )
    tensorboard: str = _flag("", "write per-epoch TensorBoard scalars here ('': none)")
    no_progress: bool = _flag(False, "no progress bars (logs, CI)")
    overwrite: bool = _flag(
        False,
        "replace a finished run of the same options (same hash) once this one has finished; "
        "without it such a rerun is refused before any work",
    )

    def __post_init__(self) -> None:
        # Types, then ranges and choices; each message names the flag and what it accepts.
        for f in dataclasses.fields(self):
            want, value = FLAG_TYPES[f.name], getattr(self, f.name)
            fits = isinstance(value, want) or (want is float and isinstance(value, int))
            if not fits or (isinstance(value, bool) and want is not bool):
                raise FlagError(f"--{f.name} must be {want.__name__}, got {value!r}")
        for f in dataclasses.fields(self):
            choices, value = f.metadata["choices"], getattr(self, f.name)
            low = f.metadata["at_least"]
            if choices and value not in choices:
                raise FlagError(f"--{f.name} must be one of {', '.join(choices)}, got {value!r}")
            if low is not None and value < low:
                raise FlagError(f"--{f.name} must be at least {low}, got {value}")
        for name in ("lr", "clip_norm"):  # inf or nan makes the loss NaN from the first step
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise FlagError(f"--{name} must be positive and finite, got {value}")
        loss_weights(self.losses)
        if not 0 <= self.seed <= MAX_SEED:
            raise FlagError(f"--seed must be in 0..{MAX_SEED}, got {self.seed}")
        if self.validate_batches == 0:
            raise FlagError("--validate_batches must be -1 (all) or positive, got 0")
        if not self.model:
            raise FlagError("--model must name a class, e.g. --model=ResidualSAGE")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainArgs:
        """From our field names or upstream's (`batch_size`), e.g. a run file's; `REMOVED_FLAGS`
        are left out. An unknown key raises `FlagError`."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in values.items():
            name = UPSTREAM_FIELDS.get(key, key)
            if name in REMOVED_FLAGS:
                continue
            if name not in names:
                raise FlagError(
                    f"unknown training option {key!r}; known: {', '.join(sorted(names))}"
                )
            kwargs[name] = value
        return cls(**kwargs)

    @classmethod
    def from_argv(cls, argv: Sequence[str], prog: str = "tpu-tiles train") -> TrainArgs:
        """Parses `argv` (no program name) by absl's rules (`--flag=v`, `--flag v`, `--flag`,
        `--noflag`); `--help` prints the flags and exits 0. Anything wrong raises `FlagError`."""
        if any(a in ("-h", "--help", "-help", "--helpfull") for a in argv):
            print(help_text(prog))
            raise SystemExit(0)
        for arg in argv:
            name = arg.lstrip("-").partition("=")[0]
            if arg.startswith("-") and name in REMOVED_FLAGS:
                raise removed(f"--{name}", REMOVED_FLAGS[name])
        values = absl_flags.FlagValues()  # never absl's global FLAGS
        define = {
            bool: absl_flags.DEFINE_boolean,
            int: absl_flags.DEFINE_integer,
            float: absl_flags.DEFINE_float,
            str: absl_flags.DEFINE_string,
        }
        defaults = cls()
        for f in dataclasses.fields(cls):
            default, help = getattr(defaults, f.name), f.metadata["help"]
            if f.metadata["choices"]:
                choices = list(f.metadata["choices"])
                absl_flags.DEFINE_enum(f.name, default, choices, help, flag_values=values)
            else:
                define[FLAG_TYPES[f.name]](f.name, default, help, flag_values=values)
        try:
            rest = values([prog, *argv])
        except absl_flags.Error as e:
            raise FlagError(f"{' '.join(str(e).split())} (see {prog} --help)") from None
        if len(rest) > 1:
            raise FlagError(f"unexpected argument {rest[1]!r}; flags look like --epochs=10")
        return cls.from_dict({f.name: values[f.name].value for f in dataclasses.fields(cls)})

    def replace(self, **changes: Any) -> TrainArgs:  # validated again
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_argv(self) -> list[str]:
        """The flags that differ from the defaults, as `--name=value` (booleans lowercase)."""
        defaults = TrainArgs().to_dict()
        changed = {k: v for k, v in self.to_dict().items() if v != defaults[k]}
        return [f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in changed.items()]

    def resolved(self, now_ms: int | None = None) -> TrainArgs:
        """With `results_csv` filled in as upstream does: `<out_dir>/results_<ms>.csv`."""
        if self.results_csv:
            return self
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        csv = os.path.join(os.path.expanduser(self.out_dir), formats.results_csv_name(ms))
        return self.replace(results_csv=csv)

    def upstream_args(self) -> dict[str, Any]:
        """Upstream's `TrainArgs._asdict()`: its 15 fields, in its order and names."""
        if not self.results_csv:
            raise ValueError("upstream_args() needs results_csv: call resolved() first")
        return {up: getattr(self, ours) for up, ours in UPSTREAM_FIELDS.items()}

    def identity(self) -> dict[str, Any]:
        """Our options that shape the run (not `NOT_IN_HASH`) and are not at their defaults:
        what `hash` adds to upstream's fields."""
        defaults = TrainArgs()
        ours = set(FLAG_TYPES) - set(UPSTREAM_FIELDS.values()) - NOT_IN_HASH
        return {
            n: getattr(self, n) for n in sorted(ours) if getattr(self, n) != getattr(defaults, n)
        }

    def hash(self) -> str:
        """The run's `h` (`args_hash`)."""
        return args_hash(self.upstream_args(), self.identity())


def loss_weights(spec: str) -> list[tuple[str, float]]:
    """`--losses` (upstream's `"ListMLELoss:1,MSE:0.02"`) as (name, weight) pairs: its syntax
    and weights (finite, at least 0, and a finite sum above 0: training divides by it); which
    names exist is `losses.parse_losses`' to say (it needs TensorFlow)."""
    pairs = []
    for item in spec.split(","):
        name, _, text = item.strip().partition(":")
        try:
            weight = float(text)
        except ValueError:
            raise FlagError(
                f"--losses: weight of {name!r} must be a number, e.g. {name}:1 (got {item!r})"
            ) from None
        if not (math.isfinite(weight) and weight >= 0):
            raise FlagError(
                f"--losses: weight of {name!r} must be a finite number of at least 0, got "
                f"{text!r} in {spec!r}"
            )
        pairs.append((name, weight))
    total = sum(w for _, w in pairs)
    if not total > 0:
        raise FlagError(
            f"--losses: the weights in {spec!r} sum to 0; give at least one loss a weight "
            "above 0, e.g. ListMLELoss:1"
        )
    if not math.isfinite(total):
        raise FlagError(f"--losses: the weights in {spec!r} sum past a float's range; scale them")
    return pairs


def args_hash(upstream_args: Mapping[str, Any], identity: Mapping[str, Any] | None = None) -> str:
    """md5 hex of `json.dumps(args, sort_keys=True)` over upstream's 15 fields (upstream's
    `compute_hash`), with `identity` under `HASH_KEY` if it is not empty. Must not change:
    the hash names every run's files, so a finished run is found (and reused) by it."""
    missing = [f for f in UPSTREAM_FIELDS if f not in upstream_args]
    if missing:
        raise ValueError(f"args lack upstream fields: {', '.join(missing)}")
    fields: dict[str, Any] = {f: upstream_args[f] for f in UPSTREAM_FIELDS}
    if identity:
        fields[HASH_KEY] = dict(identity)
    return hashlib.md5(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def help_text(prog: str = "tpu-tiles train") -> str:
    """`--help` output: every flag with its default and meaning, upstream's first."""
    lines = [f"usage: {prog} [--flag=value ...]  (absl syntax; booleans: --flag / --noflag)", ""]
    defaults = TrainArgs()
    for f in dataclasses.fields(TrainArgs):
        choices = f" {{{','.join(f.metadata['choices'])}}}" if f.metadata["choices"] else ""
        lines.append(f"  --{f.name}{choices}  (default: {getattr(defaults, f.name)!r})")
        lines.append(f"      {f.metadata['help']}")
    return "\n".join(lines)


# Every training flag's Python type (the annotations are strings: `from __future__`).
_TYPES = {"int": int, "float": float, "str": str, "bool": bool}
FLAG_TYPES: dict[str, type] = {f.name: _TYPES[f.type] for f in dataclasses.fields(TrainArgs)}
# The flags absl parses as booleans: `--flag`, `--noflag`, never a separate value.
BOOLEAN_FLAGS = frozenset(name for name, kind in FLAG_TYPES.items() if kind is bool)


def flag_named(name: str) -> str | None:
    """The training flag that `--name` sets (`noflag` sets boolean `flag`), or None."""
    if name in FLAG_TYPES:
        return name
    if name.startswith("no") and name[2:] in BOOLEAN_FLAGS:
        return name[2:]
    return None
