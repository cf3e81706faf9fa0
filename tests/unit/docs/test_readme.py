"""The README is a door: short, with the two commands as they are, and every link it gives
leads to a file of the repository (the site's own links are checked by `mkdocs build
--strict` in .ci/run)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
MAX_LINES = 250
TWO_COMMANDS = (
    "uv run --extra cpu rl --trainer @ configs/quickstart/train.toml --orchestrator @ "
    "configs/quickstart/orch.toml --inference @ configs/quickstart/infer.toml",
    "uv run --extra cpu pytest",
)


def test_readme_is_short_and_shows_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES})"
    for command in TWO_COMMANDS:
        assert command in lines, command


def test_readme_links_lead_to_files():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t)]
    assert local, "the README links into the docs"
    missing = [t for t in local if t and not (REPO / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_nothing_points_outside_the_repository():
    """No page names a file above the repository's root."""
    pages = [README, *sorted((REPO / "docs").rglob("*.md"))]
    for page in pages:
        assert "](../../../" not in page.read_text(), page
        if page.parent == REPO:
            assert "](../" not in page.read_text(), page
