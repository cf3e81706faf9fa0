"""The tool-use workflow as its users write it, in a fresh project folder against a local MCP
server: `rl init IMAGE` (docker faked at its boundary: a `docker` on PATH that runs the server
here), `rl hf` (the hub faked at its boundary), bare `rl`, then 2 training steps of the tiny
model from the YAML and the lock file's dataset, with the rubric's terms logged."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import REPO, free_port, kill_sessions, run_state

pytestmark = pytest.mark.integration
SERVER = REPO / "examples" / "mcp_tasks" / "server.py"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A new project folder with tasks that name no server, and a `docker` that answers `info`
    and runs the locker server for `docker run --rm -i IMAGE`."""
    folder = tmp_path / "project"
    bin_dir = tmp_path / "bin"
    folder.mkdir()
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = info ]; then echo "Server Version: fake"; exit 0; fi\n'
        f'if [ "$1" = run ]; then exec {sys.executable} {SERVER}; fi\n'
        "exit 1\n"
    )
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    tasks = json.loads((REPO / "examples" / "mcp_tasks" / "tasks.json").read_text())
    for task in tasks:
        task.pop("mcp_config")
    (folder / "tasks.json").write_text(json.dumps(tasks))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return folder


def rl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "launcher.rl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_init_hf_and_two_steps_from_the_yaml(project, tiny_model_dir, monkeypatch):
    done = rl("init", "my-env:latest")
    assert done.returncode == 0, done.stderr
    workflow = yaml.safe_load((project / "configs" / "my-env.yaml").read_text())
    assert workflow["job"] == {"name": "my-env", "metadata": {"environment": "my-env:latest"}}
    assert "<tool>NAME(ARGUMENTS)</tool>" in workflow["system_prompt"]
    assert "submit(word)" in workflow["system_prompt"]
    assert workflow["action_mappings"]["submit"] == {
        "_tool": "submit",
        "_parser": {"positional": ["word"]},
        "word": {"from_arg": "word"},
    }
    assert set(workflow["parser"]) == {"use_thinking", "xml_weight", "action_weight"}
    assert set(workflow["rubric"]["weights"]) == {
        "task_completion",
        "tool_execution",
        "format_compliance",
    }
    assert yaml.safe_load(Path("rl.lock.yaml").read_text())["image"] == "my-env:latest"
    again = rl("init", "my-env:latest")
    assert again.returncode == 2 and "--force" in again.stderr
    assert rl("init", "my-env:latest", "--force").returncode == 0
    assert rl("init", "my-env:latest", "-o", "configs/other.yaml").returncode == 0
    assert (project / "configs" / "other.yaml").exists()

    pushed = hf_with_a_fake_hub(monkeypatch)
    assert pushed == [("my-org/my-tasks", True)]
    lock = yaml.safe_load(Path("rl.lock.yaml").read_text())
    assert lock["primary_dataset"]["name"] == "my-org/my-tasks"
    assert lock["primary_dataset"]["task_count"] == 8

    bare = rl()
    assert bare.returncode == 2 and "configs/my-env.yaml" in bare.stdout
    assert "my-org/my-tasks" in bare.stdout and not Path("outputs").exists()

    train_two_steps(project, tiny_model_dir)


def hf_with_a_fake_hub(monkeypatch) -> list:
    from launcher.commands import hf, run_command

    pushed = []
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.setattr(
        hf, "push_to_hub", lambda folder, name, private, token: pushed.append((name, private))
    )
    assert run_command("hf", ["tasks.json", "--name", "my-org/my-tasks", "--private"]) == 0
    return pushed


def train_two_steps(project: Path, tiny_model_dir: Path) -> None:
    small = project / "small.toml"
    small.write_text(
        'seq_len = 512\n[trainer.model]\ndtype = "float32"\n[orchestrator]\nbatch_size = 8\n'
        "[orchestrator.sampling]\nmax_tokens = 24\n[inference.cpu]\nkvcache_space_gib = 1\n"
        f"[inference.server]\nport = {free_port()}\n"
    )
    out = project / "outputs" / "my-env"
    log = project / "rl.log"
    with log.open("w") as handle:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "launcher.rl",
                "--config",
                "configs/my-env.yaml",
                "--model",
                str(tiny_model_dir),
                "@",
                str(small),
                "--max-steps",
                "2",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        code = proc.wait(timeout=900)
    finally:
        kill_sessions({proc.pid, *run_state(out).get("pids", {}).values()})
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "start these local programs" in text
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["component"] == "orchestrator" and "reward" in r]
    assert len(steps) == 2
    for term in ("task_completion", "tool_execution", "format_compliance"):
        assert all(f"metrics/{term}" in r for r in steps), steps[0].keys()
    orch = (out / "configs" / "orchestrator.toml").read_text()
    assert "data/datasets/my-org/my-tasks" in orch and "action_mappings" in orch


def test_gpus_and_providers_are_checked(project):
    done = rl("--gpus", "4xH100", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "asks for H100 GPUs" in done.stderr and "GPUs 0,1,2" in done.stdout
    other = rl("--gpus", "4", "--provider", "runpod", "--dry-run")
    assert other.returncode == 2 and "local, slurm" in other.stderr
    assert shutil.which("docker")  # the fake one: init's docker check passes through it
