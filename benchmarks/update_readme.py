"""Writes README's figure tables from the results files, so no figure is copied by hand.

README marks each generated block with a pair of comments:

    <!-- results:suite -->
    ...replaced by the content of benchmarks/results/suite.md...
    <!-- /results:suite -->

Run after a benchmark wrote its results: `python benchmarks/update_readme.py`. With `--check`
it only reports blocks that differ from their files (exit 1), for a quick review.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
BLOCK = re.compile(
    r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S
)


def render(readme: str, results: Path = RESULTS) -> tuple[str, list[str]]:
    """README text with every block replaced by `results/<name>.md`; and the names changed.

    Raises:
      FileNotFoundError: a block names a results file that does not exist.
    """
    changed = []

    def fill(match: re.Match) -> str:
        name = match["name"]
        text = (results / f"{name}.md").read_text(encoding="utf-8")
        if text.startswith("# "):  # README's own section heads the block, not the file's title
            text = text.split("\n", 1)[1].lstrip("\n")
        body = text.rstrip("\n") + "\n"
        if body != match["body"]:
            changed.append(name)
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(fill, readme), changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--readme", default=str(REPO / "README.md"))
    p.add_argument("--check", action="store_true", help="report stale blocks, write nothing")
    a = p.parse_args(argv)
    path = Path(a.readme)
    text, changed = render(path.read_text(encoding="utf-8"))
    if a.check:
        print("stale: " + ", ".join(changed) if changed else "README is up to date")
        return 1 if changed else 0
    path.write_text(text, encoding="utf-8")
    print(f"updated {', '.join(changed) or 'nothing'} in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
