"""The guides stay guides: each page under docs/ within a length set here, so that results
tables and experiment narratives do not grow back into them; and benchmarks/results/README.md
indexes every results file, with links that resolve."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

# Lines per guide: a page that needs more says less, or moves the lab's part beside its results.
MAX_LINES = {
    "README.md": 30,
    "choosing.md": 250,
    "ensembles.md": 70,
    "full_scale.md": 200,
    "install.md": 100,
    "layout.md": 70,
    "models.md": 180,
    "multi_gpu.md": 25,
    "reliability.md": 110,
    "sweeps.md": 100,
    "synthetic.md": 340,
    "training.md": 140,
}


def test_every_guide_is_within_its_length():
    pages = {
        p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in REPO.glob("docs/*.md")
    }
    assert set(pages) == set(MAX_LINES), "give a new page under docs/ its MAX_LINES"
    assert {name: n for name, n in pages.items() if n > MAX_LINES[name]} == {}


def test_the_results_index_names_every_results_file():
    index = (RESULTS / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w-]+)\.md\)", index))
    stems = {p.name.split(".")[0] for p in RESULTS.iterdir() if p.name != "README.md"}
    assert stems - linked == set(), "index these in benchmarks/results/README.md"
    assert linked - stems == set(), "the index links a results file that is not there"


def test_the_results_indexs_links_resolve():
    index = RESULTS / "README.md"
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", index.read_text(encoding="utf-8"))
    assert targets and [t for t in targets if not (index.parent / t).exists()] == []


def test_no_script_the_index_calls_removed_is_in_benchmarks():
    removed = re.findall(r"`(\w+\.py)` @ [^|]*\(removed after", (RESULTS / "README.md").read_text())
    assert removed and [s for s in removed if (REPO / "benchmarks" / s).exists()] == []
