"""benchmarks/journeys.py without running the journeys: it takes README's lines as written, and
the world it runs them in (HOME, checkout copy, `.venv`, the clone URL) is the one it says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_benchmark

from tpu_tiles_models.synthetic.writer import read_test_ids

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")

journeys = load_benchmark("journeys")

FAKE_README = """# x

## Set up

```sh
echo not a journey
```

## The course journey (upstream checkout)

Some prose.

```sh
source .venv/bin/activate    # a comment that stays
cd ~/somewhere

tpu-tiles train --model=M
```

```text
not a shell block
```

```sh
tpu-tiles check handin/
```

## The Kaggle journey (no upstream checkout needed)

```sh
tpu-tiles predict --dir runs/kaggle/model_*
```
"""


def _git(*args: str, cwd: Path, env: dict | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout


def test_lines_are_the_sh_blocks_of_the_section_as_written():
    assert journeys.journey_lines(FAKE_README, "The course journey") == [
        "source .venv/bin/activate    # a comment that stays",
        "cd ~/somewhere",
        "tpu-tiles train --model=M",
        "tpu-tiles check handin/",
    ]
    assert journeys.journey_lines(FAKE_README, "The Kaggle journey") == [
        "tpu-tiles predict --dir runs/kaggle/model_*"
    ]


def test_readmes_journeys_are_found_whole():
    course = journeys.journey_lines(README, journeys.JOURNEYS["course"])
    kaggle = journeys.journey_lines(README, journeys.JOURNEYS["kaggle"])
    assert course[0].startswith("source .venv/bin/activate") and len(course) >= 8
    assert f"git clone {journeys.UPSTREAM_URL} ~/tpu_graphs" in course
    assert course[-1].startswith("tpu-tiles install . --uninstall")
    assert kaggle[0] == "source .venv/bin/activate" and len(kaggle) >= 4
    assert any(
        line.startswith("tpu-tiles kaggle --sample sample_submission.csv") for line in kaggle
    )
    # Each line is a whole command: the runner runs and times them one by one.
    assert not [line for line in course + kaggle if line.rstrip().endswith(("\\", "|", "&&"))]


def test_the_script_runs_each_line_in_one_shell_and_stops_at_the_first_failure(tmp_path):
    (tmp_path / "sub").mkdir()
    status = tmp_path / "status.txt"
    lines = [
        "cd sub   # a comment",
        "X=kept; pwd > where",
        'test "$X" = kept',
        "false",
        "touch never",
    ]
    script = journeys.bash_script(lines, status)
    assert "cd sub   # a comment\n" in script  # the line itself, on a line of its own
    rc = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=tmp_path).returncode
    assert rc == 1
    assert (tmp_path / "sub" / "where").read_text().strip() == str(tmp_path / "sub")
    assert not (tmp_path / "sub" / "never").exists()
    rows = [row.split() for row in status.read_text().splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("0", "0"), ("1", "0"), ("2", "0"), ("3", "1")]
    assert all(float(r[3].replace(",", ".")) >= float(r[2].replace(",", ".")) for r in rows)


def test_the_sample_submission_gives_synth_its_test_ids(tmp_path):
    path = tmp_path / "sample_submission.csv"
    path.write_text(journeys.SAMPLE_SUBMISSION)
    ids = read_test_ids(path)
    assert len(ids) == 3 and len(set(ids)) == 3
    assert "layout:xla:" in journeys.SAMPLE_SUBMISSION  # a row the Kaggle merge keeps as is


def test_readmes_clone_url_is_served_from_the_unpacked_copy(tmp_path):
    unpacked = tmp_path / "unpacked"
    (unpacked / "tpu_graphs").mkdir(parents=True)
    (unpacked / "tpu_graphs" / "__init__.py").write_text("# upstream\n")
    served = journeys.upstream_repo(unpacked, tmp_path / "served")
    assert served == tmp_path / "served" and (served / ".git").is_dir()
    assert journeys.upstream_repo(served, tmp_path / "unused") == served  # a repo serves itself
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(journeys.git_config(served))
    env = journeys.journey_env(home, tmp_path / "repo")
    _git("clone", "-q", journeys.UPSTREAM_URL, str(home / "tpu_graphs"), cwd=tmp_path, env=env)
    assert (home / "tpu_graphs" / "tpu_graphs" / "__init__.py").read_text() == "# upstream\n"


def test_the_world_home_pythonpath_and_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("VIRTUAL_ENV", "/elsewhere")
    env = journeys.journey_env(tmp_path / "home", tmp_path / "repo")
    assert env["HOME"] == str(tmp_path / "home") and env["PYTHONPATH"] == str(tmp_path / "repo")
    assert "VIRTUAL_ENV" not in env and env["PATH"] == os.environ["PATH"]
    journeys.link_venv(tmp_path)
    assert (tmp_path / ".venv" / "bin" / "activate").is_file()
    if sys.prefix != sys.base_prefix:  # the environment running the script, by a link
        assert (tmp_path / ".venv").resolve() == Path(sys.prefix).resolve()
    which = subprocess.run(
        ["bash", "--norc", "-c", "source .venv/bin/activate && command -v python"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(which).parent.resolve() == Path(sys.executable).parent.resolve()


def test_the_checkout_copy_holds_tracked_and_untracked_files_not_ignored_ones(tmp_path):
    repo, dest = tmp_path / "repo", tmp_path / "copy"
    repo.mkdir()
    dest.mkdir()
    _git("init", "-q", cwd=repo)
    (repo / ".gitignore").write_text(".venv/\n*.log\n")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "a.py").write_text("committed\n")
    (repo / "gone.py").write_text("deleted after adding\n")
    _git("add", "-A", cwd=repo)
    (repo / "gone.py").unlink()
    (repo / "pkg" / "a.py").write_text("edited, not committed\n")
    (repo / "new.md").write_text("untracked\n")
    (repo / "x.log").write_text("ignored\n")
    journeys.copy_checkout(repo, dest)
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == [".gitignore", "new.md", "pkg/a.py"]
    assert (dest / "pkg" / "a.py").read_text() == "edited, not committed\n"


def test_the_results_name_each_line_its_status_and_the_command_without_machine_paths():
    Line = journeys.Line
    kaggle = [Line("source .venv/bin/activate", 0, 0.01), Line("a | b", 2, 1.26), Line("c")]
    text = journeys.render(
        {"course": None, "kaggle": kaggle},
        command=journeys.command_line(Path("/some/machine/upstream")),
        header="HEAD",
    )
    assert text.startswith("HEAD\n")
    assert "**The course journey**: skipped" in text
    assert "**The Kaggle journey**: FAILED, 1 s." in text
    assert "| `source .venv/bin/activate` | 0 | 0.0 |" in text
    assert "| `a \\| b` | 2 | 1.3 |" in text and "| `c` | not run |  |" in text
    assert "`python benchmarks/journeys.py --upstream UPSTREAM_DIR`" in text
    assert "/some/machine" not in text
    assert journeys.command_line(None) == "python benchmarks/journeys.py"


@pytest.mark.parametrize("argv", [["--upstream", "nowhere"]])
def test_an_upstream_without_tpu_graphs_is_refused_in_one_line(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        journeys.main([*argv, "--work", str(tmp_path / "w")])
    assert exit_.value.code == 2
    assert "--upstream nowhere holds no tpu_graphs/ folder" in capsys.readouterr().err
