"""`hold_run` on a folder whose run marker is gone: a clear error naming the flag; a refusal
quotes the holder's command line without its secrets. The locks between live processes are
tested with real holders in tests/integration/test_runlock_holders.py."""

import os

import pytest

from rlcore.errors import ConfigError
from rlcore.runs.rundir import RunDir
from rlcore.runs.runguard import hold_run, in_use_message, locked


def test_a_folder_whose_marker_went_missing_is_a_clear_error(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(ConfigError, match=r"\.rl-run cannot be opened .*--output-dir"):
        hold_run(tmp_path / "run")


SECRET = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    "argv",
    [
        ["rl", "--wandb-api-key", SECRET, "@", "rl.toml"],
        ["rl", f"--wandb-api-key={SECRET}", "@", "rl.toml"],
        ["orchestrator", "--token", SECRET, "--client.base-url", f"http://u:{SECRET}@h/v1"],
        ["env", f"HF_TOKEN={SECRET}", "trainer", "@", "t.toml"],
    ],
)
def test_a_refusal_quotes_the_holders_command_line_without_its_secrets(tmp_path, monkeypatch, argv):
    """The holder is this process (a real lock); its command line, as psutil reads it, is the
    one given here."""
    import psutil

    root = tmp_path / "run"
    RunDir(root).claim()
    monkeypatch.setattr(psutil.Process, "cmdline", lambda self: list(argv))
    with locked(root):
        message = in_use_message(root)
    assert f"pid {os.getpid()} (`{argv[0]} " in message and "***" in message, message
    assert SECRET not in message
