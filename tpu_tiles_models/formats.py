"""The on-disk formats, spelled once: TpuGraphs `tile:xla` npz files and our artifacts' names.

**The data** (upstream's `tpu_graphs` README, "Tile dataset"): a root holds `train/`, `valid/`
and `test/`, each `<tile_id>.npz` one kernel, with the arrays of `REQUIRED_KEYS`:

- `node_feat` [n, 140] float32 (`NODE_FEAT_DIM`);
- `node_opcode` [n] integer: HLO opcode ids, 0..120 in the real files, up to `MAX_OPCODE`
  accepted (the 128 rows of models.py's opcode embedding);
- `edge_index` [e, 2] integer: `[u, v]` rows, node u consumes the output of node v;
- `config_feat` [c, 24] float32 (`CONFIG_FEAT_DIM`);
- `config_runtime` [c] and `config_runtime_normalizers` [c] integer: each config's runtime
  in ns and the default config's; all zero on the test split. The target is their ratio.

Kaggle names a kernel `tile:xla:<tile_id>` (`TILE_PREFIX`). A training run's artifacts
(`model_<h>/`, `run_<h>.jsonz`, `results_<ms>.csv`, ours `train_curve_<h>.png`) are named here;
our JSON files are read through one shape check (`checked`). Standard library only.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from typing import IO, Any, Mapping

from tpu_tiles_models.errors import UserError

# -- the data --------------------------------------------------------------------------------

SPLITS = ("train", "valid", "test")
NODE_FEAT_DIM = 140
CONFIG_FEAT_DIM = 24
MAX_OPCODE = 127  # real ids run 0..120; models.py embeds 128 (its OPCODE_VOCAB)
REQUIRED_KEYS = (
    "node_feat",
    "node_opcode",
    "edge_index",
    "config_feat",
    "config_runtime",
    "config_runtime_normalizers",
)
TILE_PREFIX = "tile:xla:"  # a kernel's Kaggle id is TILE_PREFIX + its tile id

# -- a training run's artifacts --------------------------------------------------------------

# Must not change: upstream's names, which graders and the course script look for.
_MODEL_DIR = "model_"
_RUN_FILE = ("run_", ".jsonz")
_CURVE = ("train_curve_", ".png")
MODEL_DIR_GLOB = _MODEL_DIR + "*"
RUN_FILE_GLOB = "*".join(_RUN_FILE)
SAVED_MODEL_FILE = "saved_model.pb"  # what makes a folder a SavedModel (Keras's name)
VARIABLES_PREFIX = ("variables", "variables")  # its weights: <prefix>.index and .data-*


def model_dir_name(h: str) -> str:
    """`model_<h>`: the SavedModel of the run whose arguments hash to `h`."""
    return f"{_MODEL_DIR}{h}"


def run_file_name(h: str) -> str:
    """`run_<h>.jsonz`: written last, so it marks the run complete."""
    return h.join(_RUN_FILE)


def curve_name(h: str) -> str:
    """`train_curve_<h>.png`: losses, OPA and the validation score per epoch."""
    return h.join(_CURVE)


def _hash_in(name: str, head: str, tail: str) -> str | None:
    if not (name.startswith(head) and name.endswith(tail)) or len(name) <= len(head + tail):
        return None
    return name[len(head) : len(name) - len(tail)]


def run_hash(name: str) -> str | None:
    """`h` of a `model_<h>` folder name; None for any other name."""
    return name[len(_MODEL_DIR) :] if name.startswith(_MODEL_DIR) else None


def run_file_hash(name: str) -> str | None:
    """`h` of a `run_<h>.jsonz` file name; None for any other name."""
    return _hash_in(name, *_RUN_FILE)


def curve_hash(name: str) -> str | None:
    """`h` of a `train_curve_<h>.png` file name; None for any other name."""
    return _hash_in(name, *_CURVE)


# The most JSON a run file may inflate to: real ones hold KB to a few MB, and a gzip bomb (a
# few MB that inflate to GB) is refused once this much is out, in this much memory.
RUN_FILE_LIMIT = 32 * 10**6


def run_file_content(stream: IO[bytes]) -> Any:
    """The JSON of a run file's gzip `stream`, of any shape, inflated as a stream: past
    `RUN_FILE_LIMIT` bytes it is refused unread. The one reader of run files' bytes. Raises
    OSError, EOFError, zlib.error, ValueError or RecursionError if it is not whole."""
    with gzip.GzipFile(fileobj=stream, mode="rb") as inflated:
        data = inflated.read(RUN_FILE_LIMIT + 1)
    if len(data) > RUN_FILE_LIMIT:
        raise ValueError(
            f"it inflates past {RUN_FILE_LIMIT / 1e6:g} MB, more than a run file holds"
        )
    return json.loads(data)


def named_results_csv(run_file: bytes) -> str | None:
    """The results CSV a run file's bytes name (upstream's `args.results_csv`), or None when
    they name none or are not a whole run file (`run_file` reads the rest; this is all that
    `files` needs, to keep other commands' outputs off a run's CSV)."""
    try:
        info = run_file_content(io.BytesIO(run_file))
    except (OSError, EOFError, zlib.error, ValueError, RecursionError):
        return None
    args = info.get("args") if isinstance(info, dict) else None
    csv = args.get("results_csv") if isinstance(args, dict) else None
    return csv if isinstance(csv, str) and csv else None


def results_csv_name(tag: str | int) -> str:
    """`results_<tag>.csv`: the test predictions (upstream's tag is the time in ms)."""
    return f"results_{tag}.csv"


def tensorboard_run_name(h: str) -> str:
    """`run_<h>`: the run's folder under `--tensorboard`."""
    return f"{_RUN_FILE[0]}{h}"


# -- our JSON files' shapes ------------------------------------------------------------------

NUMBER = (int, float)
Fields = Mapping[str, tuple[type, ...]]  # key -> the kinds its value may be (None: optional)


class ShapeError(UserError, ValueError):
    """A JSON file of ours holds valid JSON of the wrong shape; one line naming it and the fix."""


_KINDS = ((bool, "true/false"), (dict, "an object"), (list, "a list"), (str, "a string"))


def json_kind(value: Any) -> str:
    """A JSON value's kind, as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)  # NaN, Infinity or -Infinity, as the file spells it
    for kind, name in _KINDS:
        if isinstance(value, kind):
            return name
    return "a number" if isinstance(value, NUMBER) else type(value).__name__


def is_json(value: Any, kinds: tuple[type, ...]) -> bool:
    """`isinstance`, where a JSON true/false is no number and NaN or an infinity none either
    (Python's JSON reads them; a number read is used as a number)."""
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


def json_wrong(where: str, value: Any, kinds: tuple[type, ...]) -> str:
    """`<where> is a list, not an object`: what a message says of a value of the wrong kind."""
    wanted = dict.fromkeys(json_kind(k()) for k in kinds)  # int and float: "a number" once
    return f"{where} is {json_kind(value)}, not {' or '.join(wanted)}"


def checked(path: Any, value: Any, fields: Fields, fix: str, where: str = "") -> dict:
    """`value`, read from the JSON file `path`, if it is an object whose `fields` hold values
    of their kinds (a key whose kinds include None may be missing); else `ShapeError`."""

    def wrong(problem: str) -> ShapeError:
        return ShapeError(f"{path}: {problem}; {fix}")

    if not isinstance(value, dict):
        raise wrong(json_wrong(where or "its content", value, (dict,)))
    for key, kinds in fields.items():
        if key not in value and type(None) not in kinds:
            raise wrong(f"{where or 'it'} has no {key!r}")
        if not is_json(value.get(key), kinds):
            raise wrong(json_wrong(f"{where}.{key}" if where else repr(key), value[key], kinds))
    return value
