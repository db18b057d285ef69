"""README.md and docs/: figures come from the results files (benchmarks/update_readme.py), links
resolve, no machine path or issue number, and the commands README shows are the ones we run."""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


update_readme = _load(REPO / "benchmarks" / "update_readme.py", "update_readme")
PAGES = update_readme.pages(REPO)

SUITE_CSV = (
    "family,model,recipe,seed,top1,top5\n"
    "alt,M,upstream,0,0.5,0.10\n"
    "alt,M,upstream,1,0.3,0.20\n"
    "fusion,M,upstream,0,0.1,0.05\n"
    "fusion-shuffled,M,upstream,0,7,7\n"
    "fusion,N,upstream,0,9,9\n"
)


# -- update_readme.py ----------------------------------------------------------------------


def test_blocks_are_replaced_by_their_files(tmp_path):
    (tmp_path / "suite.md").write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    readme = "intro\n<!-- results:suite -->\nold figures\n<!-- /results:suite -->\nend\n"
    text, changed = update_readme.render(readme, tmp_path)
    assert text == (
        "intro\n<!-- results:suite -->\n| a | b |\n|---|---|\n| 1 | 2 |\n"
        "<!-- /results:suite -->\nend\n"
    )
    assert changed == ["suite"]
    assert update_readme.render(text, tmp_path) == (text, [])


def test_missing_results_file_fails(tmp_path):
    with pytest.raises(FileNotFoundError):
        update_readme.render("<!-- results:nope -->\n<!-- /results:nope -->", tmp_path)


def test_a_results_files_title_is_left_out(tmp_path):
    (tmp_path / "bench.md").write_text("# bench\n\nfigures\n")
    text, _ = update_readme.render("<!-- results:bench -->\n<!-- /results:bench -->\n", tmp_path)
    assert text == "<!-- results:bench -->\nfigures\n<!-- /results:bench -->\n"


def test_machine_paths_in_results_are_written_relative(tmp_path):
    (tmp_path / "b.md").write_text(
        "`python b.py --work /work/scratch/lead/sbs --sample /work/shared/data/s.csv "
        "--up /root/tpu_graphs --x /home/ann/y,/work/scratch/z` in ./work/ and a/work/b\n"
    )
    text, _ = update_readme.render("<!-- results:b -->\n<!-- /results:b -->\n", tmp_path)
    assert text == (
        "<!-- results:b -->\n`python b.py --work lead/sbs --sample data/s.csv "
        "--up ~/tpu_graphs --x ~/y,z` in ./work/ and a/work/b\n<!-- /results:b -->\n"
    )


def test_figures_are_the_range_over_families_of_seed_means(tmp_path):
    (tmp_path / "suite.csv").write_text(SUITE_CSV)
    page = (
        "top-5 <!-- figure:suite:top5:M -->?<!-- /figure -->, "
        "top-1 <!-- figure:suite:top1:M -->?<!-- /figure -->, "
        "N <!-- figure:suite:top5:N -->9.000<!-- /figure -->"
    )
    text, changed = update_readme.render(page, tmp_path)
    # alt: mean(0.10, 0.20) = 0.15, fusion 0.05; top-1: alt 0.4, fusion 0.1; the shuffled
    # copy is a check, not a family: left out.
    assert text == (
        "top-5 <!-- figure:suite:top5:M -->0.050-0.150<!-- /figure -->, "
        "top-1 <!-- figure:suite:top1:M -->0.100-0.400<!-- /figure -->, "
        "N <!-- figure:suite:top5:N -->9.000<!-- /figure -->"
    )
    assert changed == ["suite:top5:M", "suite:top1:M"]


def test_a_figure_of_an_unknown_model_or_an_unclosed_marker_fails(tmp_path):
    (tmp_path / "suite.csv").write_text(SUITE_CSV)
    with pytest.raises(KeyError, match="no rows for model 'X'"):
        update_readme.render("<!-- figure:suite:top5:X -->1<!-- /figure -->", tmp_path)
    with pytest.raises(ValueError, match="figure marker has no matching close"):
        update_readme.render("<!-- figure:suite:top5:M -->1 |", tmp_path)
    with pytest.raises(ValueError, match="results marker has no matching close"):
        update_readme.render("<!-- results:suite -->\n1\n", tmp_path)


def test_check_reports_every_stale_page_and_writing_fixes_them(tmp_path, capsys):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "a.md").write_text("new\n")
    (tmp_path / "docs").mkdir()
    stale = "<!-- results:a -->\nold\n<!-- /results:a -->\n"
    (tmp_path / "README.md").write_text("front\n")
    (tmp_path / "docs" / "x.md").write_text(stale)
    (tmp_path / "docs" / "y.md").write_text(stale)
    assert update_readme.main(["--root", str(tmp_path), "--check"]) == 1
    assert capsys.readouterr().out == "stale: docs/x.md (a); docs/y.md (a)\n"
    assert (tmp_path / "docs" / "x.md").read_text() == stale  # --check writes nothing
    assert update_readme.main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / "docs" / "y.md").read_text() == stale.replace("old", "new")
    assert (tmp_path / "README.md").read_text() == "front\n"
    assert update_readme.main(["--root", str(tmp_path), "--check"]) == 0


def test_every_page_is_up_to_date_with_the_results():
    for page in PAGES:
        _, changed = update_readme.render(page.read_text(encoding="utf-8"))
        assert changed == [], f"{page.relative_to(REPO)}: run python benchmarks/update_readme.py"


# -- the pages -----------------------------------------------------------------------------

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The page without its fenced code blocks."""
    return FENCE.sub("", text)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#{1,6} +(.+?) *$", _prose(page.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_the_pages_are_readme_and_docs():
    names = [p.relative_to(REPO).as_posix() for p in PAGES]
    assert names[0] == "README.md"
    assert "docs/README.md" in names and len(names) >= 10
    assert len(README.read_text().splitlines()) <= 200


def test_every_relative_link_resolves_to_a_file_and_anchor():
    broken = []
    for page in PAGES:
        for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)} -> {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where}: no such heading")
    assert broken == []


def test_no_machine_path_or_issue_number_in_the_pages():
    found = []
    for page in PAGES:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"/work/|/root/|/home/|\bissues? *#?\d+", line, re.I):
                found.append(f"{page.relative_to(REPO)}:{n}: {line[:80]}")
    assert found == []


# -- README's commands ---------------------------------------------------------------------


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _commands(title: str) -> list[list[str]]:
    """Each command of the section's shell blocks as words (comments and `&&` split off)."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", _section(title), re.S | re.M):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words:
                    commands.append(words)
    return commands


def test_readmes_set_up_commands_are_the_ones_ci_runs():
    blocks = re.findall(r"^```sh\n(.*?)\n```", _section("Set up"), re.S | re.M)
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if "pip install" in line]
    assert len(blocks) == 2 and ci, "README shows two set-up commands; .ci/run runs one"
    # CI runs README's test command verbatim (followed by `|| exit 1`, so that its failure
    # fails CI: set -e does not stop inside an && list).
    assert blocks[1] + " || exit 1" in ci
    install = 'python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e ".[test]"'
    assert all(b.startswith(install + " && ") for b in blocks)
    assert blocks[0].endswith("&& .venv/bin/tpu-tiles demo")


def _parse_tpu_tiles(words: list[str]) -> None:
    """Parses a `tpu-tiles` command line as the command would, without running it."""
    from tpu_tiles_models.cli import _ABSL_COMMANDS, build_parser
    from tpu_tiles_models.sweep import SweepArgs
    from tpu_tiles_models.train_args import TrainArgs

    args, extra = build_parser().parse_known_args(words[1:])
    if args.command == "train":
        TrainArgs.from_argv(extra)
    elif args.command == "sweep":
        SweepArgs.from_namespace(args, extra)
    else:
        assert args.command not in _ABSL_COMMANDS and not extra, words


@pytest.mark.parametrize("journey", ["Set up", "The course journey", "The Kaggle journey"])
def test_the_journeys_commands_and_flags_exist(journey):
    scripts = {"tiles_gen_predictions_csv.py", "create_kaggle_csv.py"}
    commands = _commands(journey)
    assert commands
    for words in commands:
        if words[0].endswith("tpu-tiles"):
            _parse_tpu_tiles(words)
        elif words[0] == "python" and words[1] == "tiles_gen_predictions_csv.py":
            _load(REPO / words[1], "tiles_gen_predictions_csv").parse_args(words[2:])
        elif words[0] == "python":
            assert words[1] in scripts and words[2:] == [], words  # no flags to check
        else:
            shell = ("git", "cd", "cp", "source", "python3", ".venv/bin/pip", ".venv/bin/python")
            assert words[0] in shell, words
    if journey != "Set up":
        models = [w for c in commands for w in c if w.startswith("--model=")]
        assert models == ["--model=ResidualSAGE"]  # the recommendation, by its name alone


def test_readmes_model_table_names_models_py_classes():
    tree = ast.parse((REPO / "models.py").read_text(encoding="utf-8"))
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    rows = re.findall(r"^\| (`.*?) \|", _section("Models"), re.M)
    named = {name for row in rows for name in re.findall(r"`(\w+)`", row)}
    assert len(named) == 8 and named <= classes, named - classes
