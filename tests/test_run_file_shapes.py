"""A run file of the wrong shape is one line naming it, exit 2, in every command that reads one.

`run_file.read_run` checks the shape once (`run_file.run_info_problem`) for every reader: predict,
evaluate, ensemble, bundle (which then packs nothing), check and the drop-in
`tiles_gen_predictions_csv.py`. Each damaged file is valid gzip, so only the check catches it;
a gzip bomb is refused by the one reader of run files' bytes (`formats.run_file_content`).
"""

from __future__ import annotations

import gzip
import json
import shutil
import tracemalloc
import zlib
from pathlib import Path

import pytest
from conftest import write_run

from tpu_tiles_models import cli, formats, registry, run_file

FIX = "it is truncated or corrupt, copy it again from the training --out_dir"


def _with(info: dict, change) -> dict:
    """A deep copy of `info` with `change` applied to it."""
    copy = json.loads(json.dumps(info))
    change(copy)
    return copy


# name -> (the run file's content from a good one's, or None for a folder; the reason named)
DAMAGES = {
    "list": (lambda info: [1, 2], "its content is a list, not an object"),
    "number": (lambda info: 3, "its content is a number, not an object"),
    "null": (lambda info: None, "its content is null, not an object"),
    "string": (lambda info: "run", "its content is a string, not an object"),
    "deep": (lambda info: "deep", "nested deeper than a run file is"),
    "no_args": (lambda info: {"train_curve": {}}, "it has no 'args'"),
    "args_lack_a_field": (
        lambda info: _with(info, lambda i: i["args"].pop("configs")),
        "'args' lacks configs",
    ),
    "args_a_list": (lambda info: dict(info, args=[]), "'args' is a list, not an object"),
    "kwargs_a_list": (
        lambda info: _with(info, lambda i: i["args"].update(model_kwargs_json="[1]")),
        "args.model_kwargs_json is a list, not an object",
    ),
    "tpu_tiles_a_list": (
        lambda info: dict(info, tpu_tiles=[]),
        "'tpu_tiles' is a list, not an object",
    ),
    "keep_default_a_string": (
        lambda info: _with(info, lambda i: i["tpu_tiles"].update(keep_default="yes")),
        "tpu_tiles.keep_default is a string, not an object",
    ),
    "final_error_null": (
        lambda info: dict(info, final_error=None),
        "'final_error' is null, not an object",
    ),
    # Python's JSON reads NaN and infinities: before, evaluate --json wrote a bare NaN (not
    # JSON) and an ensemble put NaN or -Infinity into its own run file.
    "final_error_nan": (
        lambda info: _with(info, lambda i: i["final_error"]["val"].update({"1": float("nan")})),
        "final_error.val['1'] is NaN, not a number",
    ),
    "margin_minus_infinity": (
        lambda info: _with(info, lambda i: i["tpu_tiles"]["keep_default"].update(margin=-1e999)),
        "tpu_tiles.keep_default.margin is -Infinity, not a number",
    ),
    # Before: 34 s and 6.8 GB in evaluate for a 3 MB bomb, and check died of memory.
    "gzip_bomb": (lambda info: "bomb", "it inflates past 32 MB, more than a run file holds"),
    "folder": (None, None),
}


def gzip_bomb(megabytes: int) -> bytes:
    """A gzip stream of `megabytes` MB of zeros, about 1 KB a MB, made from one compressed MB
    repeated (after a full flush the same input compresses to the same bytes). Its trailer's
    check is that of 3 MB: a bomb is refused before it is reached."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip's header and trailer
    mb = bytes(1 << 20)
    first = z.compress(mb) + z.flush(zlib.Z_FULL_FLUSH)
    block = z.compress(mb) + z.flush(zlib.Z_FULL_FLUSH)
    return first + block * (megabytes - 2) + z.compress(mb) + z.flush()


def _damage(run_file: Path, how: str) -> str:
    """Replaces `run_file` as `how` says; returns the message every command must give."""
    make, reason = DAMAGES[how]
    if make is None:
        run_file.unlink()
        run_file.mkdir()
        model = run_file.name.replace("run_", "model_").replace(".jsonz", "")
        return (
            f"{run_file} is a folder, not a run file: copy the run file of {model} again from "
            "the training --out_dir"
        )
    content = make(json.loads(gzip.decompress(run_file.read_bytes())))
    if content == "bomb":
        run_file.write_bytes(gzip_bomb(100))
        return f"{run_file}: not a readable run file ({reason}); {FIX}"
    text = "[" * 100_000 + "]" * 100_000 if content == "deep" else json.dumps(content)
    run_file.write_bytes(gzip.compress(text.encode()))
    return f"{run_file}: not a readable run file ({reason}); {FIX}"


COMMANDS = ["predict", "evaluate", "ensemble", "bundle", "check", "script"]


@pytest.mark.parametrize("how", list(DAMAGES))
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_names_a_damaged_run_file(
    command, how, mlp_seeds, short_test_root, tmp_path, capsys
):
    run = mlp_seeds[0]
    folder = tmp_path / "handin"
    model_dir = folder / run.model_dir.name
    shutil.copytree(run.model_dir, model_dir)
    shutil.copy(run.run_file, folder)
    if command == "check":
        shutil.copy(registry.dropin_file("models.py"), folder / "models.py")
    message = _damage(folder / run.run_file.name, how)
    root, out = str(short_test_root), str(tmp_path / "out")
    argv = {
        "predict": ["predict", "--dir", str(model_dir), "--data_root", root, "--out", out],
        "evaluate": ["evaluate", "--dirs", str(model_dir), "--data_root", root, "--json", out],
        "ensemble": [
            "ensemble",
            f"--dirs={mlp_seeds[1].model_dir},{model_dir}",
            f"--out_dir={out}",
            f"--data_root={root}",
        ],
        "bundle": ["bundle", "--dir", str(model_dir), "--out", out],
        "check": ["check", str(folder), "--data_root", root],
        "script": ["--dir", str(model_dir), "--data_root", root, "--cache_dir", "", "--out", out],
    }[command]
    if command == "script":
        import tiles_gen_predictions_csv as script

        code, prog = script.main(argv), "tiles_gen_predictions_csv.py"
    else:
        code, prog = cli.main(argv), f"tpu-tiles {command}"
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    if command == "check":  # the table says which check failed, the error line why
        row = next(line for line in captured.out.splitlines() if "hash matches" in line)
        assert row.split()[:3] == ["FAIL", "hash", "matches"] and row.endswith(message)
        assert err.startswith(f"{prog}: error: {folder} failed its check: hash matches: ")
        assert err.endswith(message)
    else:
        assert err == f"{prog}: error: {message}"
    assert not (tmp_path / "out").exists()  # nothing written, bundle packed nothing


def test_a_gzip_bomb_is_refused_in_little_memory(tmp_path, monkeypatch):
    """Every reader of a run file's bytes (`read_run_bytes`; `named_results_csv` for the check
    that outputs spare other runs' results CSVs) stops at the limit: the peak of memory shows
    that a bomb of 64 times the limit was not inflated."""
    monkeypatch.setattr(formats, "RUN_FILE_LIMIT", 10**6)
    bomb = gzip_bomb(64)
    path = tmp_path / "run_0.jsonz"
    path.write_bytes(bomb)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"^it inflates past 1 MB, more than a run file"):
            run_file.read_run_bytes(path)
        assert formats.named_results_csv(bomb) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    # A run file under the limit reads as before.
    path.write_bytes(run_file.run_bytes({"args": {"results_csv": "r.csv"}}))
    assert run_file.read_run_bytes(path) == {"args": {"results_csv": "r.csv"}}
    assert formats.named_results_csv(path.read_bytes()) == "r.csv"


def test_a_good_run_file_has_no_problem(mlp_seeds):
    for run in mlp_seeds:
        info = json.loads(gzip.decompress(Path(run.run_file).read_bytes()))
        assert run_file.run_info_problem(info) is None


def test_no_run_file_is_written_with_a_number_json_lacks(mlp_seeds, tmp_path):
    """The writer's side: a NaN is a bug of ours, stopped before a byte is written."""
    info = json.loads(gzip.decompress(Path(mlp_seeds[0].run_file).read_bytes()))
    info["final_error"]["val"]["5"] = float("inf")
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        write_run(tmp_path, info)
    assert list(tmp_path.iterdir()) == []
