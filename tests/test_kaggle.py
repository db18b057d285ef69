"""Kaggle CSV tools: exact bytes, merge by ID, validation messages, create_kaggle_csv.py."""

from __future__ import annotations

import errno
import importlib.util
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import file_mode

from tpu_tiles_models import files, kaggle, safe
from tpu_tiles_models.errors import UserError
from tpu_tiles_models.kaggle import KaggleError

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "create_kaggle_csv.py"


def _sample_rows(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[1:]


def _tile_ids(sample: Path) -> list[str]:
    return [line.split(",")[0] for line in _sample_rows(sample) if line.startswith("tile:xla:")]


def _ranked(seed: int, n: int) -> list[list[int]]:
    """``n`` rows of 5 distinct config indices, different per row."""
    rng = random.Random(seed)
    return [rng.sample(range(50), kaggle.TOP_K) for _ in range(n)]


def _write_predictions(path: Path, ids: list[str], ranks: list[list[int]]) -> Path:
    rows = [(i[len("tile:xla:") :], r) for i, r in zip(ids, ranks)]
    kaggle.write_predictions_csv(path, rows)
    return path


@pytest.fixture
def small_sample(tmp_path) -> Path:
    """A 6-row sample in the real layout: 4 tile rows, 2 layout rows with long dummies."""
    layout = ";".join(map(str, range(40)))
    lines = ["ID,TopConfigs"]
    lines += [f"tile:xla:{c * 32},0;1;2;3;4" for c in "abcd"]
    lines += [f"layout:xla:default:{c * 32},{layout}" for c in "ef"]
    path = tmp_path / "sample_submission.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _write_csv(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(["ID,TopConfigs", *lines]), encoding="utf-8")
    return path


# --- predictions CSV -------------------------------------------------------------------


def test_format_matches_upstream_bytes():
    rows = [("abc_1", [3, 0, 12, 1, 2]), ("ffff", np.array([9, 8, 7, 6, 5], dtype=np.int64))]
    text = kaggle.format_predictions_csv(rows)
    assert text == "ID,TopConfigs\ntile:xla:abc_1,3;0;12;1;2\ntile:xla:ffff,9;8;7;6;5"
    assert kaggle.format_predictions_csv([]) == "ID,TopConfigs\n"


@pytest.mark.parametrize("bad_id", ["tile:xla:abc", "a,b", "", "x\ny"])
def test_format_rejects_bad_tile_ids(bad_id):
    with pytest.raises(KaggleError, match="bad tile id"):
        kaggle.format_predictions_csv([(bad_id, [0, 1, 2, 3, 4])])


def test_format_rejects_float_indices():
    with pytest.raises(TypeError):
        kaggle.format_predictions_csv([("a", [0.0, 1, 2, 3, 4])])


def test_write_then_read_round_trip(tmp_path):
    path = tmp_path / "predictions_model_output.csv"
    kaggle.write_predictions_csv(path, [("b", [4, 3, 2, 1, 0]), ("a", [0, 1, 2, 3, 5])])
    assert path.read_bytes() == b"ID,TopConfigs\ntile:xla:b,4;3;2;1;0\ntile:xla:a,0;1;2;3;5"
    assert list(tmp_path.iterdir()) == [path]  # No temp file left behind.
    got = kaggle.read_predictions_csv(path)
    assert got == {"tile:xla:b": [4, 3, 2, 1, 0], "tile:xla:a": [0, 1, 2, 3, 5]}
    assert list(got) == ["tile:xla:b", "tile:xla:a"]


def test_read_accepts_trailing_newline_crlf_and_bom(tmp_path):
    path = tmp_path / "p.csv"
    path.write_bytes(b"\xef\xbb\xbfID,TopConfigs\r\ntile:xla:a,1;0;2;3;4\r\n")
    assert kaggle.read_predictions_csv(path) == {"tile:xla:a": [1, 0, 2, 3, 4]}


def test_read_errors_name_file_and_ids(tmp_path):
    bad_header = _write_csv(tmp_path / "h.csv", [])
    bad_header.write_text("id,configs\ntile:xla:a,1", encoding="utf-8")
    with pytest.raises(KaggleError, match=r"h\.csv: header is 'id,configs', expected"):
        kaggle.read_predictions_csv(bad_header)

    malformed = _write_csv(tmp_path / "m.csv", ["tile:xla:a,1;2", "tile:xla:b"])
    with pytest.raises(KaggleError, match=r"m\.csv:3: expected 'ID,i1;i2;\.\.\.'"):
        kaggle.read_predictions_csv(malformed)

    dup = _write_csv(tmp_path / "d.csv", ["tile:xla:a,1", "tile:xla:b,1", "tile:xla:a,2"])
    with pytest.raises(KaggleError, match=r"d\.csv: 1 id \(tile:xla:a\) appear on more"):
        kaggle.read_predictions_csv(dup)

    lines = [f"tile:xla:{i},0;x;2" for i in range(5)] + ["tile:xla:ok,1;2"]
    not_int = _write_csv(tmp_path / "n.csv", lines)
    with pytest.raises(KaggleError) as err:
        kaggle.read_predictions_csv(not_int)
    assert "n.csv: 5 ids (tile:xla:0, tile:xla:1, tile:xla:2, ...) have TopConfigs" in str(err)

    with pytest.raises(KaggleError, match=r"predictions file .*nope\.csv not found"):
        kaggle.read_predictions_csv(tmp_path / "nope.csv")


# --- padding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "indices, num_configs, expected",
    [
        ([7, 3, 9, 0, 1, 2], 10, [7, 3, 9, 0, 1]),  # Cut to k, order kept.
        ([7, 3], 10, [7, 3, 0, 1, 2]),  # Short list: real configs fill first.
        ([2, 0, 1], 3, [2, 0, 1, 3, 4]),  # All 3 configs listed, then 3 and 4.
        ([1, 0], 2, [1, 0, 2, 3, 4]),
        ([1, 0, 0, 0, 0], 2, [1, 0, 2, 3, 4]),  # Upstream's zero padding repaired.
        ([], 0, [0, 1, 2, 3, 4]),
    ],
)
def test_pad_top_k(indices, num_configs, expected):
    padded = kaggle.pad_top_k(indices, num_configs)
    assert padded == expected
    assert len(set(padded)) == kaggle.TOP_K


def test_pad_top_k_accepts_numpy_and_other_k():
    assert kaggle.pad_top_k(np.array([4, 1]), 5, k=3) == [4, 1, 0]
    assert all(type(i) is int for i in kaggle.pad_top_k(np.array([4, 1]), 5))


@pytest.mark.parametrize("bad", [[5], [-1]])
def test_pad_top_k_rejects_out_of_range(bad):
    with pytest.raises(KaggleError, match="out of range for 5 configs"):
        kaggle.pad_top_k(bad, 5)


# --- merge with the real sample --------------------------------------------------------


def test_merge_by_id_keeps_sample_order_and_layout_rows(sample_submission, tmp_path):
    ids = _tile_ids(sample_submission)
    assert len(ids) == 844
    ranks = dict(zip(ids, _ranked(0, len(ids))))
    shuffled = ids[:]
    random.Random(1).shuffle(shuffled)
    preds = _write_predictions(tmp_path / "p.csv", shuffled, [ranks[i] for i in shuffled])
    out = tmp_path / "predictions_kaggle.csv"

    counts = kaggle.merge_kaggle(sample_submission, preds, out)

    assert counts == {"rows": 894, "tile_rows": 844, "kept_rows": 50}
    sample_lines = _sample_rows(sample_submission)
    data = out.read_bytes()
    assert data.startswith(b"ID,TopConfigs\n") and data.endswith(b"\n")
    out_lines = data.decode().splitlines()[1:]
    assert [line.split(",")[0] for line in out_lines] == [s.split(",")[0] for s in sample_lines]
    for ours, theirs in zip(out_lines, sample_lines):
        row_id, value = ours.split(",")
        if row_id.startswith("tile:xla:"):
            assert value == ";".join(map(str, ranks[row_id]))
        else:
            assert ours == theirs  # Layout rows byte-identical.


def test_merge_matches_pandas_to_csv_bytes(sample_submission, tmp_path):
    """The output is what pandas' to_csv(index=False) writes for the merged table."""
    import pandas as pd  # The course script's writer; a test-only dependency (setup.py).

    ids = _tile_ids(sample_submission)
    ranks = _ranked(2, len(ids))
    preds = _write_predictions(tmp_path / "p.csv", ids, ranks)
    out = tmp_path / "k.csv"
    kaggle.merge_kaggle(sample_submission, preds, out)

    table = pd.read_csv(sample_submission).set_index("ID")
    table.loc[ids, "TopConfigs"] = [";".join(map(str, r)) for r in ranks]
    expected = tmp_path / "pandas.csv"
    table.reset_index().to_csv(expected, index=False)
    assert out.read_bytes() == expected.read_bytes()


def test_merging_the_sample_into_itself_reproduces_it(sample_submission, tmp_path):
    preds = tmp_path / "p.csv"
    lines = [line for line in _sample_rows(sample_submission) if line.startswith("tile:")]
    _write_csv(preds, lines)
    out = tmp_path / "k.csv"
    kaggle.merge_kaggle(sample_submission, preds, out)
    assert out.read_bytes() == sample_submission.read_bytes()


# --- validation errors -----------------------------------------------------------------

A, B, C, D = (f"tile:xla:{c * 32}" for c in "abcd")
GOOD = {A: "0;1;2;3;4", B: "4;3;2;1;0", C: "9;8;7;6;5", D: "5;6;7;8;9"}


@pytest.mark.parametrize(
    "change, message",
    [
        ({B: None, D: None}, f"2 ids ({B}, {D}) of the sample submission have no prediction"),
        ({"tile:xla:zz": "0;1;2;3;4"}, "1 id (tile:xla:zz) are not tile:xla ids of the sample"),
        ({"layout:xla:default:" + "e" * 32: "0;1;2;3;4"}, "are not tile:xla ids of the sample"),
        ({A: "0;1;2;3", C: "0;1;2;3;4;5"}, f"2 ids ({A}, {C}) do not list exactly 5 configs"),
        ({D: "0;1;-2;3;4"}, f"1 id ({D}) list negative config indices"),
        ({B: "0;1;1;3;4", C: "0;0;0;0;0"}, f"2 ids ({B}, {C}) repeat a config index"),
        ({A: "0;1;2.5;3;4"}, f"1 id ({A}) have TopConfigs that are not ';'-separated integers"),
    ],
)
def test_merge_validation_errors(small_sample, tmp_path, change, message):
    rows = {**GOOD, **change}
    preds = _write_csv(tmp_path / "preds.csv", [f"{k},{v}" for k, v in rows.items() if v])
    out = tmp_path / "out.csv"
    with pytest.raises(KaggleError) as err:
        kaggle.merge_kaggle(small_sample, preds, out)
    assert message in str(err.value)
    assert "preds.csv" in str(err.value) and "\n" not in str(err.value)
    assert not out.exists()


def test_merge_duplicate_ids_error(small_sample, tmp_path):
    lines = [f"{k},{v}" for k, v in GOOD.items()] + [f"{C},0;1;2;3;4"]
    preds = _write_csv(tmp_path / "preds.csv", lines)
    with pytest.raises(KaggleError, match=rf"preds\.csv: 1 id \({C}\) appear on more"):
        kaggle.merge_kaggle(small_sample, preds, tmp_path / "out.csv")


def test_many_offenders_are_summarised(small_sample, tmp_path):
    preds = _write_csv(tmp_path / "preds.csv", [f"{A},0;1;2;3;4"])
    with pytest.raises(KaggleError, match=rf"3 ids \({B}, {C}, {D}\) of the sample"):
        kaggle.merge_kaggle(small_sample, preds, tmp_path / "out.csv")
    many = [f"tile:xla:x{i},0;1;2;3;4" for i in range(7)] + [f"{k},{v}" for k, v in GOOD.items()]
    _write_csv(tmp_path / "preds.csv", many)
    with pytest.raises(
        KaggleError, match=r"7 ids \(tile:xla:x0, tile:xla:x1, tile:xla:x2, \.\.\.\)"
    ):
        kaggle.merge_kaggle(small_sample, preds, tmp_path / "out.csv")


def test_missing_sample_says_where_to_get_it(tmp_path):
    preds = _write_csv(tmp_path / "p.csv", [f"{A},0;1;2;3;4"])
    with pytest.raises(KaggleError) as err:
        kaggle.merge_kaggle(tmp_path / "sample_submission.csv", preds, tmp_path / "o.csv")
    text = str(err.value)
    assert "sample_submission.csv not found" in text
    assert "'predict-ai-model-runtime'" in text and "ADAPT-uiuc/tpu_graphs_scripts" in text
    assert "--sample PATH" in text


def test_kaggle_module_imports_no_tensorflow():
    """A fresh interpreter: importing the CSV tools (and the package) loads no TensorFlow."""
    code = "import tpu_tiles_models.kaggle, sys; print('tensorflow' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout == "False\n"


def test_errors_are_user_errors_and_still_value_errors():
    assert issubclass(KaggleError, UserError) and issubclass(KaggleError, ValueError)


# --- --out: folders, inputs, permissions ------------------------------------------------


def _good_predictions(folder: Path) -> Path:
    return _write_csv(folder / "preds.csv", [f"{k},{v}" for k, v in GOOD.items()])


def test_out_folder_is_one_line_naming_the_flag(small_sample, tmp_path):
    preds = _good_predictions(tmp_path)
    folder = tmp_path / "subs"
    folder.mkdir()
    with pytest.raises(files.WriteError) as err:
        kaggle.merge_kaggle(small_sample, preds, folder)
    assert str(err.value) == f"--out {folder} is a folder; pass the path of a file to write"
    with pytest.raises(files.WriteError) as err:
        kaggle.write_predictions_csv(folder, [("a", [0, 1, 2, 3, 4])])
    assert str(err.value) == f"--out {folder} is a folder; pass the path of a file to write"
    assert isinstance(err.value, UserError)
    assert list(folder.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "preds.csv",
        "sample_submission.csv",
        "subs",
    ]


def test_out_under_a_file_names_the_flag_not_errno_17(small_sample, tmp_path):
    preds = _good_predictions(tmp_path)
    with pytest.raises(files.WriteError) as err:
        kaggle.merge_kaggle(small_sample, preds, preds / "k.csv")
    message = str(err.value)
    assert (
        message == f"--out {preds / 'k.csv'}: {preds} is a file, not a folder; pass another --out"
    )
    assert "Errno" not in message
    with pytest.raises(files.WriteError, match=r"^--results_csv .* is a file, not a folder"):
        kaggle.write_predictions_csv(preds / "r.csv", [], flag="--results_csv")


def _same_file_cases(tmp_path: Path, sample: Path, preds: Path) -> list[tuple[str, str, Path]]:
    """(flag, --out as given, input it names): by name, relative path, symlink, hard link.

    The names are relative to ``tmp_path``, which holds both inputs: run from there.
    """
    (tmp_path / "link.csv").symlink_to(sample)
    os.link(preds, tmp_path / "hard.csv")
    return [
        ("--sample", sample.name, sample),
        ("--sample", f"./sub/../{sample.name}", sample),
        ("--inputcsv", preds.name, preds),
        ("--sample", "link.csv", sample),
        ("--inputcsv", "hard.csv", preds),
    ]


def test_out_equal_to_an_input_is_refused_and_the_input_kept(small_sample, tmp_path, monkeypatch):
    preds = _good_predictions(tmp_path)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    before = {p: p.read_bytes() for p in (small_sample, preds)}
    for flag, out, named in _same_file_cases(tmp_path, small_sample, preds):
        with pytest.raises(safe.OutputError) as err:  # the check every command shares
            kaggle.merge_kaggle(small_sample, preds, out)
        assert str(err.value) == (
            f"--out {out} is the {flag} file {named}; writing it would destroy that input, "
            "so pass another --out (e.g. predictions_kaggle.csv)"
        )
        assert {p: p.read_bytes() for p in before} == before
    assert (tmp_path / "link.csv").is_symlink()
    assert sorted(os.listdir(tmp_path)) == [
        "hard.csv",
        "link.csv",
        "preds.csv",
        "sample_submission.csv",
        "sub",
    ]


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o002, 0o664)])
def test_csvs_are_written_with_the_umask(small_sample, tmp_path, umask, mask, expected):
    umask(mask)
    preds = tmp_path / "p.csv"
    kaggle.write_predictions_csv(preds, [(i[len("tile:xla:") :], [0, 1, 2, 3, 4]) for i in GOOD])
    out = tmp_path / "k.csv"
    kaggle.merge_kaggle(small_sample, preds, out)
    assert (file_mode(preds), file_mode(out)) == (expected, expected)


def test_unreadable_inputs_are_one_line(small_sample, tmp_path):
    out = tmp_path / "k.csv"
    with pytest.raises(KaggleError, match=r"^predictions file .* is a folder; pass the CSV"):
        kaggle.merge_kaggle(small_sample, tmp_path, out)
    binary = tmp_path / "model.npz"
    binary.write_bytes(b"PK\x03\x04\xff\xfe")
    with pytest.raises(KaggleError) as err:
        kaggle.merge_kaggle(small_sample, binary, out)
    assert (
        str(err.value) == f"{binary}: not a UTF-8 text file (byte 4); expected an ID,TopConfigs CSV"
    )
    assert not out.exists()


# --- create_kaggle_csv.py --------------------------------------------------------------


def _run_script(cwd: Path, *args: str, standalone: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TPU_TILES_STANDALONE", None)
    if standalone:
        env["TPU_TILES_STANDALONE"] = "1"
    return subprocess.run(
        [sys.executable, str(cwd / "create_kaggle_csv.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def kaggle_step_root(tmp_path, sample_submission) -> Path:
    """A directory laid out like an upstream root after the course steps."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(SCRIPT, root / "create_kaggle_csv.py")
    shutil.copy(sample_submission, root / "sample_submission.csv")
    ids = _tile_ids(sample_submission)
    order = ids[::-1]  # Not the sample's order: the merge must go by ID.
    _write_predictions(root / "predictions_model_output.csv", order, _ranked(3, len(ids)))
    return root


def test_script_package_and_standalone_write_identical_bytes(kaggle_step_root, sample_submission):
    with_package = _run_script(kaggle_step_root, standalone=False)
    assert with_package.returncode == 0, with_package.stderr
    assert "(tpu_tiles_models)" in with_package.stdout
    out = kaggle_step_root / "predictions_kaggle.csv"
    package_bytes = out.read_bytes()
    out.unlink()

    alone = _run_script(kaggle_step_root, standalone=True)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.strip().endswith("(standalone)")
    assert "894 rows, 844 tile:xla rows" in alone.stdout
    assert out.read_bytes() == package_bytes


def test_script_standalone_options_and_errors(kaggle_step_root):
    root = kaggle_step_root
    shutil.move(root / "predictions_model_output.csv", root / "mine.csv")
    ok = _run_script(root, "--inputcsv", "mine.csv", "--out", "sub.csv", standalone=True)
    assert ok.returncode == 0, ok.stderr
    assert (root / "sub.csv").read_bytes().count(b"\n") == 895

    gone = _run_script(root, "--inputcsv", "mine.csv", "--sample", "x.csv", standalone=True)
    assert gone.returncode == 2
    assert gone.stderr.count("\n") == 1
    assert "x.csv not found" in gone.stderr and "predict-ai-model-runtime" in gone.stderr

    lines = (root / "mine.csv").read_text().splitlines()
    _write_csv(root / "bad.csv", lines[1:3] + [lines[3].replace(";", ";;", 1)] + lines[4:])
    bad = _run_script(root, "--inputcsv", "bad.csv", standalone=True)
    assert bad.returncode == 2
    assert f"1 ids ({lines[3].split(',')[0]}) are not 5 distinct" in bad.stderr
    _write_csv(root / "short.csv", lines[1:-4])
    short = _run_script(root, "--inputcsv", "short.csv", standalone=True)
    assert "4 ids (" in short.stderr and "have no prediction" in short.stderr


def _load_script():
    spec = importlib.util.spec_from_file_location("create_kaggle_csv", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_main_with_package_reports_one_line(kaggle_step_root, capsys, monkeypatch):
    monkeypatch.delenv("TPU_TILES_STANDALONE", raising=False)
    monkeypatch.chdir(kaggle_step_root)
    script = _load_script()
    assert script.main(["--inputcsv", "missing.csv"]) == 2
    err = capsys.readouterr().err
    assert err == "create_kaggle_csv.py: error: predictions file missing.csv not found\n"


# create_kaggle_csv.py's flags, which are also `tpu-tiles kaggle`'s: messages name no others.
SCRIPT_FLAGS = {"--help", "--inputcsv", "--sample", "--out"}
MODES = ("tpu_tiles_models", "standalone")


def _script_main(monkeypatch, mode: str, *args: str) -> int:
    """Runs create_kaggle_csv.main in this process with the package or the fallback."""
    monkeypatch.setenv("TPU_TILES_STANDALONE", "1" if mode == "standalone" else "0")
    return _load_script().main(list(args))


def _one_error_line(capsys) -> str:
    """The single stderr line of a failed run, checked to name only the script's flags."""
    err = capsys.readouterr().err
    assert err.startswith("create_kaggle_csv.py: error: ") and err.count("\n") == 1, err
    assert set(re.findall(r"--\w+", err)) <= SCRIPT_FLAGS
    assert ".tmp" not in err and "Errno" not in err
    return err[len("create_kaggle_csv.py: error: ") : -1]


@pytest.fixture
def submission_dir(tmp_path, small_sample, monkeypatch) -> Path:
    """The current directory: the small sample and predictions_model_output.csv for it."""
    _write_csv(tmp_path / "predictions_model_output.csv", [f"{k},{v}" for k, v in GOOD.items()])
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_script_flags_are_the_ones_messages_name(capsys):
    with pytest.raises(SystemExit):
        _load_script().main(["--help"])
    assert set(re.findall(r"(?<![\w-])--\w+", capsys.readouterr().out)) == SCRIPT_FLAGS


@pytest.mark.parametrize("mode", MODES)
def test_script_out_folder_fails_without_a_stray_file(submission_dir, monkeypatch, capsys, mode):
    (submission_dir / "subs").mkdir()
    before = sorted(os.listdir(submission_dir))
    assert _script_main(monkeypatch, mode, "--out", "subs") == 2
    assert _one_error_line(capsys) == "--out subs is a folder; pass the path of a file to write"
    assert sorted(os.listdir(submission_dir)) == before and os.listdir("subs") == []


@pytest.mark.parametrize(
    "mode, message",
    [
        (
            "tpu_tiles_models",
            "--out preds/k.csv: preds is a file, not a folder; pass another --out",
        ),
        (
            "standalone",
            "cannot write --out preds/k.csv (a folder on its path is a file); pass another --out",
        ),
    ],
)
def test_script_out_under_a_file_is_one_line(submission_dir, monkeypatch, capsys, mode, message):
    (submission_dir / "preds").write_text("keep")
    before = sorted(os.listdir(submission_dir))
    assert _script_main(monkeypatch, mode, "--out", "preds/k.csv") == 2
    assert _one_error_line(capsys) == message
    assert sorted(os.listdir(submission_dir)) == before


@pytest.mark.parametrize("mode", MODES)
def test_script_failed_or_interrupted_write_leaves_the_old_out(
    submission_dir, monkeypatch, capsys, mode
):
    (submission_dir / "predictions_kaggle.csv").write_text("old")
    before = sorted(os.listdir(submission_dir))

    def fail(*_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    assert _script_main(monkeypatch, mode) == 2
    assert "cannot write --out predictions_kaggle.csv (No space left on device)" in (
        _one_error_line(capsys)
    )

    def interrupt(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupt)
    assert _script_main(monkeypatch, mode) == 130
    assert capsys.readouterr().err == (
        "create_kaggle_csv.py: interrupted; predictions_kaggle.csv left as it was\n"
    )
    assert sorted(os.listdir(submission_dir)) == before
    assert (submission_dir / "predictions_kaggle.csv").read_text() == "old"


@pytest.mark.parametrize("mode", MODES)
def test_script_refuses_out_equal_to_an_input(submission_dir, monkeypatch, capsys, mode):
    sample, preds = (
        submission_dir / "sample_submission.csv",
        submission_dir / "predictions_model_output.csv",
    )
    (submission_dir / "sub").mkdir()
    cases = _same_file_cases(submission_dir, sample, preds)
    cases = [(f, out, p.name) for f, out, p in cases]  # The script passes the flags' text.
    before = {p: p.read_bytes() for p in (sample, preds)}
    for flag, out, named in cases:
        assert _script_main(monkeypatch, mode, "--out", out) == 2
        assert _one_error_line(capsys) == (
            f"--out {out} is the {flag} file {named}; writing it would destroy that input, "
            "so pass another --out (e.g. predictions_kaggle.csv)"
        )
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o002, 0o664)])
def test_script_output_mode_follows_the_umask(
    submission_dir, monkeypatch, capsys, umask, mode, mask, expected
):
    umask(mask)
    assert _script_main(monkeypatch, mode) == 0, capsys.readouterr().err
    assert file_mode(submission_dir / "predictions_kaggle.csv") == expected


@pytest.mark.parametrize("row", ["0;1;2;3", "0;0;0;0;0"])
def test_count_errors_say_how_to_write_the_predictions_again(small_sample, tmp_path, row):
    """Not the Python function `kaggle.pad_top_k`: the command that writes them right."""
    rows = {**GOOD, A: row}
    preds = _write_csv(tmp_path / "preds.csv", [f"{k},{v}" for k, v in rows.items()])
    with pytest.raises(KaggleError) as err:
        kaggle.merge_kaggle(small_sample, preds, tmp_path / "out.csv")
    assert str(err.value).endswith(
        "; write them again with tpu-tiles predict --top_k 5 (or our "
        "tiles_gen_predictions_csv.py), which lists that many distinct configs per kernel"
    )
    assert "pad_top_k" not in str(err.value)
