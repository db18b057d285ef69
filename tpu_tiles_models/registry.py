"""The one place that knows every model class: its name and description, where it comes from,
and how to build one.

Classes come from our top-level `models.py` (the single source of truth; the package holds no
second copy of model code) or from an upstream checkout's swapped-in
`tpu_graphs/baselines/tiles/models.py`. Both are loaded by file path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from tpu_tiles_models import files
from tpu_tiles_models.errors import FlagError, UserError

PACKAGE_DIR = Path(__file__).resolve().parent
UPSTREAM_MODELS = Path("tpu_graphs/baselines/tiles/models.py")


@dataclass(frozen=True)
class ModelInfo:
    """What a user needs to pick a model: one line, as `tpu-tiles models` lists it."""

    description: str


MODELS: dict[str, ModelInfo] = {
    "ResidualSAGE": ModelInfo(
        "ours: residual directed GraphSAGE, early config join, sum+mean+max pooling, "
        "cross-config attention"
    ),
    "ResidualSAGEPlain": ModelInfo(
        "ResidualSAGE without cross-config attention (each config scored alone)"
    ),
    "EarlyJoinSAGE": ModelInfo(
        "paper baseline (upstream's default): config features on every node, GraphSAGE"
    ),
    "LateJoinSAGE": ModelInfo("paper baseline: GraphSAGE on the kernel, config joined late"),
    "EarlyJoinResGCN": ModelInfo("paper baseline: config on every node, residual GCN"),
    "LateJoinResGCN": ModelInfo("paper baseline: residual GCN on the kernel, config late"),
    "MLP": ModelInfo("paper baseline: pooled node features and config features, no GNN"),
    "Ensemble": ModelInfo(
        "several trained runs as one model: per-kernel normalised scores, averaged "
        "(made by tpu-tiles ensemble or train --seeds=... --ensemble)"
    ),
}


def dropin_file(name: str) -> Path:
    """Path of one of our top-level drop-in files (`models.py`, ...).

    In a checkout or editable install they sit beside the package; a built wheel carries
    copies in `tpu_tiles_models/dropin/` (see setup.py).
    """
    for candidate in (PACKAGE_DIR.parent / name, PACKAGE_DIR / "dropin" / name):
        if candidate.is_file():
            return candidate
    raise UserError(f"{name} not found beside {PACKAGE_DIR}; reinstall tpu-tiles-models")


def models_inputs(path: str | os.PathLike | None) -> list[files.Input]:
    """A `--models` file (or an upstream root's models.py) as an input, for
    `files.prepare_outputs`; none for ours."""
    if not path or files.is_remote(path):
        return []
    file = Path(files.expand(path))
    if file.is_dir():
        file = file / UPSTREAM_MODELS
    return [files.Input(file, "--models file")] if file.is_file() else []


def load_models_module(path: str | Path | None = None) -> ModuleType:
    """Imports a `models.py` by path: ours by default, or an upstream checkout's.

    `path` may be a models.py file or an upstream root (then its swapped-in tiles models.py is
    used, with the root on sys.path so that its own imports of `tpu_graphs` resolve).
    """
    path = Path(path) if path is not None else dropin_file("models.py")
    if path.is_dir():
        root, path = path, path / UPSTREAM_MODELS
        if not path.is_file():
            raise FlagError(f"{path} not found: is {root} a tpu_graphs checkout? (--models)")
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    if not path.is_file():
        raise FlagError(f"{path}: no such models.py; pass --models <models.py or upstream root>")
    path = path.resolve()
    module_name = "tpu_tiles_models_dropin_" + str(abs(hash(str(path))))
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def model_class(name: str, module: ModuleType | None = None) -> type:
    """The class `name` of `module` (default: our models.py); one-line error if unknown."""
    module = module or load_models_module()
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and hasattr(cls, "forward")) or name.startswith("_"):
        known = sorted(n for n in MODELS if hasattr(module, n))
        raise FlagError(f"unknown model {name!r} in {module.__file__}; known: {', '.join(known)}")
    return cls


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
):
    """Instantiates a model as upstream does: `cls(num_configs, num_ops, **kwargs)`."""
    cls = model_class(name, module)
    kwargs = parse_model_kwargs(kwargs_json)
    try:
        return cls(num_configs, num_ops, **kwargs)
    except (TypeError, ValueError) as e:
        raise FlagError(f"--model_kwargs_json does not fit {name}: {e}") from None


def describe() -> str:
    """The `tpu-tiles models` table."""
    width = max(map(len, MODELS))
    lines = []
    for name, info in MODELS.items():
        lines.append(f"{name:<{width}}  {info.description}")
    lines.append("\nModel: ResidualSAGE (it beats EarlyJoinSAGE by more than one std on every")
    lines.append("generator family of the benchmark suite, with the same flags; see README).")
    lines.append("Flags: upstream's defaults for every model (no other recipe has won on every")
    lines.append("generator family of the benchmark suite yet).")
    return "\n".join(lines)
