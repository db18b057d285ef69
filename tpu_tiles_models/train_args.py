"""`TrainArgs`: every training flag as one typed, frozen value.

Built from a command line (absl's flag syntax, as upstream's `tiles_train.py` parses it: the
course handouts write `--toy_data=True`), from a dict (a run file's `args`, a sweep's grid
point) or in code. It produces upstream's 15-field args dict and the run's hash `h`, which
names its artifacts (`model_<h>/`, `run_<h>.jsonz`). With our own options at their defaults `h`
is upstream's own md5, so the names are the ones `tiles_train.py` would give; an option of ours
that is not at its default (`--seed=1`, `--data_root=D`) enters the hash too (`identity`), so
runs that differ in any option that shapes the run never share a name. This module imports no
TensorFlow: a sweep driver can build and hash arguments without it.
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
HASH_KEY = "tpu_tiles"
# Options that only say where things are cached or shown, or how a rerun treats an earlier
# run: two runs that differ only in these are the same run (same hash).
NOT_IN_HASH = frozenset({"cache_dir", "no_progress", "tensorboard", "overwrite"})
# Options added after runs and sweep points were first named, with the value that means "as
# before": at it, they are left out of what names a sweep point, so a sweep started before
# them resumes. (The run's hash `h` leaves every option at its default out already.) None now.
ADDED_FLAGS: dict[str, Any] = {}
# Options that were removed (the benchmark suite rejected them), with the results file that
# says why. They only chose which configs training drew, so a run file that records one
# reloads without it (at its default it never entered the hash or a sweep point's key, so
# names stay as they were); a command line that sets one is refused.
REMOVED_FLAGS = {
    "head_configs": "benchmarks/results/suite_head.md",
    "head_share": "benchmarks/results/suite_head.md",
}
# Losses removed the same way: a run file whose `--losses` names one still reads (the name is
# only resolved to a loss to train, `losses.parse_losses`), a new run that names one is refused.
REMOVED_LOSSES = {"LogMSE": "benchmarks/results/suite_logmse.md"}


def removed(what: str, results: str) -> FlagError:
    """The one refusal of a removed flag or loss: what it was and the results file that says
    why."""
    return FlagError(
        f"{what} was removed (the benchmark suite rejected it: {results}); leave it out"
    )


# numpy's and TensorFlow's seeds are unsigned 32-bit integers.
MAX_SEED = 2**32 - 1

# Upstream's `TrainArgs` fields in its order, and the name each has here (= our flag name).
UPSTREAM_FIELDS = {
    "epochs": "epochs",
    "eval_every": "eval_every",
    "batch_size": "batch",
    "configs": "configs",
    "early_stop": "early_stop",
    "losses": "losses",
    "learning_rate": "lr",
    "clip_norm": "clip_norm",
    "model": "model",
    "model_kwargs_json": "model_kwargs_json",
    "test_mode": "test_mode",
    "out_dir": "out_dir",
    "results_csv": "results_csv",
    "validate_batches": "validate_batches",
    "run_id": "run_id",
}


def _flag(default: Any, help: str, choices: Sequence[str] = ()) -> Any:
    """A dataclass field that is also a flag: its help text and, for enums, its choices. A
    function as `default` is called for each default value (the data root looks at the disk).
    """
    metadata = {"help": help, "choices": tuple(choices)}
    if callable(default):
        return dataclasses.field(default_factory=default, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _default(f: dataclasses.Field) -> Any:
    """A field's default value (calling its factory)."""
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


@dataclasses.dataclass(frozen=True)
class TrainArgs:
    """Every option of one training run; field names are the flag names.

    Upstream's flags come first, with upstream's defaults, so its command lines mean the same
    here; ours follow. Invalid values raise `FlagError` naming the flag.
    """

    # Upstream's flags (tiles_train.py / train_args.py).
    model: str = _flag("EarlyJoinSAGE", "class name in models.py (see: tpu-tiles models)")
    model_kwargs_json: str = _flag("{}", "JSON object of constructor kwargs")
    epochs: int = _flag(100, "training epochs")
    eval_every: int = _flag(5, "deprecated upstream; kept because upstream hashes it")
    early_stop: int = _flag(20, "stop after this many epochs without gain (0: never)")
    losses: str = _flag(DEFAULT_LOSSES, 'weighted losses, e.g. "ListMLELoss:1,MSE:0.02"')
    lr: float = _flag(1e-3, "Adam learning rate")
    clip_norm: float = _flag(1e-3, "gradient clipping norm")
    configs: int = _flag(10, "configs sampled per kernel per step")
    batch: int = _flag(10, "kernels per step")
    validate_batches: int = _flag(
        -1,
        ">0: validate on this many batches per epoch and score their kernels on every config "
        "(instead of --score_sample); -1: every batch",
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
        "keep weights by Kaggle-form score (ours), OPA (upstream's) or top50 (mean runtime of "
        "the top 50 over that of the 50 fastest: smoother)",
        ("score", "opa", "top50"),
    )
    score_sample: float = _flag(
        1.0,
        "fraction of validation kernels scored each epoch (a fixed sample, stratified by "
        "program and size; 1: all of them)",
    )
    score_configs: int = _flag(
        32,
        "each epoch, at most this many configs of each of those kernels, evenly spread in file "
        "order, the same every epoch (0: all; 32 chose epochs as well as 128 at under a third of "
        "the work, benchmarks/results/selection.md)",
    )
    score_candidates: int = _flag(
        3, "the epochs with the best sample scores, rescored on every config at the end"
    )
    pad_configs: bool = _flag(
        False,
        "train on kernels with fewer than --configs configs too, their lists padded with "
        "repeats that the losses leave out (default: left out, as upstream)",
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
        for f in dataclasses.fields(self):
            _check_type(f, getattr(self, f.name))
        _check_values(self)

    # -- construction --------------------------------------------------------------------

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainArgs:
        """From our field names or upstream's (`batch_size`, `learning_rate`), e.g. a run file.
        `REMOVED_FLAGS` are left out, whatever their value.

        Raises:
          FlagError: for an unknown key, naming the known ones.
        """
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
        """Parses `argv` (no program name) with absl's rules: `--flag=v`, `--flag v`, and for
        booleans `--flag`, `--noflag`, `--flag=true|false|1|0`.

        `-h`/`--help` prints the flags and exits 0.

        Raises:
          FlagError: unknown or removed flag, bad value, or stray positional argument, in one
            line.
        """
        if any(a in ("-h", "--help", "-help", "--helpfull") for a in argv):
            print(help_text(prog))
            raise SystemExit(0)
        for arg in argv:
            name = arg.lstrip("-").partition("=")[0]
            if arg.startswith("-") and name in REMOVED_FLAGS:
                raise removed(f"--{name}", REMOVED_FLAGS[name])
        values = _define_flags(cls())
        try:
            rest = values([prog, *argv])
        except absl_flags.Error as e:
            raise FlagError(f"{' '.join(str(e).split())} (see {prog} --help)") from None
        if len(rest) > 1:
            raise FlagError(f"unexpected argument {rest[1]!r}; flags look like --epochs=10")
        return cls.from_dict({f.name: values[f.name].value for f in dataclasses.fields(cls)})

    def replace(self, **changes: Any) -> TrainArgs:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # -- what gets recorded --------------------------------------------------------------

    @property
    def min_train_configs(self) -> int:
        """Train kernels with fewer configs are left out: `--configs`, or 2 with
        `--pad_configs` (a single config cannot be ranked)."""
        return 2 if self.pad_configs else self.configs

    def to_dict(self) -> dict[str, Any]:
        """Every field, by our names (JSON-ready)."""
        return dataclasses.asdict(self)

    def to_argv(self) -> list[str]:
        """The flags that differ from the defaults, as `--name=value` strings."""
        defaults = TrainArgs()
        return [
            f"--{f.name}={_format(getattr(self, f.name))}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(defaults, f.name)
        ]

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
        """Our options that shape the run and are not at their defaults (see `NOT_IN_HASH`),
        by flag name: what `hash` adds to upstream's fields."""
        defaults = TrainArgs()
        ours = set(FLAG_TYPES) - set(UPSTREAM_FIELDS.values()) - NOT_IN_HASH
        return {
            n: getattr(self, n) for n in sorted(ours) if getattr(self, n) != getattr(defaults, n)
        }

    def hash(self) -> str:
        """The run's `h`: upstream's `compute_hash` when `identity()` is empty, else the md5 of
        upstream's fields with `identity()` under `HASH_KEY` (see `args_hash`)."""
        return args_hash(self.upstream_args(), self.identity())


@dataclasses.dataclass(frozen=True)
class TrainCommand:
    """`tpu-tiles train`'s command line: the training options, and the runs to make of them.

    `--seeds=0,1,2` trains one run per seed instead of `--seed`; `--ensemble` then writes
    their ensemble as one more model (the command line dispatches to `ensemble.train_seeds`).
    """

    args: TrainArgs
    seeds: tuple[int, ...] = ()
    ensemble: bool = False

    def __post_init__(self) -> None:
        if self.ensemble and len(self.seeds) < 2:
            raise FlagError("--ensemble needs at least two --seeds, e.g. --seeds=0,1,2 --ensemble")

    @classmethod
    def from_argv(cls, argv: Sequence[str], prog: str = "tpu-tiles train") -> TrainCommand:
        """Parses `argv` like `TrainArgs.from_argv`, with `--seeds` and `--ensemble` too.

        Raises:
          FlagError: as `TrainArgs.from_argv`; `--seeds` that are not integers; `--ensemble`
            without at least two seeds.
        """
        values = absl_flags.FlagValues()
        absl_flags.DEFINE_list("seeds", [], "train one run per seed", flag_values=values)
        absl_flags.DEFINE_boolean(
            "ensemble", False, "then ensemble the seeds' runs", flag_values=values
        )
        try:
            rest = values([prog, *argv], known_only=True)[1:]
            seeds = tuple(int(s) for s in values.seeds)
        except (absl_flags.Error, ValueError) as e:
            raise FlagError(f"--seeds takes integers, e.g. --seeds=0,1,2 ({e})") from None
        _check_seeds(seeds, given=values["seeds"].present > 0)
        return cls(TrainArgs.from_argv(rest, prog), seeds, values.ensemble)


def _check_seeds(seeds: tuple[int, ...], *, given: bool) -> None:
    """`--seeds` as given: not empty (`--seeds=` would quietly train `--seed` alone), no seed
    twice (it would train the same run again), none below 0 (as `--seed`).

    Raises:
      FlagError: naming the flag and the fix.
    """
    if given and not seeds:
        raise FlagError("--seeds is empty; name the seeds, e.g. --seeds=0,1,2, or leave it out")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise FlagError(
            f"--seeds names seed {', '.join(map(str, twice))} more than once; each seed is one "
            "run, so list different seeds, e.g. --seeds=0,1,2"
        )
    for seed in seeds:
        if not 0 <= seed <= MAX_SEED:
            raise FlagError(f"--seeds must be in 0..{MAX_SEED}, got {seed}")


def loss_weights(spec: str) -> list[tuple[str, float]]:
    """`--losses` (upstream's `"ListMLELoss:1,MSE:0.02"`) as (name, weight) pairs.

    This owns the flag's syntax and its weights; which names exist is `losses.LOSSES`' to say
    (it needs TensorFlow). The weights are normalised by their sum in training, so each must
    be finite and at least 0, and one above 0.

    Raises:
      FlagError: an item without a number for its weight, or weights that cannot be used.
    """
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
    """md5 hex of `json.dumps(args, sort_keys=True)` over upstream's 15 fields, with our
    non-default options (`TrainArgs.identity`) as one more key, `HASH_KEY`, if there are any.

    Without `identity` this is upstream's `compute_hash` exactly.

    Raises:
      ValueError: if a field is missing (the dict is not upstream's args).
    """
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
    for f in dataclasses.fields(TrainArgs):
        choices = f" {{{','.join(f.metadata['choices'])}}}" if f.metadata["choices"] else ""
        lines.append(f"  --{f.name}{choices}  (default: {_default(f)!r})")
        lines.append(f"      {f.metadata['help']}")
    lines += [
        "  --seeds=0,1,2  (tpu-tiles train only; default: none, one run of --seed)",
        "      one run per seed instead of --seed",
        "  --ensemble  (with --seeds; default: off)",
        "      then write the ensemble of those runs as one more model (tpu-tiles ensemble)",
    ]
    return "\n".join(lines)


# -- the flags, for tools that handle training flags themselves (the sweep) ------------------

_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def _type_of(f: dataclasses.Field) -> type:
    return _TYPES[f.type] if isinstance(f.type, str) else f.type


FLAG_TYPES: dict[str, type] = {f.name: _type_of(f) for f in dataclasses.fields(TrainArgs)}
"""Every training flag's Python type, by flag name."""

BOOLEAN_FLAGS = frozenset(name for name, kind in FLAG_TYPES.items() if kind is bool)
"""The flags absl parses as booleans: `--flag`, `--noflag`, never a separate value."""


def flag_named(name: str) -> str | None:
    """The training flag that `--name` sets, by absl's rule (`noflag` sets boolean `flag`);
    None if it sets none."""
    if name in FLAG_TYPES:
        return name
    if name.startswith("no") and name[2:] in BOOLEAN_FLAGS:
        return name[2:]
    return None


# -- helpers ---------------------------------------------------------------------------------


def _check_type(f: dataclasses.Field, value: Any) -> None:
    want = _type_of(f)
    ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise FlagError(f"--{f.name} must be {want.__name__}, got {value!r}")


def _check_values(a: TrainArgs) -> None:
    """Range and choice checks; each message names the flag and what it accepts."""
    for f in dataclasses.fields(a):
        choices = f.metadata["choices"]
        if choices and getattr(a, f.name) not in choices:
            raise FlagError(
                f"--{f.name} must be one of {', '.join(choices)}, got {getattr(a, f.name)!r}"
            )
    at_least = {
        "epochs": 1,
        "batch": 1,
        "configs": 2,
        "early_stop": 0,
        "eval_every": 1,
        "score_candidates": 1,
        "score_configs": 0,
    }
    for name, low in at_least.items():
        if getattr(a, name) < low:
            raise FlagError(f"--{name} must be at least {low}, got {getattr(a, name)}")
    for name in ("lr", "clip_norm"):  # inf or nan makes the loss NaN from the first step
        value = getattr(a, name)
        if not (math.isfinite(value) and value > 0):
            raise FlagError(f"--{name} must be positive and finite, got {value}")
    loss_weights(a.losses)
    if not 0 <= a.seed <= MAX_SEED:
        raise FlagError(f"--seed must be in 0..{MAX_SEED}, got {a.seed}")
    if not 0 < a.score_sample <= 1:
        raise FlagError(f"--score_sample must be in (0, 1], got {a.score_sample}")
    if a.validate_batches == 0:
        raise FlagError("--validate_batches must be -1 (all) or positive, got 0")
    if not a.model:
        raise FlagError("--model must name a class, e.g. --model=ResidualSAGE")


def _define_flags(defaults: TrainArgs) -> absl_flags.FlagValues:
    """A fresh absl `FlagValues` with one flag per field (never absl's global FLAGS)."""
    values = absl_flags.FlagValues()
    for f in dataclasses.fields(defaults):
        default, help = getattr(defaults, f.name), f.metadata["help"]
        kind = _type_of(f)
        if f.metadata["choices"]:
            absl_flags.DEFINE_enum(
                f.name, default, list(f.metadata["choices"]), help, flag_values=values
            )
        elif kind is bool:
            absl_flags.DEFINE_boolean(f.name, default, help, flag_values=values)
        elif kind is int:
            absl_flags.DEFINE_integer(f.name, default, help, flag_values=values)
        elif kind is float:
            absl_flags.DEFINE_float(f.name, default, help, flag_values=values)
        else:
            absl_flags.DEFINE_string(f.name, default, help, flag_values=values)
    return values


def _format(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
