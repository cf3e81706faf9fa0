"""Bare `rl` run by a program without a terminal (standard input closed, or empty): exit 2
naming the command to use instead, never a traceback. The real CLI in a fresh project folder."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def rl(*args: str, cwd: Path, close_stdin: bool) -> subprocess.CompletedProcess:
    """The real CLI; with `close_stdin` its standard input is closed, not just empty."""
    return subprocess.run(
        [sys.executable, "-m", "launcher.rl", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=None if close_stdin else subprocess.DEVNULL,
        preexec_fn=(lambda: os.close(0)) if close_stdin else None,
    )


@pytest.mark.parametrize("close_stdin", [True, False])
def test_bare_rl_without_a_terminal_is_exit_2_naming_the_command(project, close_stdin):
    done = rl(cwd=project, close_stdin=close_stdin)
    assert done.returncode == 2, done.stderr
    assert "no terminal" in done.stderr and "rl --config" in done.stderr
    assert "Traceback" not in done.stderr
