"""Runs README's course and Kaggle journeys line by line, as written, on tiny synthetic data.

    python benchmarks/journeys.py [--upstream DIR] [--work /tmp/journeys_bench]

Reads README.md (what it says, not a copy), takes the `sh` blocks of "The course journey" and
"The Kaggle journey", and runs each journey's lines in order in one bash process, stopping at
the first line that fails. Each journey gets a fresh world under `--work`:

- HOME is a new folder whose `~/data/tpugraphs/npz/tile/xla` (README's data root) is a tiny
  `tpu-tiles synth` set: 10 train and 10 validation kernels of 12 configs each, and the test
  kernels of a made-up `sample_submission.csv` (`--test_ids_from`), so the Kaggle merge finds
  every id. Small enough that upstream's default 100 epochs end in a minute.
- "From this repository's folder" is a scratch copy of this checkout (its tracked and
  untracked, not ignored files: uncommitted edits to README count), with that
  `sample_submission.csv` in it. Nothing is written into the checkout itself.
- The `.venv` the set-up command makes is a link to the virtual environment running this
  script (`sys.prefix`), so `source .venv/bin/activate` runs as written and activates it;
  PYTHONPATH is the scratch copy, so the package and scripts under test are the copy's, wherever
  that environment's editable install points. Outside a virtual environment, `.venv/bin/activate`
  is a two-line script that puts this Python's folder first on PATH.
- `git clone https://github.com/google-research-datasets/tpu_graphs` runs as written and is
  served from `--upstream` (a checkout or an unpacked copy, made a git repository here) by a
  `url.<copy>.insteadOf` rule in the new HOME's `.gitconfig`. No network is needed; without
  `--upstream` the course journey is reported as skipped.

Prints and writes `benchmarks/results/journeys.md`: per line, its exit status and seconds, and
the command that made the file (the upstream folder written as a placeholder). Each journey's
full output stays in `<work>/<journey>/log.txt`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
JOURNEYS = {"course": "The course journey", "kaggle": "The Kaggle journey"}
UPSTREAM_URL = "https://github.com/google-research-datasets/tpu_graphs"
DATA_ROOT = Path("data", "tpugraphs", "npz", "tile", "xla")  # under HOME, as README says
# Tiny enough for upstream's 100 epochs on 2 cores; 10 validation kernels with >= 10 configs is
# what upstream's trainer needs, 12 configs leave each kernel in a 10-config training list.
SYNTH_FLAGS = ["--train", "10", "--valid", "10", "--max_configs", "12", "--seed", "0"]
# A made-up sample_submission.csv: three tile kernels (the test split) and a layout row that the
# Kaggle merge must keep as it is.
SAMPLE_SUBMISSION = (
    "ID,TopConfigs\n"
    "tile:xla:0a1b2c3d4e5f60718293a4b5c6d7e8f9,0;1;2;3;4\n"
    "layout:xla:default:3d4e5f60718293a4b5c6d7e8f90a1b2c,0;1;2;3\n"
    "tile:xla:1b2c3d4e5f60718293a4b5c6d7e8f90a,0;1;2;3;4\n"
    "tile:xla:2c3d4e5f60718293a4b5c6d7e8f90a1b,0;1;2;3;4\n"
)
COMMAND = "python benchmarks/journeys.py"
UPSTREAM_PLACEHOLDER = "UPSTREAM_DIR"


@dataclass
class Line:
    """One README line and what running it gave (`status` None: not reached)."""

    text: str
    status: int | None = None
    seconds: float | None = None


# -- what README says ----------------------------------------------------------------------------


def section(readme: str, title: str) -> str:
    """The text of README's `## <title>...` section, up to the next `## ` heading."""
    start = readme.index(f"\n## {title}")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end > 0 else None]


def journey_lines(readme: str, title: str) -> list[str]:
    """Every non-blank line of the section's `sh` blocks, in order, exactly as written."""
    blocks = re.findall(r"^```sh\n(.*?)^```", section(readme, title), re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


# -- the world each journey runs in --------------------------------------------------------------


def copy_checkout(repo: Path, dest: Path) -> None:
    """Copies `repo`'s tracked and untracked, not ignored files (as they are on disk) to `dest`."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in sorted(set(filter(None, listed.split("\0")))):
        src = repo / name
        if src.is_file():  # a tracked file deleted on disk is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def link_venv(checkout: Path) -> None:
    """Makes `checkout/.venv` stand for the environment running this script (see the docstring)."""
    venv = checkout / ".venv"
    if sys.prefix != sys.base_prefix:
        venv.symlink_to(sys.prefix, target_is_directory=True)
        return
    (venv / "bin").mkdir(parents=True)
    bindir = Path(sys.executable).parent
    (venv / "bin" / "activate").write_text(
        f'# this Python\'s folder first\nPATH="{bindir}:$PATH"\n'
    )


def upstream_repo(upstream: Path, dest: Path) -> Path:
    """A git repository holding `upstream`: itself when it is one, else a one-commit copy."""
    if (upstream / ".git").exists():
        return upstream
    shutil.copytree(upstream, dest, symlinks=True)
    who = {"GIT_AUTHOR_NAME": "journeys", "GIT_AUTHOR_EMAIL": "journeys@localhost"}
    who |= {"GIT_COMMITTER_NAME": "journeys", "GIT_COMMITTER_EMAIL": "journeys@localhost"}
    env = {**os.environ, **who}
    for cmd in (["init", "-q"], ["add", "-A", "-f"], ["commit", "-q", "-m", "upstream"]):
        subprocess.run(["git", "-C", str(dest), *cmd], check=True, env=env)
    return dest


def git_config(upstream: Path) -> str:
    """A `.gitconfig` that serves README's clone URL from the local repository `upstream`."""
    return f'[url "{upstream}"]\n\tinsteadOf = {UPSTREAM_URL}\n'


def journey_env(home: Path, checkout: Path) -> dict[str, str]:
    """The environment each line runs in: the new HOME, the copy's package first on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env |= {"HOME": str(home), "PYTHONPATH": str(checkout), "GIT_CONFIG_NOSYSTEM": "1"}
    return env


def make_world(work: Path, *, upstream: Path | None) -> tuple[Path, Path]:
    """Under `work`: a new HOME with the tiny data set, and the checkout copy. Returns both."""
    home, checkout = work / "home", work / "repo"
    home.mkdir(parents=True)
    checkout.mkdir()
    copy_checkout(REPO, checkout)
    link_venv(checkout)
    sample = checkout / "sample_submission.csv"
    sample.write_text(SAMPLE_SUBMISSION)
    if upstream is not None:
        served = upstream_repo(upstream, work / "upstream")
        (home / ".gitconfig").write_text(git_config(served))
    synth = [sys.executable, "-m", "tpu_tiles_models.cli", "synth", str(home / DATA_ROOT)]
    synth += [*SYNTH_FLAGS, "--test_ids_from", str(sample), "--no_progress"]
    subprocess.run(synth, check=True, env=journey_env(home, checkout), cwd=checkout)
    return home, checkout


# -- running the lines ---------------------------------------------------------------------------


def bash_script(lines: list[str], status_file: Path) -> str:
    """One bash script: each README line on its own, as written, then its exit status and
    start/end times appended to `status_file`; the first failing line ends the script."""
    out = []
    for n, line in enumerate(lines):
        out += [
            "__start=$EPOCHREALTIME",
            line,
            "__rc=$?",
            f'echo "{n} $__rc $__start $EPOCHREALTIME" >> "{status_file}"',
            '[ "$__rc" -eq 0 ] || exit "$__rc"',
        ]
    return "\n".join(out) + "\n"


def run_journey(lines: list[str], work: Path, *, upstream: Path | None) -> list[Line]:
    """Runs the lines in a fresh world under `work`; returns each with its status and time."""
    home, checkout = make_world(work, upstream=upstream)
    script, status_file = work / "journey.sh", work / "status.txt"
    script.write_text(bash_script(lines, status_file))
    with open(work / "log.txt", "wb") as log:
        subprocess.run(
            ["bash", "--noprofile", "--norc", str(script)],
            cwd=checkout,
            env=journey_env(home, checkout),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    done = [Line(text) for text in lines]
    if status_file.exists():
        for row in status_file.read_text().splitlines():
            n, status, start, end = row.replace(",", ".").split()  # any locale's decimal mark
            done[int(n)].status = int(status)
            done[int(n)].seconds = float(end) - float(start)
    return done


# -- the results file ----------------------------------------------------------------------------


def command_line(upstream: Path | None) -> str:
    """The command that made the results, with the upstream folder as a placeholder."""
    return COMMAND + (f" --upstream {UPSTREAM_PLACEHOLDER}" if upstream else "")


def render(results: dict[str, list[Line] | None], *, command: str, header: str) -> str:
    """The results file: the header, then per journey a table of its lines (None: skipped)."""
    out = [header, ""]
    for key, title in JOURNEYS.items():
        lines = results[key]
        if lines is None:
            out += [f"**{title}**: skipped (no `--upstream` to serve its `git clone`).", ""]
            continue
        ok = all(line.status == 0 for line in lines)
        total = sum(line.seconds or 0.0 for line in lines)
        verdict = "every line exits 0" if ok else "FAILED"
        out += [f"**{title}**: {verdict}, {total:.0f} s.", ""]
        out += ["| line | exit | seconds |", "|---|---|---|"]
        for line in lines:
            text = line.text.replace("|", "\\|")
            status = "not run" if line.status is None else str(line.status)
            seconds = "" if line.seconds is None else f"{line.seconds:.1f}"
            out.append(f"| `{text}` | {status} | {seconds} |")
        out.append("")
    out.append(f"Made by `{command}`.")
    return "\n".join(out) + "\n"


def header(load: float) -> str:
    """What the journeys ran on: the data, the machine, the stack."""
    try:
        tf = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        tf = "not installed"
    synth = " ".join(SYNTH_FLAGS)
    return (
        "README's journeys, every line run as written with bash in a fresh HOME whose "
        f"`~/{DATA_ROOT}` is `tpu-tiles synth {synth} "
        "--test_ids_from sample_submission.csv` (a made-up one with 3 tile ids and a layout "
        f"row), on {os.cpu_count()} CPU cores (load average {load:.1f} at the start), Python "
        f"{platform.python_version()}, TensorFlow {tf}:"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--upstream",
        type=Path,
        help="a tpu_graphs checkout or unpacked copy that serves the course journey's git clone "
        "(default: none, the course journey is skipped)",
    )
    p.add_argument(
        "--work", default="/tmp/journeys_bench", help="emptied, then the journeys' worlds"
    )
    a = p.parse_args(argv)
    if a.upstream is not None and not (a.upstream / "tpu_graphs").is_dir():
        p.error(f"--upstream {a.upstream} holds no tpu_graphs/ folder; give upstream's checkout")
    upstream = a.upstream.resolve() if a.upstream else None
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    load = os.getloadavg()[0]
    results: dict[str, list[Line] | None] = {}
    for key, title in JOURNEYS.items():
        if key == "course" and upstream is None:
            results[key] = None
            continue
        start = time.perf_counter()
        results[key] = run_journey(journey_lines(readme, title), work / key, upstream=upstream)
        print(f"{title}: {time.perf_counter() - start:.0f} s; output in {work / key / 'log.txt'}")
    text = render(results, command=command_line(upstream), header=header(load))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "journeys.md").write_text(text)
    print(text, end="")
    failed = any(r is not None and any(x.status != 0 for x in r) for r in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
