"""benchmarks/update_readme.py: README's figure blocks come from the results files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "update_readme.py"
spec = importlib.util.spec_from_file_location("update_readme", SCRIPT)
update_readme = importlib.util.module_from_spec(spec)
spec.loader.exec_module(update_readme)


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
