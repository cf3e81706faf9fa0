"""rlcore/files/paths.py: the nearest existing folder above a path, the one place that answers where
a new file or folder would be made (free space, permissions, a file in the way)."""

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rlcore.files.paths import nearest_existing


def test_an_existing_path_is_its_own_answer(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    assert nearest_existing(tmp_path) == tmp_path
    assert nearest_existing(tmp_path / "notes.txt") == tmp_path / "notes.txt"


def test_a_missing_tail_answers_the_folder_that_would_hold_it(tmp_path):
    assert nearest_existing(tmp_path / "a" / "b" / "c") == tmp_path
    assert nearest_existing("/") == Path("/")


def test_a_relative_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert nearest_existing("nothere/deeper") == tmp_path


def test_a_dangling_link_stops_the_walk_only_when_links_count(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    below = tmp_path / "dangling" / "run"
    assert nearest_existing(below) == tmp_path
    assert nearest_existing(below, links=True) == tmp_path / "dangling"


@given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=5))
def test_the_answer_exists_and_is_the_path_or_above_it(parts):
    path = Path("/nonexistent-rl-test-root", *parts)
    found = nearest_existing(path)
    assert found.exists() and (found == path or found in path.parents)
