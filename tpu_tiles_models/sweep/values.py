"""One axis value: from inline text or a YAML/JSON scalar to the flag's type, and back.

An inline grid is text (`lr=1e-3,2e-3 losses='A:1,B:2'`): it is split at separators outside
quotes and brackets (`split_top`), each piece unquoted (`unquote`) and converted to the type of
its flag (`typed`); `format_value` writes a value back so that the two round-trip. A
`kwargs.<key>` axis takes any JSON value. This module imports no TensorFlow.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.train_args import FLAG_TYPES

KWARGS_PREFIX = "kwargs."
RANGE_KINDS = ("uniform", "loguniform", "int", "logint")


def value_type(name: str) -> type | None:
    """The Python type of flag `name`; None for `kwargs.*` (any JSON value)."""
    if name.startswith(KWARGS_PREFIX):
        return None
    return FLAG_TYPES[name]


def is_numeric(name: str) -> bool:
    return value_type(name) in (int, float, None)


def typed(name: str, value: Any) -> Any:
    """`value` (text from a spec, or a YAML/JSON scalar) as flag `name`'s type.

    Raises:
      FlagError: a value of the wrong type, naming the axis.
    """
    kind = value_type(name)
    if kind is None:  # kwargs.<key>: JSON text, else the text itself
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return json.loads(value)
        return value
    if name == "model_kwargs_json" and isinstance(value, dict):
        return json.dumps(value)
    try:
        return _convert(kind, value)
    except (TypeError, ValueError):
        raise FlagError(f"--grid: {name}={value!r}: --{name} takes {kind.__name__}") from None


def _convert(kind: type, value: Any) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ValueError(value)
    if isinstance(value, bool):
        raise TypeError(value)
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return int(value) if not isinstance(value, str) else int(value.strip())
    if kind is float:
        return float(value)
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def format_value(name: str, value: Any) -> str:
    """One value as inline text that `_unquote` + `_typed` turn back into `value`."""
    if name.startswith(KWARGS_PREFIX):
        text = json.dumps(value)
        return text if _safe_bare(text) else f"'{text}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str):
        return repr(value)
    if _safe_bare(value) and not range_match(value):
        return value
    for quote in ("'", '"'):
        if quote not in value:
            return f"{quote}{value}{quote}"
    raise FlagError(f"--grid: {name} value {value!r} has both quote characters; use a file")


def _safe_bare(text: str) -> bool:
    return bool(text) and not re.search(r"[\s,'\"()\[\]{}]", text)


def unquote(name: str, piece: str) -> str:
    """Strips one pair of outer quotes ('...' always; "..." except for kwargs, where it is JSON)."""
    quotes = "'" if name.startswith(KWARGS_PREFIX) else "'\""
    if len(piece) >= 2 and piece[0] == piece[-1] and piece[0] in quotes:
        return piece[1:-1]
    return piece


def split_top(text: str, seps: str, where: str, *, keep_empty: bool = False) -> list[str]:
    """Splits `text` at `seps` outside quotes and brackets.

    Raises:
      FlagError: unbalanced quotes or brackets, naming `where`.
    """
    pieces, current, depth, quote = [], [], 0, ""
    chars = iter(text)
    for ch in chars:
        if quote:
            current.append(ch)
            if ch == "\\" and quote == '"':
                current.append(next(chars, ""))
            elif ch == quote:
                quote = ""
            continue
        if ch in seps and depth == 0:
            pieces.append("".join(current))
            current = []
            continue
        current.append(ch)
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                break
    if quote or depth:
        raise FlagError(f"{where}: unbalanced quotes or brackets in {text!r}")
    pieces.append("".join(current))
    return pieces if keep_empty else [p for p in pieces if p.strip()]


def range_match(text: str) -> tuple[str, str, str] | None:
    """`(kind, low, high)` if `text` is a range such as `loguniform(1e-4,1e-2)`, else None."""
    kinds = "|".join(RANGE_KINDS)
    m = re.fullmatch(rf"\s*({kinds})\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)\s*", text)
    return m.groups() if m else None
