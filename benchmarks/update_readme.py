"""Writes the figures of README.md and docs/*.md from the results files, so none is copied by hand.

A page marks each generated table with a pair of comments:

    <!-- results:suite -->
    ...replaced by the content of benchmarks/results/suite.md...
    <!-- /results:suite -->

and each figure quoted in running text (README's model table) with an inline pair:

    <!-- figure:suite:top5:EarlyJoinSAGE -->0.064-0.097<!-- /figure -->

which is replaced by the range over families (not their shuffled copies) of the per-family
mean (over seeds) of column `top5` for model `EarlyJoinSAGE` in benchmarks/results/suite.csv.

Results files record the commands as they were run; paths local to the machine that ran them
(/work/scratch/..., /root/..., /home/<user>/...) are written into the pages relative to that
scratch folder (or `~`), so no page carries one.

Run after a benchmark wrote its results: `python benchmarks/update_readme.py`. With `--check`
it only reports the pages whose blocks or figures differ from their files (exit 1).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
BLOCK = re.compile(
    r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S
)
FIGURE = re.compile(
    r"(?P<open><!-- figure:(?P<file>[\w-]+):(?P<column>\w+):(?P<model>[^ ]+?) -->)"
    r"(?P<body>[^<]*)(?P<close><!-- /figure -->)"
)
# Machine-local paths: home folders become `~`, scratch and shared folders relative paths.
HOME = re.compile(r"(?<![\w.~/])/(?:root|home/[^/\s]+)/")
SCRATCH = re.compile(r"(?<![\w.~/])/work/(?:scratch/|shared/)?")


def pages(root: Path = REPO) -> list[Path]:
    """README.md and every page under docs/, in a fixed order."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def local_paths_out(text: str) -> str:
    """`text` with each machine-local path made relative (scratch, shared) or `~`-based."""
    return SCRATCH.sub("", HOME.sub("~/", text))


def figure(results: Path, file: str, column: str, model: str) -> str:
    """`lo-hi` (or one value): the range over families of `model`'s mean `column` over seeds.

    Raises:
      FileNotFoundError: no `results/<file>.csv`.
      KeyError: the file has no such column or no row for `model`.
    """
    per_family: dict[str, list[float]] = defaultdict(list)
    with open(results / f"{file}.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            # A family's copy with its configs shuffled is a check, not a family.
            if row["model"] == model and not row["family"].endswith("-shuffled"):
                per_family[row["family"]].append(float(row[column]))
    if not per_family:
        raise KeyError(f"{file}.csv has no rows for model {model!r}")
    means = sorted(sum(v) / len(v) for v in per_family.values())
    lo, hi = f"{means[0]:.3f}", f"{means[-1]:.3f}"
    return lo if lo == hi else f"{lo}-{hi}"


def render(page: str, results: Path = RESULTS) -> tuple[str, list[str]]:
    """Page text with every block replaced by `results/<name>.md` and every figure recomputed;
    and the names of the blocks and figures that changed.

    Raises:
      FileNotFoundError: a block or figure names a results file that does not exist.
      KeyError: a figure names a column or model its file lacks.
      ValueError: a block or figure is opened and never closed.
    """
    changed = []

    def fill(match: re.Match) -> str:
        name = match["name"]
        text = (results / f"{name}.md").read_text(encoding="utf-8")
        if text.startswith("# "):  # the page's own section heads the block, not the file's title
            text = text.split("\n", 1)[1].lstrip("\n")
        body = local_paths_out(text.rstrip("\n") + "\n")
        if body != match["body"]:
            changed.append(name)
        return match.group(1) + body + match.group(4)

    def fill_figure(match: re.Match) -> str:
        body = figure(results, match["file"], match["column"], match["model"])
        if body != match["body"]:
            changed.append(f"{match['file']}:{match['column']}:{match['model']}")
        return match["open"] + body + match["close"]

    for marker, pattern in (("<!-- results:", BLOCK), ("<!-- figure:", FIGURE)):
        if page.count(marker) != len(pattern.findall(page)):
            raise ValueError(f"a {marker[5:-1]} marker has no matching close")
    return FIGURE.sub(fill_figure, BLOCK.sub(fill, page)), changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--root", default=str(REPO), help="the repository: README.md, docs/, benchmarks/results/"
    )
    p.add_argument("--check", action="store_true", help="report stale pages, write nothing")
    a = p.parse_args(argv)
    root = Path(a.root)
    stale = []
    for path in pages(root):
        old = path.read_text(encoding="utf-8")
        text, changed = render(old, root / "benchmarks" / "results")
        name = path.relative_to(root).as_posix()
        if changed:
            stale.append(f"{name} ({', '.join(changed)})")
        if not a.check and text != old:
            path.write_text(text, encoding="utf-8")
    if a.check:
        print("stale: " + "; ".join(stale) if stale else "every page is up to date")
        return 1 if stale else 0
    print(f"updated {'; '.join(stale) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
