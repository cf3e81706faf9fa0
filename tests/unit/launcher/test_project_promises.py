"""Promises of the project commands (`rl init`, `rl tasks`, `rl hf`, bare `rl`, `rl delete`,
`rl --dry-run`), on real files in a fresh project folder: a literal secret is never written
(refused with the fix, exit 2) and never echoed; input is bounded (YAML aliases, huge counts);
nothing is written until every check passed, and an OS error or a missing terminal is exit 2
naming the cause, never a traceback; an unset `$VAR` or a missing server command is caught
before anything starts."""

import io
import json
import os
import sys
import time
from pathlib import Path

import pytest

from launcher.commands import run_command
from launcher.lockfile import LOCK_FILE
from launcher.rl import main
from launcher.workflow import load_workflow
from rlcore.runs.rundir import RunDir

REPO = Path(__file__).resolve().parents[3]
SERVER = REPO / "examples" / "mcp_tasks" / "server.py"
SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project folder as the working folder, no $VARs of ours set."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    for name in ("MCP_KEY", "MCP_USER", "MCP_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return folder


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def write_tasks(folder: Path, server: dict, name: str = "tasks.json") -> Path:
    task = {
        "id": "t0",
        "prompt": "Open the locker.",
        "mcp_config": {"locker": server},
        "evaluate_tool": {"name": "evaluate", "arguments": {"expected": "apple"}},
    }
    path = folder / name
    path.write_text(json.dumps([task]))
    return path


def stdio(**extra) -> dict:
    return {"command": "python", "args": [str(SERVER)], **extra}


# -- secrets ---------------------------------------------------------------------------------

LITERAL_SERVERS = {
    "env API_KEY": stdio(env={"API_KEY": SECRET}),
    "env hf_token": stdio(env={"hf_token": SECRET}),
    "env DB_PASSWORD": stdio(env={"DB_PASSWORD": SECRET}),
    "env clientSecret": stdio(env={"clientSecret": SECRET}),
    "args --api-key VALUE": stdio(args=[str(SERVER), "--api-key", SECRET]),
    "args --token=VALUE": stdio(args=[str(SERVER), f"--token={SECRET}"]),
    "header X-Api-Key": {"url": "http://localhost:1/mcp", "headers": {"X-Api-Key": SECRET}},
    "header Authorization": {
        "url": "http://localhost:1/mcp",
        "headers": {"Authorization": f"Bearer {SECRET}"},
    },
    "url user info": {"url": f"http://bob:{SECRET}@localhost:1/mcp"},
    "url ?token=": {"url": f"http://localhost:1/mcp?token={SECRET}"},
    "url ?api_key=": {"url": f"http://localhost:1/mcp?x=1&api_key={SECRET}"},
}
COMMANDS = {
    "init --tasks": lambda f: ["init", "--tasks", str(f)],
    "tasks": lambda f: ["tasks", str(f), "--name", "x"],
    "hf": lambda f: ["hf", str(f), "--name", "org/x", "--no-push"],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("server", LITERAL_SERVERS)
def test_a_literal_secret_in_a_task_server_is_refused_unwritten_and_unechoed(
    project, capsys, command, server
):
    tasks = write_tasks(project, LITERAL_SERVERS[server])
    before = contents(project)
    assert run_command(command.split()[0], COMMANDS[command](tasks)[1:]) == 2
    captured = capsys.readouterr()
    assert "literal secret" in captured.err and ".env" in captured.err, captured.err
    assert "$" in captured.err  # the fix: the `$VAR` to write in its place
    assert SECRET not in captured.err + captured.out
    assert contents(project) == before  # nothing written: no lock, workflow YAML or dataset


def test_init_refuses_a_url_with_a_literal_token_and_names_no_value(project, capsys):
    assert run_command("init", [f"http://bob:{SECRET}@localhost:1/mcp?token={SECRET}"]) == 2
    err = capsys.readouterr().err
    assert "literal secret" in err and SECRET not in err and "$URL_USERINFO" in err
    assert contents(project) == {}


def test_a_url_in_an_error_shows_no_user_info_or_token(project, capsys, monkeypatch):
    """The server's URL takes its credentials from `$VAR`s; when it fails, the message names
    the server without them (nothing listens on port 1)."""
    monkeypatch.setenv("MCP_USER", f"bob:{SECRET}")
    monkeypatch.setenv("MCP_TOKEN", SECRET)
    assert run_command("init", ["http://$MCP_USER@127.0.0.1:1/mcp?token=$MCP_TOKEN"]) == 2
    err = capsys.readouterr().err
    assert "127.0.0.1:1/mcp" in err and SECRET not in err and "bob" not in err
    assert contents(project) == {}


# -- bounded input ---------------------------------------------------------------------------


def alias_bomb(levels: int) -> str:
    """A "billion laughs" YAML: each level's list holds ten aliases of the one before."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(60)  # an expanded bomb would run for hours
def test_yaml_aliases_are_refused_at_once_naming_the_file(project, capsys):
    workflow = project / "bomb.yaml"
    workflow.write_text("job: {name: x}\n" + alias_bomb(12))  # 10^12 strings if expanded
    started = time.monotonic()
    with pytest.raises(Exception, match=r"bomb.yaml:3:\d+: YAML aliases \(\*name\) are not"):
        load_workflow(workflow)
    LOCK_FILE.write_text(alias_bomb(12))
    tasks = write_tasks(project, stdio())
    assert run_command("hf", [str(tasks), "--name", "org/x", "--no-push"]) == 2
    assert "rl.lock.yaml:2:" in capsys.readouterr().err
    assert time.monotonic() - started < 5
    assert not (project / "data").exists()


def test_a_plain_anchor_free_yaml_still_loads(project):
    workflow = project / "w.yaml"
    workflow.write_text("job: {name: x}\nrubric: {weights: {task_completion: 1.0}}\n")
    assert load_workflow(workflow).job.name == "x"


@pytest.mark.parametrize(
    ("flags", "bound"),
    [
        (["--gpus", "99999999999999999999"], "1024"),
        (["--gpus", "2000000000xH100"], "1024"),
        (["--gpus", "9" * 5000], "1024"),
        (["--inference-gpu-ids", "[0, 2000000000]"], "1024"),
        (["--inference.replicas", "2000000000"], "256"),
        (["--slurm.gpus-per-node", "2000000000"], "64"),
        (["--slurm.nodes", "2000000000"], "1024"),
        (["--seq-len", "2000000000"], "1048576"),
        (["--async-level", "2000000000"], "64"),
        (["--max-steps", "2000000000"], "10000000"),
        (["--max-restarts", "2000000000"], "100"),
    ],
)
@pytest.mark.timeout(60)  # an unbounded count hangs
def test_huge_counts_are_exit_2_naming_the_bound(project, capsys, flags, bound):
    started = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        main([*flags, "--dry-run"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and bound in err and "Traceback" not in err, err
    assert time.monotonic() - started < 10


# -- check everything, then write ------------------------------------------------------------


def test_init_refuses_a_corrupt_lock_file_before_writing_the_workflow(project, capsys):
    LOCK_FILE.write_text("primary_dataset: [\n")
    assert run_command("init", [f"python {SERVER}"]) == 2
    assert "rl.lock.yaml" in capsys.readouterr().err
    assert not (project / "configs").exists()


def test_hf_refuses_an_env_file_that_is_not_utf8_before_writing(project, capsys):
    (project / ".env").write_bytes(b"HF_TOKEN=\xff\xfe\n")
    tasks = write_tasks(project, stdio())
    before = contents(project)
    for argv in ([str(tasks), "--name", "org/x", "--no-push"], [str(tasks), "--name", "org/x"]):
        assert run_command("hf", argv) == 2
        err = capsys.readouterr().err
        assert ".env is not UTF-8" in err and "Traceback" not in err
        assert contents(project) == before


def write_cases(project: Path) -> dict[str, tuple[list[str], str]]:
    (project / "a-folder").mkdir()
    (project / "a-file").write_text("mine\n")
    return {
        "-o a folder": (["-o", "a-folder", "--force"], "is a folder"),
        "a parent that is a file": (["-o", "a-file/x.yaml"], "a-file is a file, not a folder"),
    }


@pytest.mark.parametrize("case", ["-o a folder", "a parent that is a file"])
def test_init_names_the_path_it_cannot_write_and_writes_nothing(project, capsys, case):
    flags, words = write_cases(project)[case]
    before = contents(project)
    assert run_command("init", [f"python {SERVER}", *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err
    assert contents(project) == before and not LOCK_FILE.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_init_in_a_read_only_folder_names_it(project, capsys):
    project.chmod(0o555)
    try:
        assert run_command("init", [f"python {SERVER}"]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        project.chmod(0o755)


class EndedTerminal(io.StringIO):
    """A terminal whose input has ended (Ctrl-D, or closed under the process)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stdin", [None, "closed", "ended"])
def test_delete_without_a_terminal_names_the_flag(tmp_path, capsys, monkeypatch, stdin):
    run = RunDir(tmp_path / "r")
    run.claim()
    run.run_json.write_text(json.dumps({"status": "finished", "launcher_pid": None}))
    if stdin == "closed":
        stdin = io.StringIO()
        stdin.close()
    elif stdin == "ended":
        stdin = EndedTerminal("")
    monkeypatch.setattr(sys, "stdin", stdin)
    assert run_command("delete", [str(run.root)]) == 2
    err = capsys.readouterr().err
    assert "needs --yes (no terminal to ask)" in err and run.root.exists()


def test_bare_rl_whose_input_ends_while_asking_is_exit_2(project, capsys, monkeypatch):
    from launcher.interactive import bare_rl

    monkeypatch.setattr(sys, "stdin", EndedTerminal(""))
    assert bare_rl() == 2
    assert "no terminal to ask" in capsys.readouterr().err
    assert contents(project) == {}


# -- unset variables and missing commands ----------------------------------------------------

UNREADY_SERVERS = {
    "url": ({"url": "http://localhost:1/mcp?token=$MCP_TOKEN"}, "locker.url: $MCP_TOKEN"),
    "header": (
        {"url": "http://localhost:1/mcp", "headers": {"Authorization": "Bearer ${MCP_TOKEN}"}},
        "locker.headers.Authorization: $MCP_TOKEN",
    ),
    "env": (stdio(env={"API_KEY": "$MCP_KEY"}), "locker.env.API_KEY: $MCP_KEY is not set"),
    "command": (
        {"command": "no-such-mcp-server-here", "args": []},
        "'no-such-mcp-server-here' is not on PATH",
    ),
}


@pytest.mark.parametrize("server", UNREADY_SERVERS)
@pytest.mark.parametrize("command", ["tasks", "hf", "init --tasks"])
def test_unset_variables_and_missing_commands_are_caught_before_writing(
    project, capsys, command, server
):
    spec, words = UNREADY_SERVERS[server]
    tasks = write_tasks(project, spec)
    before = contents(project)
    assert run_command(command.split()[0], COMMANDS[command](tasks)[1:]) == 2
    err = capsys.readouterr().err
    assert words in err and "task 0" in err, err
    assert contents(project) == before


@pytest.mark.parametrize("server", UNREADY_SERVERS)
def test_a_dry_run_catches_them_too(project, capsys, server):
    spec, words = UNREADY_SERVERS[server]
    write_tasks(project, spec)
    (project / "rl.toml").write_text(
        'output_dir = "outputs/x"\n[[orchestrator.env]]\nid = "rl-tasks"\n'
        'args = { tasks = "tasks.json" }\n'
    )
    with pytest.raises(SystemExit) as exc:
        main(["@", "rl.toml", "--dry-run"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and words in err, err


def test_a_variable_set_in_dotenv_passes(project, capsys):
    (project / ".env").write_text("MCP_TOKEN=abc\n")
    tasks = write_tasks(project, UNREADY_SERVERS["header"][0])
    assert run_command("tasks", [str(tasks), "--name", "x"]) == 0, capsys.readouterr().err
