"""Every console script (pyproject's [project.scripts]) ends quietly when the reader of its
standard output goes away (`rl --help | head -1`): exit 141, as a tool killed by SIGPIPE, and
nothing on stderr, never a BrokenPipeError traceback. A broken pipe elsewhere (a socket) is
still an error."""

import contextlib
import importlib
import os
import sys
import tomllib
from pathlib import Path

import pytest

from rlcore.config.entry import BROKEN_PIPE_EXIT_CODE, entry_point

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


@contextlib.contextmanager
def stdout_without_reader():
    """Standard output a pipe whose reading end is closed (the `head` that has exited). Set
    inside the test: pytest puts its own capture back as sys.stdout after fixtures ran."""
    read, write = os.pipe()
    os.close(read)
    stream = open(write, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    real, sys.stdout = sys.stdout, stream
    try:
        yield stream
    finally:
        sys.stdout = real
        with contextlib.suppress(OSError):
            stream.close()


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_into_a_closed_pipe_exits_quietly(script, capsys):
    module, _, name = SCRIPTS[script].partition(":")
    main = getattr(importlib.import_module(module), name)
    with pytest.raises(SystemExit) as exc, stdout_without_reader():
        main(["--help"])
    assert exc.value.code == BROKEN_PIPE_EXIT_CODE == 141
    assert capsys.readouterr().err == ""


def test_a_short_output_into_a_closed_pipe_exits_quietly():
    @entry_point("test")
    def main() -> None:
        print("one line")  # buffered: the write fails at the flush

    with pytest.raises(SystemExit) as exc, stdout_without_reader():
        main()
    assert exc.value.code == BROKEN_PIPE_EXIT_CODE


def test_a_broken_pipe_elsewhere_is_still_an_error():
    @entry_point("test")
    def main() -> None:
        raise BrokenPipeError("a socket's peer went away")

    with pytest.raises(BrokenPipeError, match="socket"):
        main()
