"""The data cache's file format: named numpy arrays, compressed, in one file.

A zip archive of stored members: `meta.json` (each array's dtype, shape and frame count, and
the caller's metadata) and each array's rows in frames of about `FRAME_BYTES`, byte-shuffled
(the high bytes of numbers repeat, and zstd finds them) and zstd-compressed in threads, read
straight into their arrays. The fusion `--scale full` train split: 18 MiB for 216 MiB of
arrays (`np.savez_compressed`: 21 MiB), in a fraction of a second. `data` owns what is cached.
"""

from __future__ import annotations

import concurrent.futures
import json
import zipfile
from typing import IO, Any

import numpy as np
import zstandard

FORMAT = "tpu_tiles_models.cache/1"  # must not change unless the layout does (then /2)
FRAME_BYTES = 8 << 20  # raw bytes per frame: bounds a reader's extra memory and a thread's work
LEVEL = 1  # zstd's fastest standard level; higher levels gain 1-2% here at 2x the time
_META = "meta.json"


class CacheFormatError(ValueError):
    """A cache file is damaged or not in this format (callers rebuild it)."""


def _compress(rows: np.ndarray) -> bytes:
    """The bytes of `rows`, byte 0 of every item first, then byte 1, ..., compressed."""
    items = np.ascontiguousarray(rows).view(np.uint8).reshape(-1, rows.itemsize)
    return zstandard.ZstdCompressor(level=LEVEL).compress(items.T.tobytes())


def _decompress_into(frame: bytes, rows: np.ndarray) -> None:
    """Fills the C-contiguous `rows` from a frame written by `_compress`."""
    raw = zstandard.ZstdDecompressor().decompress(frame, max_output_size=rows.nbytes)
    if len(raw) != rows.nbytes:
        raise CacheFormatError(f"a frame holds {len(raw)} bytes, expected {rows.nbytes}")
    target = rows.view(np.uint8).reshape(-1, rows.itemsize)
    target[...] = np.frombuffer(raw, np.uint8).reshape(rows.itemsize, -1).T


def _frames(array: np.ndarray) -> list[np.ndarray]:
    row_bytes = max(array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64)), 1)
    step = max(1, FRAME_BYTES // row_bytes)
    return [array[start : start + step] for start in range(0, len(array), step)]


def write(out: IO[bytes], arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Writes `arrays` (numeric, at least 1-D) and the JSON-able `meta` to the file `out`."""
    specs = {name: {"dtype": a.dtype.str, "shape": list(a.shape)} for name, a in arrays.items()}
    with (
        concurrent.futures.ThreadPoolExecutor() as pool,
        zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf,
    ):
        for name, array in arrays.items():
            frames = list(pool.map(_compress, _frames(array)))
            specs[name]["frames"] = len(frames)
            for i, frame in enumerate(frames):
                zf.writestr(f"{name}/{i}", frame)
        zf.writestr(
            _META, json.dumps({"format": FORMAT, "arrays": specs, "meta": meta}, allow_nan=False)
        )


def read(source: IO[bytes]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, meta) from a file written by `write`; `CacheFormatError` if it is not one."""
    try:
        with (
            zipfile.ZipFile(source) as zf,
            concurrent.futures.ThreadPoolExecutor() as pool,
        ):
            header = json.loads(zf.read(_META))
            if header.get("format") != FORMAT:
                raise CacheFormatError(f"format {header.get('format')!r}, expected {FORMAT}")
            arrays = {}
            for name, spec in header["arrays"].items():
                array = np.empty(spec["shape"], np.dtype(spec["dtype"]))
                targets = _frames(array)
                if len(targets) != spec["frames"]:
                    raise CacheFormatError(
                        f"{name}: {spec['frames']} frames, expected {len(targets)}"
                    )
                frames = [zf.read(f"{name}/{i}") for i in range(len(targets))]
                list(pool.map(_decompress_into, frames, targets))
                arrays[name] = array
            return arrays, header["meta"]
    except CacheFormatError:
        raise
    except (OSError, EOFError, KeyError, TypeError, ValueError, zipfile.BadZipFile) as err:
        raise CacheFormatError(" ".join(str(err).split()) or type(err).__name__) from None
    except zstandard.ZstdError as err:
        raise CacheFormatError(f"a damaged frame ({err})") from None
