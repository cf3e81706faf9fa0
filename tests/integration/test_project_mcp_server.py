"""Project commands against the real example MCP server (examples/mcp_tasks/server.py, a
process `rl init` starts to list its tools): a `$VAR` reference is recorded and its value never
written or echoed, and an OS error while writing after the server answered is exit 2 naming
the path."""

import pytest

from launcher.commands import run_command
from launcher.lockfile import read_lock
from tests.unit.launcher.test_project_promises import SECRET, SERVER, contents, stdio, write_tasks

pytestmark = pytest.mark.integration


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project folder as the working folder, no $VARs of ours set."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    for name in ("MCP_KEY", "MCP_USER", "MCP_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return folder


def test_references_are_recorded_and_their_values_never_written(project, capfd):
    """`rl init --tasks` (against the real example server) and `rl hf` record the reference."""
    (project / ".env").write_text(f"MCP_KEY={SECRET}\n")
    tasks = write_tasks(project, stdio(env={"API_KEY": "$MCP_KEY", "PLAIN": "1"}))
    assert run_command("init", ["--tasks", str(tasks)]) == 0, capfd.readouterr().err
    assert run_command("hf", [str(tasks), "--name", "org/x", "--no-push"]) == 0
    assert read_lock()["mcp_config"]["locker"]["env"] == {"API_KEY": "$MCP_KEY", "PLAIN": "1"}
    captured = capfd.readouterr()
    written = {k: v for k, v in contents(project).items() if k != ".env"}
    assert written and not any(SECRET.encode() in data for data in written.values())
    assert SECRET not in captured.out + captured.err


def test_an_os_error_while_writing_is_exit_2_naming_the_path(project, capfd, monkeypatch):
    """A write that fails after the checks passed and the real server answered (a full disk,
    a folder made read-only in between) names the path and the cause."""

    def full_disk(path, text, mode=None):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("launcher.lockfile.atomic_write_text", full_disk)
    assert run_command("init", [f"python {SERVER}", "-o", "configs/x.yaml"]) == 2
    err = capfd.readouterr().err
    assert "cannot write " in err and "configs/x.yaml: No space left on device" in err, err
