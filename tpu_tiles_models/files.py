"""Writing files so that nobody sees half of one: a temp name beside the target, then a rename.

(`kaggle.py` and `create_kaggle_csv.py` keep a copy of their own: they must load without
this package's TensorFlow import.)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a hidden temp path beside `path`; renames it onto `path` if the block succeeds.

    The parent directory is created. On any exception (Ctrl-C included) the temp file is
    removed and `path` keeps its old content. The temp name ends in `.tmp`, so globs such as
    `*.npz` never pick it up; writers that choose a format by extension need it explicitly.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
