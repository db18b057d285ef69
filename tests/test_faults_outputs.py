"""Outputs under faults, at the command line: ids that are not names, outputs over a finished
run's files, repeated backups, two writers at once, link loops, a standard output that cannot
be written, a full disk, and stop signals at the very end."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tpu_tiles_models import cli, formats, install, locks, safe

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--train", "2", "--valid", "1", "--max_configs", "6", "--no_progress"]


def _one_line(capsys, code: int, status: int = 2) -> str:
    """The one stderr line of a command that exited `status`."""
    err = capsys.readouterr().err.strip()
    assert code == status and len(err.splitlines()) == 1, (code, err)
    return err


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# -- synth --test_ids_from: ids are names -----------------------------------------------------


@pytest.mark.parametrize(
    "tile_id, why",
    [
        ("../../victim", "holds a path separator"),
        ("/abs/victim", "holds a path separator"),
        ("a/b", "holds a path separator"),
        ("a\\b", "holds a path separator"),
        ("", "is empty after the prefix"),
        (".hidden", "starts with a dot (a hidden file, or a parent folder)"),
        ("..", "starts with a dot (a hidden file, or a parent folder)"),
        ("tab\there", "holds a control character"),
    ],
)
def test_synth_takes_only_plain_names_from_test_ids_from(tmp_path, capsys, tile_id, why):
    """An id becomes test/<id>.npz: one that is not a plain name is refused before anything
    is written (no OUT, no file outside it, an unrelated victim.npz as it was)."""
    sample = tmp_path / "sample_submission.csv"
    sample.write_text(f"ID,TopConfigs\ntile:xla:fine_1,0\ntile:xla:{tile_id},0\n")
    victim = tmp_path / "victim.npz"
    victim.write_bytes(b"not ours")
    out = tmp_path / "a" / "d"
    code = cli.main(["synth", str(out), "--test_ids_from", str(sample), *SMALL])
    assert _one_line(capsys, code) == (
        f"tpu-tiles synth: error: --test_ids_from {sample}: id 2, {'tile:xla:' + tile_id!r}, "
        f"{why}; each id names a file in test/, so it must be a plain name (no / or \\, no "
        "leading dot); give the competition's sample_submission.csv"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample_submission.csv", "victim.npz"]
    assert victim.read_bytes() == b"not ours"


def test_synth_refuses_a_repeated_test_id(tmp_path, capsys):
    """Before: exit 0, and the repeat written under an id the sample lacks (its md5)."""
    sample = tmp_path / "sample_submission.csv"
    sample.write_text("ID,TopConfigs\ntile:xla:a1,0\ntile:xla:b2,0\ntile:xla:a1,0\n")
    out = tmp_path / "d"
    code = cli.main(["synth", str(out), "--test_ids_from", str(sample), *SMALL])
    assert _one_line(capsys, code) == (
        f"tpu-tiles synth: error: --test_ids_from {sample}: id 3, 'tile:xla:a1', repeats id 1; "
        "each id names one test kernel, so keep one row per id (the competition's "
        "sample_submission.csv has each once)"
    )
    assert not out.exists()


def test_a_given_test_id_stands_when_a_train_kernel_would_take_it(tmp_path, capsys):
    """The train kernel's generated id moves aside; the test kernel keeps the sample's id
    (before: the test kernel got the md5 of it, an id the sample lacks)."""
    plain = tmp_path / "plain"
    assert cli.main(["synth", str(plain), *SMALL]) == 0
    taken = sorted(p.stem for p in (plain / "train").glob("*.npz"))[0]
    sample = tmp_path / "sample_submission.csv"
    sample.write_text(f"ID,TopConfigs\ntile:xla:{taken},0\ntile:xla:b2,0\n")
    out = tmp_path / "d"
    assert cli.main(["synth", str(out), "--test_ids_from", str(sample), *SMALL]) == 0
    assert sorted(p.stem for p in (out / "test").glob("*.npz")) == sorted([taken, "b2"])
    assert taken + "0" in {p.stem for p in (out / "train").glob("*.npz")}


def test_synth_writes_the_test_ids_it_is_given(tmp_path, capsys):
    sample = tmp_path / "sample_submission.csv"
    sample.write_text("ID,TopConfigs\ntile:xla:b-2_x.y,0\ntile:xla:a1,0\n")
    assert cli.main(["synth", str(tmp_path / "d"), "--test_ids_from", str(sample), *SMALL]) == 0
    assert sorted(p.name for p in (tmp_path / "d" / "test").iterdir()) == ["a1.npz", "b-2_x.y.npz"]


# -- no output over a finished run's results CSV or curve --------------------------------------


def test_no_command_writes_over_a_runs_results_csv_or_curve(mlp_seeds, tmp_path, capsys):
    """predict --out, evaluate --json and kaggle --out over the CSV a run file names, and
    predict --out over another run's training curve: each refused in one line before any
    work, the file as it was."""
    first, second = mlp_seeds[0], mlp_seeds[1]
    csv, h = Path(first.results_csv), formats.run_hash(Path(second.model_dir).name)
    curve = Path(second.model_dir).parent / formats.curve_name(h)
    assert curve.is_file() and csv.is_file()
    before = {p: p.read_bytes() for p in (csv, curve)}
    sample, preds = tmp_path / "sample.csv", tmp_path / "preds.csv"
    sample.write_text("ID,TopConfigs\n")
    preds.write_text("ID,TopConfigs\n")
    run_file = formats.run_file_name(formats.run_hash(Path(first.model_dir).name))
    data = [f"--data_root={first.args.data_root}", "--no_progress"]
    cases = [
        (["predict", "--dir", str(first.model_dir), "--out", str(csv), *data],
         "--out", csv, f"the results CSV that {run_file} names"),
        (["evaluate", "--dirs", str(second.model_dir), "--json", str(csv), *data],
         "--json", csv, f"the results CSV that {run_file} names"),
        (["kaggle", "--sample", str(sample), "--inputcsv", str(preds), "--out", str(csv)],
         "--out", csv, f"the results CSV that {run_file} names"),
        (["predict", "--dir", str(first.model_dir), "--out", str(curve), *data],
         "--out", curve, f"the training curve of {formats.run_file_name(h)}"),
    ]  # fmt: skip
    for argv, flag, path, what in cases:
        err = _one_line(capsys, cli.main(argv))
        assert err == (
            f"tpu-tiles {argv[0]}: error: {flag} {path} is {what}, part of a finished training "
            f"run; writing it would break that run, so pass another {flag}"
            + (" (e.g. predictions_kaggle.csv)" if argv[0] == "kaggle" else "")
        )
    assert {p: p.read_bytes() for p in before} == before


def test_only_what_a_run_file_names_is_kept_from_other_writers(mlp_run):
    """The rule is about what a run file names, not about the folder; and a rerun of the
    same run (`train --overwrite`) may replace its own CSV and curve."""
    folder, h = Path(mlp_run.model_dir).parent, formats.run_hash(Path(mlp_run.model_dir).name)
    other = folder / "results_notes.csv"
    other.write_text("mine\n")
    try:
        safe.claim(
            [safe.Output(other, "--out"), safe.Output(folder / "train_curve_x.png", "--png")]
        )
    finally:
        other.unlink()
    own = [mlp_run.results_csv, folder / formats.curve_name(h)]
    safe.claim([safe.Output(path, "--out_dir", run=h) for path in own])
    for path in own:
        with pytest.raises(safe.OutputError):
            safe.claim([safe.Output(path, "--out_dir", run="another")])


# -- install --force keeps every edited copy ---------------------------------------------------


def test_install_force_twice_keeps_both_edited_copies(upstream_checkout, capsys):
    models = upstream_checkout / install.DROPIN["models.py"]
    kept = upstream_checkout / install.BACKUP_DIR / (install.DROPIN["models.py"] + ".modified")
    second = kept.with_name("models.py.2.modified")
    assert cli.main(["install", str(upstream_checkout)]) == 0
    for edit in ("# edit one\n", "# edit two\n", "# edit two\n"):
        models.write_text(edit)
        assert cli.main(["install", str(upstream_checkout), "--force"]) == 0
    out = capsys.readouterr().out
    assert f"your edited copy kept as {kept})" in out
    assert f"your edited copy kept as {second})" in out
    assert f"your edited copy is already kept as {second})" in out
    assert kept.read_text() == "# edit one\n" and second.read_text() == "# edit two\n"
    models.write_text("# edit three\n")
    assert cli.main(["install", str(upstream_checkout), "--uninstall"]) == 2  # an edit: refused
    capsys.readouterr()
    assert cli.main(["install", str(upstream_checkout), "--uninstall", "--force"]) == 0
    out = capsys.readouterr().out
    assert f"kept your earlier edited copy {kept}" in out
    assert f"kept your earlier edited copy {second}" in out
    assert kept.read_text() == "# edit one\n" and second.read_text() == "# edit two\n"


# -- one writer at a time ----------------------------------------------------------------------


def _held_by_me(command: str) -> str:
    return f"is being written by tpu-tiles {command} (pid {os.getpid()})"


def test_a_second_writer_is_refused_while_the_first_holds_the_output(
    synth_root, mlp_run, tmp_path, capsys
):
    """Each command that fills an output claims it first; a second one (here the claim is
    held by this test, as a running command holds it) stops in one line naming the holder,
    and writes nothing."""
    d, hand_in, report = tmp_path / "d", tmp_path / "hand_in", tmp_path / "r.json"
    cases = [
        (d, "OUT", "synth", ["synth", str(d), *SMALL]),
        (hand_in, "--out", "bundle", ["bundle", "--dir", str(mlp_run.model_dir), "--out",
                                      str(hand_in)]),
        (report, "--json", "inspect", ["inspect", str(synth_root), "--json", str(report),
                                       "--no_progress"]),
        (tmp_path / "sweep", "--out_dir", "sweep", ["sweep", "--grid", "seed=0,1", "--out_dir",
         str(tmp_path / "sweep"), f"--data_root={synth_root}", "--no_progress"]),
    ]  # fmt: skip
    for path, flag, command, argv in cases:
        with locks.claim(path, flag=flag, command=command):
            err = _one_line(capsys, cli.main(argv))
        assert err == (
            f"tpu-tiles {command}: error: {flag} {path} {_held_by_me(command)}; wait for it "
            f"to end, or pass another {flag}"
        )
    assert os.listdir(tmp_path) == []  # no output, and no lock file left behind


def test_a_claim_holds_however_the_output_is_spelled(tmp_path, capsys, monkeypatch):
    """Issue 48, defect 3: while OUT A is claimed, `synth L` (L a link to A), `synth ./A/`,
    `synth sub/../A` and A's absolute path through the link are refused: the lock is the one
    beside A's real path (`files.canonical`), not one per spelling."""
    a = tmp_path / "A"
    a.mkdir()
    (tmp_path / "L").symlink_to(a)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    with locks.claim(a, flag="OUT", command="synth"):
        for spelled in ("L", "./A/", "sub/../A", f"{tmp_path}/L/"):
            err = _one_line(capsys, cli.main(["synth", spelled, "--seed", "2", *SMALL]))
            assert err == (
                f"tpu-tiles synth: error: OUT {Path(spelled)} {_held_by_me('synth')}; wait for "
                "it to end, or pass another OUT"
            )
        assert sorted(os.listdir(tmp_path)) == [".A.lock", "A", "L", "sub"]
        assert os.listdir(a) == []
    assert cli.main(["synth", "L", *SMALL]) == 0  # the claim gone, the link writes into A
    assert sorted(os.listdir(a)) == ["test", "train", "valid"]
    assert sorted(os.listdir(tmp_path)) == ["A", "L", "sub"]


def test_a_lock_left_by_a_killed_writer_does_not_block(tmp_path, capsys):
    """A process killed (SIGKILL) while it holds the claim leaves its lock file; the kernel has
    released its lock, so the next synth goes ahead (and removes the file)."""
    out = tmp_path / "d"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from tpu_tiles_models import locks
            with locks.claim({str(out)!r}, flag="OUT", command="synth"):
                print("held", flush=True)
                sys.stdin.read()
            """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    assert holder.stdout.readline() == "held\n"
    err = _one_line(capsys, cli.main(["synth", str(out), *SMALL]))
    assert f"is being written by tpu-tiles synth (pid {holder.pid})" in err
    holder.kill()
    holder.wait()
    assert locks.lock_path(out).exists()  # what kill -9 leaves
    assert cli.main(["synth", str(out), *SMALL]) == 0
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_a_folder_in_a_folder_that_cannot_be_written_is_locked_inside(
    tmp_path, monkeypatch, capsys
):
    """OUT writable, its parent not (a mount point, /kaggle/working): the lock goes inside
    OUT, where a second writer looks for it too."""
    out = tmp_path / "d"
    out.mkdir()
    real_open = os.open

    def parent_refuses(path, flags, *args, **kwargs):
        if Path(path) == locks.lock_path(out):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", parent_refuses)
    with locks.claim(out, flag="OUT", command="synth"):
        assert (out / locks.INSIDE).is_file()
        err = _one_line(capsys, cli.main(["synth", str(out), *SMALL]))
        assert err.endswith(
            f"OUT {out} {_held_by_me('synth')}; wait for it to end, or pass another OUT"
        )
    assert os.listdir(out) == []
    assert cli.main(["synth", str(out), *SMALL]) == 0
    assert sorted(os.listdir(out)) == ["test", "train", "valid"]


# -- a model dir that is a link to itself -------------------------------------------------------


def test_a_link_loop_is_one_line(synth_root, tmp_path, capsys):
    loop = tmp_path / "model_loop"
    loop.symlink_to(loop)
    for argv in (
        [
            "predict",
            "--dir",
            str(loop),
            "--out",
            str(tmp_path / "p.csv"),
            f"--data_root={synth_root}",
        ],
        ["bundle", "--dir", str(loop), "--out", str(tmp_path / "b")],
        ["evaluate", "--dirs", str(loop), f"--data_root={synth_root}", "--no_progress"],
        ["bundle", "--dir", str(tmp_path), "--out", str(loop)],
    ):
        err = _one_line(capsys, cli.main(argv))
        assert err.endswith(
            f"{loop}: a symbolic link that leads back to itself (a loop); point it at a real "
            "file or folder, or pass that"
        ), err
    assert sorted(os.listdir(tmp_path)) == ["model_loop"]


# -- a working folder too deep, or gone ----------------------------------------------------------


def test_a_relative_output_in_a_folder_deeper_than_path_max_is_one_line(
    mlp_run, tmp_path, monkeypatch, capsys
):
    """Issue 48, defect 13: in a working folder whose path is longer than PATH_MAX, a
    relative output (every command that writes one, TensorFlow or not) is one line naming its
    flag, where its canonical path is made (`files.canonical`), not an OSError traceback."""
    monkeypatch.chdir(tmp_path)
    limit = os.pathconf("/", "PC_PATH_MAX")
    while len(os.getcwd()) < limit + 100:  # a long path is reached one short step at a time
        os.mkdir("d" * 200)
        os.chdir("d" * 200)
    for flag, name, argv in (
        ("OUT", "out", ["synth", "out", *SMALL]),
        ("--out", "k.csv", ["kaggle", "--out", "k.csv"]),
        ("--out", "hand_in", ["bundle", "--dir", str(mlp_run.model_dir), "--out", "hand_in"]),
        ("ROOT", "up", ["install", "up"]),
    ):
        size = len(os.fsencode(os.path.join(os.getcwd(), name)))
        assert _one_line(capsys, cli.main(argv)) == (
            f"tpu-tiles {argv[0]}: error: {flag} {name}: its full path is {size} bytes long, "
            f"more than the {limit - 1} this system allows; work in a folder with a shorter path"
        )
    assert os.listdir(".") == []


def test_a_relative_output_in_a_removed_working_folder_is_one_line(tmp_path, monkeypatch, capsys):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert _one_line(capsys, cli.main(["synth", "out", *SMALL])) == (
        "tpu-tiles synth: error: OUT out: the working folder is gone (No such file or "
        "directory); cd to a folder that exists"
    )


# -- standard output that cannot be written ------------------------------------------------------


def _inspect(root: Path, report: Path, **popen) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), **popen.pop("env", {}))
    argv = [sys.executable, "-m", "tpu_tiles_models.cli", "inspect", str(root), "--no_progress"]
    return subprocess.run(
        [*argv, "--json", str(report)], env=env, stderr=subprocess.PIPE, text=True, **popen
    )


def test_a_closed_pipe_on_stdout_loses_no_file(synth_root, tmp_path):
    """`inspect ... --json r.json | head -1`: the reader is gone before the first line (a
    pipe whose read end is closed), yet the report is written, with no traceback; the
    status is the shell's for SIGPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = _inspect(synth_root, tmp_path / "r.json", stdout=write)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")
    assert json.loads((tmp_path / "r.json").read_text())["splits"]["train"]["kernels"] == 24


def test_stdout_on_a_full_device_is_one_line(synth_root, tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        done = _inspect(synth_root, tmp_path / "r.json", stdout=full)
    assert done.returncode == 2
    assert done.stderr == (
        "tpu-tiles inspect: error: cannot write to standard output (No space left on device); "
        "the files it writes are complete; send the output where it can be written\n"
    )
    assert json.loads((tmp_path / "r.json").read_text())["format"]


def test_a_non_ascii_path_on_an_ascii_stdout(synth_root, tmp_path):
    report = tmp_path / "r\u00e9sum\u00e9.json"
    done = _inspect(synth_root, report, stdout=subprocess.PIPE, env={"PYTHONIOENCODING": "ascii"})
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[-1] == f"wrote {tmp_path}/r\\xe9sum\\xe9.json"
    assert report.is_file()


# -- a full disk is found before the work -------------------------------------------------------


def test_a_full_disk_is_found_before_the_work(mlp_run, synth_root, tmp_path, monkeypatch, capsys):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1000))

    def full(*args, **kwargs):  # what naming the holder in a lock file meets on a full disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", full)

    def no_work(*args, **kwargs):
        raise AssertionError("the work started")

    from tpu_tiles_models import runs
    from tpu_tiles_models.inspection import command

    monkeypatch.setattr(runs.TrainedRun, "load", no_work)
    monkeypatch.setattr(command, "inspect_root", no_work)
    out = tmp_path / "sub" / "out"
    data = [f"--data_root={synth_root}", "--no_progress"]
    cases = [
        (["predict", "--dir", str(mlp_run.model_dir), "--out", str(out), *data], "--out"),
        (["evaluate", "--dirs", str(mlp_run.model_dir), "--json", str(out), *data], "--json"),
        (["evaluate", "--dirs", str(mlp_run.model_dir), "--png", str(out), *data], "--png"),
        (["inspect", str(synth_root), "--json", str(out), "--no_progress"], "--json"),
        (["inspect", str(synth_root), "--png", str(out), "--no_progress"], "--png"),
    ]
    for argv, flag in cases:
        err = _one_line(capsys, cli.main(argv))
        assert err == (
            f"tpu-tiles {argv[0]}: error: cannot write {flag} {out}: about 1.0 MB needed, "
            f"1.0 KB free on its disk; free some space or pass another {flag}"
        )
    assert os.listdir(tmp_path) == []


# -- stop signals at the very end ----------------------------------------------------------------


def _raise_after(monkeypatch, module, name: str, signum: int = signal.SIGTERM) -> None:
    """`module.name` raises `signum` at this process once it has done its work."""
    real = getattr(module, name)

    def then_signal(*args, **kwargs):
        result = real(*args, **kwargs)
        signal.raise_signal(signum)
        return result

    monkeypatch.setattr(module, name, then_signal)


def test_a_stop_while_drawing_writes_neither_file(synth_root, tmp_path, monkeypatch, capsys):
    from tpu_tiles_models.inspection import command

    _raise_after(monkeypatch, command, "draw")
    argv = ["inspect", str(synth_root), "--json", str(tmp_path / "r.json"), "--no_progress"]
    err = _one_line(capsys, cli.main([*argv, "--png", str(tmp_path / "r.png")]), 143)
    assert err == "tpu-tiles inspect: stopped by SIGTERM; removed what this run had started"
    assert os.listdir(tmp_path) == []


def test_a_stop_after_the_outputs_says_they_are_complete(synth_root, tmp_path, monkeypatch, capsys):
    from tpu_tiles_models.inspection import command

    _raise_after(monkeypatch, command, "format_table", signal.SIGHUP)
    argv = ["inspect", str(synth_root), "--json", str(tmp_path / "r.json"), "--no_progress"]
    err = _one_line(capsys, cli.main([*argv, "--png", str(tmp_path / "r.png")]), 129)
    assert err == (
        "tpu-tiles inspect: stopped by SIGHUP after it had finished; its outputs are complete"
    )
    assert sorted(os.listdir(tmp_path)) == ["r.json", "r.png"]


def test_a_late_stop_in_evaluate_is_not_exit_0(mlp_run, synth_root, tmp_path, monkeypatch, capsys):
    from tpu_tiles_models import evaluate

    _raise_after(monkeypatch, evaluate, "format_table")
    argv = ["evaluate", "--dirs", str(mlp_run.model_dir), "--json", str(tmp_path / "e.json")]
    err = _one_line(capsys, cli.main([*argv, f"--data_root={synth_root}", "--no_progress"]), 143)
    assert err.endswith("stopped by SIGTERM after it had finished; its outputs are complete")
    assert json.loads((tmp_path / "e.json").read_text())["models"]


def test_a_stop_once_the_command_returned_is_one_line(synth_root, tmp_path):
    """Run as a program, a signal after `main` returned (the interpreter exiting) still gets
    its line and 128 + its number, not a silent death."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        from tpu_tiles_models import cli
        sys.argv = ["tpu-tiles", "inspect", {str(synth_root)!r}, "--no_progress"]
        code = cli.main()
        os.kill(os.getpid(), signal.SIGTERM)
        sys.exit(code)
        """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 143
    assert done.stderr == (
        "tpu-tiles inspect: stopped by SIGTERM after it had finished; its outputs are complete\n"
    )
    assert "train" in done.stdout


# -- Ctrl-C on the course's prediction script ---------------------------------------------------


def test_ctrl_c_on_the_prediction_script_is_one_line(
    mlp_run, synth_root, tmp_path, monkeypatch, capsys
):
    import importlib.util

    from tpu_tiles_models import scoring

    spec = importlib.util.spec_from_file_location("gen_csv", REPO / "tiles_gen_predictions_csv.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    _raise_after(monkeypatch, scoring, "score_split", signal.SIGINT)
    out = tmp_path / "predictions.csv"
    code = script.main(
        ["--dir", str(mlp_run.model_dir), f"--data_root={synth_root}", "--cache_dir="]
        + ["--out", str(out), "--no_progress"]
    )
    err = _one_line(capsys, code, 130)
    assert err == f"tiles_gen_predictions_csv.py: interrupted; {out} not written"
    assert os.listdir(tmp_path) == []
