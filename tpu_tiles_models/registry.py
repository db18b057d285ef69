"""The one place that knows every model class: its name and description, where it comes from
(our top-level `models.py` or an upstream checkout's, loaded by file path), how to build one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Mapping

from tpu_tiles_models import files, safe
from tpu_tiles_models.errors import FlagError, UserError, one_line

PACKAGE_DIR = Path(__file__).resolve().parent
UPSTREAM_MODELS = Path("tpu_graphs/baselines/tiles/models.py")

# Each model class and its one line in `tpu-tiles models`.
MODELS: dict[str, str] = {
    "ResidualSAGE": "ours (recommended): residual directed GraphSAGE, early config join, "
    "sum+mean+max pooling, config 0 read as the compiler's default; keywords config_attention "
    '(true or "gated") and tile_geometry (the map tpu-tiles columns prints; '
    "lower top-5, above all where config 0 is not the default) optional",
    "ResidualSAGEPlain": "ResidualSAGE as first configured, without attention: 48 wide, no "
    "default context",
    "EarlyJoinSAGE": "paper baseline (upstream's default): config features on every node, "
    "GraphSAGE",
    "LateJoinSAGE": "paper baseline: GraphSAGE on the kernel, config joined late",
    "EarlyJoinResGCN": "paper baseline: config on every node, residual GCN",
    "LateJoinResGCN": "paper baseline: residual GCN on the kernel, config late",
    "MLP": "paper baseline: pooled node features and config features, no GNN",
    "Ensemble": "several trained runs as one model: per-kernel normalised scores, averaged "
    "(made by tpu-tiles ensemble or sweep --ensemble_top)",
}


def dropin_file(name: str) -> Path:
    """One of our top-level drop-in files: beside the package in a checkout, in `dropin/` in a
    built wheel."""
    for candidate in (PACKAGE_DIR.parent / name, PACKAGE_DIR / "dropin" / name):
        if candidate.is_file():
            return candidate
    raise UserError(f"{name} not found beside {PACKAGE_DIR}; reinstall tpu-tiles-models")


def models_inputs(path: str | os.PathLike | None) -> list[safe.Input]:
    """A `--models` file (or an upstream root's models.py) as an input, for
    `safe.claim`; none for ours."""
    if not path or files.is_remote(path):
        return []
    file = Path(files.expand(path))
    if file.is_dir():
        file = file / UPSTREAM_MODELS
    return [safe.Input(file, "--models file")] if file.is_file() else []


# The name of a models.py module loaded by path starts with this (see `fault_site`).
_MODULE_PREFIX = "tpu_tiles_models_dropin_"


def load_models_module(
    path: str | Path | None = None, *, flag: str | None = "--models"
) -> ModuleType:
    """Imports a `models.py` by path (None: ours), or an upstream root's, with the root on
    sys.path for its own imports of `tpu_graphs`. `flag` chose `path`, for messages (None: a
    file the user did not name). A file that cannot be imported is a `FlagError` naming it."""
    root = Path(path) if path is not None else dropin_file("models.py")
    path = Path(files.canonical(models_file(root, flag=flag), what="--models"))
    if root.is_dir() and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module_name = _MODULE_PREFIX + str(abs(hash(str(path))))
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    other = f" or pass another {flag}" if flag else ""
    with _keras_policy_kept() as changed:
        try:
            spec.loader.exec_module(module)
        # Whatever the file raises is the file's fault: say where. A `sys.exit()` in it too: it
        # would end the command with no word, and a check of a hand-in would seem to pass.
        except (Exception, SystemExit) as err:
            del sys.modules[module_name]
            if isinstance(err, SyntaxError):  # its own text repeats the file and line
                where, reason = f"{path}, line {err.lineno}", f"{type(err).__name__}: {err.msg}"
            elif isinstance(err, SystemExit):
                where, reason = str(path), exit_call(err)
            else:
                where, reason = str(path), one_line(err, 200)
            raise FlagError(f"{where}: cannot import it ({reason}); fix the file{other}") from None
    if changed:
        del sys.modules[module_name]
        raise FlagError(_policy_set(f"{path}: importing it", changed[0], other))
    return module


def models_file(path: str | os.PathLike, *, flag: str | None = "--models") -> Path:
    """The models.py that `path` names: the file, or an upstream root's; a `FlagError` when
    there is none (`flag` chose `path`, for the fix; None: a file the user did not name)."""
    fix = f"pass {flag} <models.py or upstream root>" if flag else "restore the file"
    path = Path(path)
    if path.is_dir():
        root, path = path, path / UPSTREAM_MODELS
        if not path.is_file():
            raise FlagError(f"{path} not found: is {root} a tpu_graphs checkout? ({fix})")
    kind = files.not_a_file(path)
    if kind:
        what = "no such models.py" if kind == "not found" else f"{kind}, not a models.py"
        raise FlagError(f"{path}: {what}; {fix}")
    return path


def _policy_set(what: str, policy: str, other: str) -> str:
    """The message for user code that set Keras's global dtype policy."""
    return (
        f"{what} sets Keras's global dtype policy to {policy} (every model, ours too, would "
        "then compute in it); models are built and ranked in float32, as the course's script "
        f"does: remove the set_global_policy (or set_floatx) call{other}"
    )


@contextlib.contextmanager
def _keras_policy_kept() -> Iterator[list[str]]:
    """Puts Keras's global dtype policy and float type back after user code in it; the list it
    yields then holds the policy that was set (empty when unchanged)."""
    import tensorflow as tf

    keras = tf.keras
    floatx, policy = keras.backend.floatx(), keras.mixed_precision.global_policy().name
    changed: list[str] = []
    try:
        yield changed
    finally:
        now = (keras.mixed_precision.global_policy().name, keras.backend.floatx())
        if now != (policy, floatx):
            changed.append(now[0] if now[0] != policy else now[1])
            keras.backend.set_floatx(floatx)
            # None: the default, which follows floatx, as it did unless a policy was set.
            keras.mixed_precision.set_global_policy(None if policy == floatx else policy)


def exit_call(err: SystemExit) -> str:
    """`SystemExit` as the call that raises it, e.g. `it calls sys.exit(3)`."""
    code = "" if err.code is None else repr(err.code)
    return f"it calls sys.exit({code})"


def fault_site(err: BaseException) -> str | None:
    """Where a user's models.py (not ours) loaded by `load_models_module` raised `err` or
    called what raised it, as `<file>, line <n>`; None when no such file took part."""
    try:
        ours = str(dropin_file("models.py"))
    except UserError:
        ours = None
    where, tb = None, err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        name = str(tb.tb_frame.f_globals.get("__name__", ""))
        if name.startswith(_MODULE_PREFIX) and code.co_filename != ours:
            where = f"{code.co_filename}, line {tb.tb_lineno}"
        tb = tb.tb_next
    return where


_MISSING = object()


def _is_model(value: object) -> bool:
    """A model class: a class with upstream's `forward(graph, num_configs)`."""
    return isinstance(value, type) and callable(getattr(value, "forward", None))


def model_class(name: str, module: ModuleType | None = None) -> type:
    """The class `name` of `module` (default: our models.py); one-line error if unknown."""
    module = module or load_models_module()
    cls = getattr(module, name, _MISSING)
    if _is_model(cls) and not name.startswith("_"):
        return cls
    known = ", ".join(sorted(n for n in MODELS if _is_model(getattr(module, n, None))))
    if cls is _MISSING or name.startswith("_"):
        raise FlagError(f"unknown model {name!r} in {module.__file__}; known: {known}")
    raise FlagError(
        f"{name!r} in {module.__file__} is not a model class (a class with a forward method); "
        f"known: {known}"
    )


def parse_model_kwargs(text: str) -> dict:
    """Parses `--model_kwargs_json`; one-line error naming the flag if it is not a JSON object."""
    try:
        kwargs = json.loads(text or "{}")
    except json.JSONDecodeError as e:
        raise FlagError(
            f"--model_kwargs_json is not valid JSON ({e.msg}): {text!r}; "
            "example: '{\"hidden_dim\": 64}'"
        ) from None
    if not isinstance(kwargs, dict):
        raise FlagError(f"--model_kwargs_json must be a JSON object, got {text!r}")
    return kwargs


def build_model(
    name: str,
    num_configs: int,
    num_ops: int,
    kwargs_json: str = "{}",
    module: ModuleType | None = None,
    *,
    source: str = "--model_kwargs_json",
):
    """Instantiates a model as upstream does: `cls(num_configs, num_ops, **kwargs)`; `source`
    names where `kwargs_json` came from, for the message when they do not fit."""
    cls = model_class(name, module)
    kwargs = parse_model_kwargs(kwargs_json)
    where = getattr(sys.modules.get(cls.__module__), "__file__", None) or cls.__module__
    with _keras_policy_kept() as changed:
        try:
            model = cls(num_configs, num_ops, **kwargs)
        except (TypeError, ValueError) as e:
            raise FlagError(f"{source} does not fit {name}: {e}") from None
        except SystemExit as e:  # the models.py's code ends the process: its fault, say where
            raise FlagError(f"{where}: building {name}, {exit_call(e)}; fix the file") from None
    if changed:
        raise FlagError(_policy_set(f"{where}: building {name}", changed[0], ""))
    return model


def column_map(stats: Any, train: Any, module: ModuleType | None = None) -> dict:
    """Where the raw columns `TileGeometry` reads sit among the features that `stats` (a
    `data.FeatureStats` fitted on the `data.Split` `train`) makes: its `tile_geometry` keyword,
    `{"widths": [node, config], "columns": [[index or -1, lo, hi], ...]}`."""
    module = module or load_models_module()
    node = module.SHAPE_COLUMNS + module.LAYOUT_COLUMNS
    columns = stats.raw_columns(train, node, module.OUTPUT_BOUND_COLUMNS)
    return {"widths": [stats.node_width, stats.config_width], "columns": columns}


def with_column_map(name: str, kwargs: Mapping[str, Any], make_map: Callable[[], dict]) -> dict:
    """`kwargs` with `tile_geometry: true` (an `Ensemble`'s members' too) given the data's
    column map `make_map()` (`column_map`, made only if asked for): how our trainer builds the
    geometry. A map given that is not the data's is a `FlagError`."""
    made: list[dict] = []

    def fill(_: str, k: Mapping[str, Any]) -> dict:
        given = k.get("tile_geometry")
        if given is True or isinstance(given, dict):
            made[:] = made or [make_map()]
            if given not in (True, made[0]):
                raise FlagError(
                    "--model_kwargs_json: tile_geometry is not this data's column map; pass "
                    "true, or the map `tpu-tiles columns DATA_ROOT` prints (same --configs, "
                    "--toy_data)"
                )
            return {**k, "tile_geometry": made[0]}
        return dict(k)

    return _each_member(name, fill(name, kwargs), fill)


# Copies of every parameter that training holds: weights, gradients and Adam's two moments.
TRAINING_COPIES = 4


def available_memory() -> int:
    """Bytes of memory this machine can still give a process (Linux's MemAvailable)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return 1 << 62  # unknown: no limit


@contextlib.contextmanager
def parameter_limit(
    name: str, kwargs_json: str, *, limit_bytes: int | None = None
) -> Iterator[None]:
    """Within it, a model whose parameters would not fit in memory for training fails
    (`FlagError`) as each variable is declared, before TensorFlow allocates it (in a
    `tf.Graph` nothing is allocated: a graph-mode build is a free estimate)."""
    import tensorflow as tf

    limit = available_memory() if limit_bytes is None else limit_bytes
    params = nbytes = 0

    def creator(next_creator, **kwargs):
        nonlocal params, nbytes
        shape = tf.TensorShape(kwargs.get("shape"))
        if shape.is_fully_defined():
            params += shape.num_elements()
            nbytes += shape.num_elements() * tf.as_dtype(kwargs.get("dtype") or tf.float32).size
            if nbytes * TRAINING_COPIES > limit:
                need, have = (files.format_size(n) for n in (nbytes * TRAINING_COPIES, limit))
                raise FlagError(
                    f"--model_kwargs_json {kwargs_json} makes {name} too big to train here: "
                    f"{params:.3g} parameters or more, about {need} of memory for training "
                    f"(weights, gradients, Adam's moments), {have} available; choose smaller "
                    "sizes"
                )
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


# The model the benchmark suite proved (docs/choosing.md). Its recommended keywords are its
# class defaults in models.py, so `--model=ResidualSAGE` alone trains it.
RECOMMENDED_MODEL = "ResidualSAGE"
RECOMMENDED_FLAGS = f"--model={RECOMMENDED_MODEL}"


def _each_member(name: str, kwargs: Mapping[str, Any], fn: Callable[[str, dict], dict]) -> dict:
    """`kwargs`, with an `Ensemble`'s members' keywords each `fn(model, its kwargs)`."""
    members = kwargs.get("members")
    if name != "Ensemble" or not isinstance(members, list):
        return dict(kwargs)
    return dict(
        kwargs,
        members=[
            dict(m, kwargs=fn(m["model"], m.get("kwargs") or {}))
            if isinstance(m, dict) and isinstance(m.get("model"), str)
            else m
            for m in members
        ],
    )


def resolved_kwargs(name: str, kwargs: Mapping[str, Any], module: ModuleType | None = None) -> dict:
    """The keywords `name` is built with: `kwargs` over every keyword default of its class
    (walking its base classes), as JSON values, an `Ensemble`'s members' too. What a run file
    records, so that a later change of a class default does not change how the run reloads."""
    cls = model_class(name, module)
    resolved: dict[str, Any] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass.__module__ != cls.__module__:
            continue
        for param in inspect.signature(init).parameters.values():
            if param.default is param.empty or param.name in resolved:
                continue
            try:  # a default that is code (a function), not a setting, is left out
                resolved[param.name] = json.loads(json.dumps(param.default))
            except (TypeError, ValueError):
                continue
    resolved.update(kwargs)
    resolved = _each_member(name, resolved, lambda n, k: resolved_kwargs(n, k, module))
    return json.loads(json.dumps(resolved))


def recommended_kwargs(module: ModuleType | None = None) -> dict:
    """`RECOMMENDED_MODEL`'s keywords: its class defaults (see `resolved_kwargs`)."""
    return resolved_kwargs(RECOMMENDED_MODEL, {}, module)


# Class defaults that changed, by class: what a run file written before runs recorded their
# resolved keywords meant by leaving them out (ResidualSAGE's until the suite's recommendation).
# Must not change (only grow): those run files rebuild their models from these values.
EARLIER_DEFAULTS: dict[str, dict[str, Any]] = {
    "ResidualSAGE": {"hidden_dim": 48, "config_attention": True, "default_context": False},
}


# Keywords our classes gained after runs began recording theirs, each with the value that
# builds a model as before (a run file that leaves one out was trained without it): the ranking
# rule's variables, which the course's in-order copy would otherwise miss. Must not change
# (only grow): older run files rebuild their models from these values.
ADDED_KEYWORDS: dict[str, Any] = {"keep_default_gate": False, "default_margin": False}


def without_added(name: str, kwargs: Mapping[str, Any], module: ModuleType | None = None) -> dict:
    """`kwargs` of a run file written before `ADDED_KEYWORDS` existed: each one its class takes
    and `kwargs` leaves out set to its earlier value (for an `Ensemble`, its members' too)."""
    takes = resolved_kwargs(name, {}, module)
    out = {**{k: v for k, v in ADDED_KEYWORDS.items() if k in takes}, **kwargs}
    return _each_member(name, out, lambda n, k: without_added(n, k, module))


def earlier_kwargs(name: str, kwargs: Mapping[str, Any]) -> dict:
    """The keywords a run file written before runs recorded them meant: `kwargs` over the
    `EARLIER_DEFAULTS` of `name` (and of each `Ensemble` member's)."""
    return _each_member(name, {**EARLIER_DEFAULTS.get(name, {}), **kwargs}, earlier_kwargs)


def describe(module: ModuleType | None = None) -> str:
    """The `tpu-tiles models` table, then `recommended: <flags>` (a stable line: scripts read
    it) and a note on those defaults."""
    width = max(map(len, MODELS))
    lines = [f"{name:<{width}}  {text}" for name, text in MODELS.items()]
    kwargs = recommended_kwargs(module)
    lines += [
        "",
        f"recommended: {RECOMMENDED_FLAGS}",
        f"  its class defaults: {json.dumps(kwargs, sort_keys=True)}",
        "  (the suite: it beats EarlyJoinSAGE on every family by more than one std, in under 2x",
        "  its training time; the protocol's held-out test found no better one: docs/choosing.md)",
        "  Every other flag: upstream's default.",
    ]
    return "\n".join(lines)
