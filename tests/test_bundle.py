"""`tpu-tiles bundle` / `check`: the course hand-in, made and verified like a grader would."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tpu_tiles_models import bundle, cli, registry, run_file
from tpu_tiles_models.errors import FlagError


@pytest.fixture(scope="module")
def good(residual_run, tmp_path_factory) -> Path:
    return bundle.make_bundle(residual_run.model_dir, tmp_path_factory.mktemp("b") / "bundle")


def _variant(good: Path, dest: Path, edit) -> Path:
    """A copy of the good bundle whose models.py is `edit(text)`."""
    shutil.copytree(good, dest)
    path = dest / "models.py"
    text = path.read_text()
    changed = edit(text)
    assert changed != text
    path.write_text(changed)
    return dest


def _in_residual_sage(text: str, old: str, new: str) -> str:
    """Replaces the first `old` after `class ResidualSAGE(` (its constructor defaults)."""
    start = text.index("class ResidualSAGE(")
    at = text.index(old, start)
    return text[:at] + new + text[at + len(old) :]


def _statuses(report: bundle.CheckReport) -> dict[str, str]:
    return {r.name: r.status for r in report.rows}


def test_bundle_holds_exactly_the_hand_in(residual_run, good):
    h = residual_run.model_dir.name[len("model_") :]
    assert sorted(p.name for p in good.iterdir()) == sorted(
        ["models.py", f"model_{h}", f"run_{h}.jsonz"]
    )
    assert (good / "models.py").read_bytes() == registry.dropin_file("models.py").read_bytes()
    assert (good / f"run_{h}.jsonz").read_bytes() == residual_run.run_file.read_bytes()
    assert (good / f"model_{h}" / "saved_model.pb").is_file()


def test_good_bundle_passes(good, synth_root):
    report = bundle.check_bundle(good, synth_root, progress=False)
    assert report.passed, report.table()
    assert set(_statuses(report).values()) == {"pass"}
    assert list(_statuses(report)) == [
        "files present",
        "hash matches",
        "class found",
        "saved model loads",
        "variables copy",
        "predictions match",
    ]
    rows = {r.name: r.detail for r in report.rows}
    assert rows["predictions match"].startswith("6/6 test kernels")
    assert "stats from run file" in rows["variables copy"]
    assert report.table().splitlines()[-1] == "PASSED"
    report.raise_for_failure()  # a passing report raises nothing


def test_models_py_with_other_default_fails_variable_copy(good, synth_root, tmp_path):
    b = _variant(
        good,
        tmp_path / "b",
        lambda t: _in_residual_sage(t, "op_embed_dim: int = 32", "op_embed_dim: int = 16"),
    )
    report = bundle.check_bundle(b, synth_root, progress=False)
    assert not report.passed
    assert _statuses(report)["variables copy"] == "FAIL"
    assert "predictions match" not in _statuses(report)
    (failure,) = report.failures()
    assert "has shape [128, 32] saved but [128, 16] rebuilt" in failure.detail
    with pytest.raises(bundle.BundleError, match="failed its check: variables copy"):
        report.raise_for_failure()


def test_models_py_with_other_activation_fails_predictions(good, synth_root, tmp_path):
    """Same variables, different function: only the prediction comparison can tell."""
    b = _variant(
        good,
        tmp_path / "b",
        lambda t: _in_residual_sage(t, 'activation: str = "gelu"', 'activation: str = "tanh"'),
    )
    report = bundle.check_bundle(b, synth_root, progress=False)
    assert _statuses(report)["variables copy"] == "pass"
    assert _statuses(report)["predictions match"] == "FAIL"
    detail = report.rows[-1].detail
    matched = int(re.match(r"(\d+)/6 test kernels", detail).group(1))
    assert matched < 6 and "top-5 differs on" in detail


def test_renamed_class_fails_class_found(good, synth_root, tmp_path):
    b = _variant(good, tmp_path / "b", lambda t: re.sub(r"\bResidualSAGE\b", "RenamedSAGE", t))
    report = bundle.check_bundle(b, synth_root, progress=False)
    assert _statuses(report) == {
        "files present": "pass",
        "hash matches": "pass",
        "class found": "FAIL",
    }
    assert "unknown model 'ResidualSAGE'" in report.rows[-1].detail


def test_check_reports_missing_and_foreign_files(good, synth_root, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    report = bundle.check_bundle(empty, synth_root, progress=False)
    assert not report.passed
    assert report.rows[0].detail == (
        "no models.py; 0 model_<hash>/ directories (need exactly 1); "
        "0 run_*.jsonz files (need exactly 1)"
    )
    # A run file renamed to the model's hash but holding other args: hash check fails.
    b = tmp_path / "foreign"
    shutil.copytree(good, b)
    (run,) = b.glob("run_*.jsonz")
    model = next(b.glob("model_*"))
    model.rename(b / "model_0123")
    run.rename(b / "run_0123.jsonz")
    report = bundle.check_bundle(b, synth_root, progress=False)
    assert _statuses(report)["hash matches"] == "FAIL"
    assert "it belongs to another model directory" in report.rows[-1].detail


def test_make_bundle_refuses_missing_or_foreign_run_file(residual_run, tmp_path):
    lonely = tmp_path / "lonely" / residual_run.model_dir.name
    shutil.copytree(residual_run.model_dir, lonely)
    with pytest.raises(run_file.ExportError, match="needs its run file beside it"):
        bundle.make_bundle(lonely, tmp_path / "out")
    other = tmp_path / "other" / "model_0123"
    shutil.copytree(residual_run.model_dir, other)
    shutil.copy(residual_run.run_file, other.with_name("run_0123.jsonz"))
    with pytest.raises(run_file.ExportError, match="belongs to another model directory"):
        bundle.make_bundle(other, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_make_bundle_refuses_a_folder_with_another_model(residual_run, tmp_path):
    out = tmp_path / "out"
    (out / "model_ffff").mkdir(parents=True)
    with pytest.raises(bundle.BundleError, match="already holds model_ffff"):
        bundle.make_bundle(residual_run.model_dir, out)
    with pytest.raises(bundle.BundleError, match="must be a new folder"):
        bundle.make_bundle(residual_run.model_dir, residual_run.model_dir.parent)
    with pytest.raises(FlagError, match="no such models.py"):
        bundle.make_bundle(residual_run.model_dir, tmp_path / "x", models_path=tmp_path / "nope.py")


def _stamps(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under `folder`: (inode, mtime, bytes), so that a rewrite shows."""
    return {
        str(p.relative_to(folder)): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_bundle_never_writes_over_a_file_it_did_not_make(residual_run, good, tmp_path, capsys):
    """Issue 48, defect 2: `mkdir h; echo '# mine' > h/models.py; bundle --out h` is refused
    in one line naming the file and the fix, and h keeps the user's file; so is an earlier
    bundle whose model was changed since; a rerun into a finished bundle writes nothing."""
    h = tmp_path / "h"
    h.mkdir()
    (h / "models.py").write_text("# mine\n")
    changed = tmp_path / "changed"
    shutil.copytree(good, changed)
    model = changed / residual_run.model_dir.name
    with open(model / "saved_model.pb", "ab") as f:
        f.write(b"\0")
    for out, clash, source in (
        (h, h / "models.py", registry.dropin_file("models.py")),
        (changed, model, residual_run.model_dir),
    ):
        before = _stamps(out)
        assert cli.main(["bundle", "--dir", str(residual_run.model_dir), "--out", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"tpu-tiles bundle: error: --out {clash} is already there and is not a copy of "
            f"{source}; bundle never writes over a file it did not make: move it away, or pass "
            "another --out\n"
        )
        assert _stamps(out) == before
    again = tmp_path / "again"
    shutil.copytree(good, again)
    before = _stamps(again)
    assert cli.main(["bundle", "--dir", str(residual_run.model_dir), "--out", str(again)]) == 0
    assert _stamps(again) == before


@pytest.mark.parametrize("inside", ["models.py", "model_<h>", "model_<h>/variables"])
def test_check_fails_a_hand_in_that_links_outside_it(good, synth_root, tmp_path, capsys, inside):
    """Issue 48, defect 17: `models.py`, `model_<h>/` or a folder inside it that is a link to
    a place outside the hand-in fails the check in one line: a grader would get a dangling
    link."""
    b = tmp_path / "b"
    shutil.copytree(good, b)
    name = inside.replace("model_<h>", next(b.glob("model_*")).name)
    away = tmp_path / "elsewhere" / name
    away.parent.mkdir(parents=True)
    (b / name).rename(away)
    (b / name).symlink_to(away)
    assert cli.main(["check", str(b), f"--data_root={synth_root}", "--no_progress"]) == 2
    assert capsys.readouterr().err == (
        f"tpu-tiles check: error: {b} failed its check: files present: {name} is a symbolic "
        f"link to {away}, outside the folder: a grader who gets the folder gets a dangling "
        "link; put a copy there (tpu-tiles bundle makes one)\n"
    )


def test_kernel_match():
    scores = np.array([0.5, 0.1, 0.9, 0.3, 0.7, 0.2], dtype=np.float32)
    assert bundle.kernel_match([1, 5, 3, 0, 4, 2], scores) == "exact"
    assert bundle.kernel_match([1, 5, 3, 4, 0], scores) == "differ"
    # Fewer than 5 configs: only the real indices count, the zero padding does not.
    assert bundle.kernel_match([1, 0, 0, 0, 0], np.array([0.4, 0.2])) == "exact"
    assert bundle.kernel_match([0, 1, 0, 0, 0], np.array([0.4, 0.2])) == "differ"
    # Equal scores may come out in either order.
    tied = np.array([0.3, 0.1, 0.1, 0.5, 0.6, 0.7])
    assert bundle.kernel_match([2, 1, 0, 3, 4], tied) == "tie"


def test_kernel_match_with_config_0_kept():
    scores = np.array([0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8])  # config 0 ranked last
    assert bundle.kernel_match([1, 5, 3, 2, 0], scores, keep_default=True) == "exact"
    assert bundle.kernel_match([1, 5, 3, 2, 4], scores, keep_default=True) == "differ"
    assert bundle.kernel_match([1, 5, 3, 2, 4], scores) == "exact"
    tied = np.array([0.9, 0.1, 0.2, 0.2, 0.7, 0.05, 0.8])
    assert bundle.kernel_match([5, 1, 3, 2, 0], tied, keep_default=True) == "tie"
