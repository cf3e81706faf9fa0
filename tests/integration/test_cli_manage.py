"""Run management subcommands and run-directory preparation."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.runs import waits
from rlcore.runs.rundir import RunDir

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def rl(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    code = "import sys; from launcher.rl import main; main(sys.argv[1:])"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, env=env
    )


def test_init_prints_a_config_that_parses(tmp_path):
    result = rl("init", "rl-repeat-word")
    assert result.returncode == 0
    (tmp_path / "rl.toml").write_text(result.stdout)
    dry = rl("@", str(tmp_path / "rl.toml"), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert 'id = "rl-repeat-word"' in dry.stdout


def test_status_reports_steps_and_checkpoints(tmp_path):
    run = RunDir(tmp_path / "run")
    run.claim()
    for step in (2, 4):
        (run.checkpoint_dir(step)).mkdir(parents=True)
    (run.checkpoint_dir(2) / "MANIFEST").write_text("{}")
    run.append_metrics("trainer", 3, {"loss": 0.1})
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    launcher_pid = int(gone.stdout)  # a pid that has ended (999999999 is no pid: damaged)
    run.run_json.write_text(json.dumps({"status": "failed", "launcher_pid": launcher_pid}))
    result = rl("status", str(run.root))
    assert result.returncode == 0, result.stderr
    assert "failed" in result.stdout and "last logged step 3" in result.stdout
    assert "checkpoint:   2 (complete: [2])" in result.stdout


def test_status_names_what_a_live_component_waits_for(tmp_path):
    run = RunDir(tmp_path / "run")
    run.claim()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for name, pid in (("trainer", holder.pid), ("orchestrator", 999999999)):
            record = {
                "component": name,
                "pid": pid,
                "attempt": None,
                "waits": [
                    {
                        "id": 1,
                        "waiting_for": "batch 3",
                        "peer": "orchestrator",
                        "server": None,
                        "detail": None,
                    },
                    {
                        "id": 2,
                        "waiting_for": "policy step 2",
                        "peer": "inference",
                        "server": 1,
                        "detail": None,
                    },
                ],
            }
            waits.state_file(run.root, name).parent.mkdir(exist_ok=True)
            waits.state_file(run.root, name).write_text(json.dumps(record))
        result = rl("status", str(run.root))
    finally:
        holder.kill()
    assert result.returncode == 0, result.stderr
    lines = {line.split(":")[0]: line for line in result.stdout.splitlines()}
    trainer = lines["trainer"]
    assert "waiting for batch 3 from the orchestrator; policy step 2 from inference-1" in trainer
    assert "waiting" not in lines["orchestrator"]  # its process is gone: no stale wait shown


def test_logs_and_stop_need_a_run_directory(tmp_path):
    for sub in ("status", "logs", "stop"):
        result = rl(sub, str(tmp_path / "missing"))
        assert result.returncode == 2 and "is not a run folder" in result.stderr


def test_logs_prints_component_logs(tmp_path):
    run = RunDir(tmp_path)
    run.claim()
    run.logs.mkdir()
    run.log_file("trainer").write_text("hello from trainer\n")
    result = rl("logs", str(tmp_path), "trainer")
    assert result.returncode == 0 and "hello from trainer" in result.stdout


def test_incomplete_checkpoint_is_not_latest(tmp_path):
    run = RunDir(tmp_path)
    for step in (1, 2):
        run.checkpoint_dir(step).mkdir(parents=True)
    (run.checkpoint_dir(1) / "MANIFEST").write_text("{}")
    assert run.latest_checkpoint() == 1
    assert run.resolve_resume_step(-1) == 1
