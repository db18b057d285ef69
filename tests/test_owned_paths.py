"""files.within: a path read from a file (an install manifest, a sweep record) is a name
inside the folder that owns it, or one line saying how it leaves that folder (issue 58)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpu_tiles_models import files
from tpu_tiles_models.errors import UserError

WHERE, FIX = "rec.json: the entry", "delete rec.json"


def _within(folder: Path | str, name: str) -> str:
    return files.within(folder, name, where=WHERE, fix=FIX)


def test_a_name_inside_is_joined_to_its_folder(tmp_path):
    assert _within(tmp_path, "a/b.txt") == str(tmp_path / "a" / "b.txt")
    assert _within(tmp_path, "./a//b.txt") == str(tmp_path / "a" / "b.txt")
    assert _within("gs://bucket/sw", "model_x") == "gs://bucket/sw/model_x"


def test_a_link_that_stays_inside_is_followed_and_the_last_name_is_not(tmp_path):
    """A link among the folders that resolves inside is fine; the last name is what the
    caller replaces or removes (a link there is replaced itself, its target untouched), so it
    is not resolved."""
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real")
    (tmp_path / "leaf").symlink_to("/")
    assert _within(tmp_path, "alias/x") == str(tmp_path / "alias" / "x")
    assert _within(tmp_path, "leaf") == str(tmp_path / "leaf")


@pytest.mark.parametrize(
    "name, why",
    [
        ("/etc/passwd", "is an absolute path, not a name in {f}"),
        ("gs://bucket/x", "is an absolute path, not a name in {f}"),
        ("../x", "climbs out of {f} with '..'"),
        ("a/../../x", "climbs out of {f} with '..'"),
        ("", "names {f} itself, not a file in it"),
        ("./", "names {f} itself, not a file in it"),
        ("a\0b", "holds a NUL character"),
    ],
)
def test_a_name_that_leaves_its_folder_is_one_line(tmp_path, name, why):
    with pytest.raises(files.OutsideError) as err:
        _within(tmp_path, name)
    assert str(err.value) == f"{WHERE} {name!r} {why.format(f=tmp_path)}; {FIX}"
    assert isinstance(err.value, UserError)


def test_a_link_that_leads_out_is_named(tmp_path):
    owner, elsewhere = tmp_path / "owner", tmp_path / "elsewhere"
    (elsewhere / "deep").mkdir(parents=True)
    (owner / "sub").mkdir(parents=True)
    (owner / "sub" / "out").symlink_to(elsewhere)
    with pytest.raises(files.OutsideError) as err:
        _within(owner, "sub/out/deep/x")
    assert str(err.value) == (
        f"{WHERE} 'sub/out/deep/x' leads out of {owner} through the symbolic link "
        f"{owner / 'sub' / 'out'}; {FIX}"
    )
