"""`rl delete`, `--dry-run` and a start against a run another process holds: the holder is a
real separate process (a trainer or orchestrator started alone holds the lock shared), or a
SLURM job answered by stand-in squeue/scancel programs (the remote cluster's boundary)."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.commands import run_command
from launcher.preflight import check_output_dir, prepare_run_dir
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from launcher.slurm import job_comment
from rlcore.errors import ConfigError
from rlcore.runs.ownership import read_run_id
from rlcore.runs.rundir import RunDir
from rlcore.runs.runguard import LAUNCHER_ENV
from tests.unit.launcher.test_path_promises import make_tree, release_locks, snapshot

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

HOLD = """
import sys, time
from pathlib import Path
from rlcore.runs.runguard import join_run
join_run(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def trainer_alone(tmp_path, monkeypatch):
    """A run with checkpoints, and a function starting a separate process that holds its lock
    the way a trainer or orchestrator started alone does (shared)."""
    cwd = make_tree(monkeypatch, tmp_path)
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != LAUNCHER_ENV}
        env["PYTHONPATH"] = str(REPO)
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(cwd / "outputs" / "sibling")],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield cwd / "outputs" / "sibling", start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_rl_delete_refuses_a_run_a_trainer_started_alone_holds(trainer_alone, capsys):
    root, start = trainer_alone
    holder = start()
    before = snapshot(root)
    assert run_command("delete", [str(root), "--yes"]) == 2
    err = capsys.readouterr().err
    assert f"pid {holder.pid}" in err and "shared lock" in err and "then try again" in err
    assert snapshot(root) == before  # the checkpoints are still there
    holder.kill()
    holder.wait()
    assert run_command("delete", [str(root), "--yes"]) == 0 and not root.exists()


def test_a_dry_run_and_a_start_report_a_shared_holder(trainer_alone):
    root, start = trainer_alone
    holder = start()
    plan = build_plan(RLConfig.model_validate({"output_dir": str(root)}), dry_run=True)
    with pytest.raises(ConfigError, match=rf"pid {holder.pid} \(.*shared lock\)"):
        check_output_dir(plan, clean=True)
    try:
        with pytest.raises(ConfigError, match=rf"pid {holder.pid} .*--output-dir"):
            prepare_run_dir(plan, clean=True)
    finally:
        release_locks()
    assert (root / "checkpoints").is_dir()


def fake_slurm(tmp_path, monkeypatch, state: str, run: RunDir | None = None) -> Path:
    """squeue/scancel on PATH answering for one job (a remote cluster's boundary), submitted
    with `run`'s comment (launcher.slurm.job_comment)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    comment = job_comment(run.root, read_run_id(run.root)) if run else ""
    answer = shlex.quote(f"{state}|{comment}")
    (bin_dir / "squeue").write_text(f"#!/bin/sh\necho {answer}\n" if state else "#!/bin/sh\n")
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$2" > {tmp_path / "cancelled"}\n')
    for tool in ("squeue", "scancel"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return bin_dir


def test_rl_delete_refuses_a_run_submitted_to_slurm_until_stopped(tmp_path, monkeypatch, capsys):
    cwd = make_tree(monkeypatch, tmp_path)
    run = RunDir(cwd / "outputs" / "sibling")
    run.run_json.write_text(json.dumps({"status": "submitted", "slurm_job_id": "4242"}))
    fake_slurm(tmp_path, monkeypatch, "RUNNING", run)
    assert run_command("delete", ["sibling", "--yes"]) == 2
    assert "SLURM as job 4242" in capsys.readouterr().err and run.checkpoints.is_dir()
    plan = build_plan(RLConfig.model_validate({"output_dir": str(run.root)}), dry_run=True)
    with pytest.raises(ConfigError, match="job 4242"):
        check_output_dir(plan, clean=True)
    assert run_command("stop", ["sibling"]) == 0
    assert (tmp_path / "cancelled").read_text().strip() == "4242"
    assert json.loads(run.run_json.read_text())["status"] == "stopped"
    assert run_command("delete", ["sibling", "--yes"]) == 0 and not run.root.exists()


def test_a_slurm_job_squeue_no_longer_lists_is_over(tmp_path, monkeypatch):
    cwd = make_tree(monkeypatch, tmp_path)
    run = RunDir(cwd / "outputs" / "sibling")
    run.run_json.write_text(json.dumps({"status": "running", "slurm_job_id": "77"}))
    fake_slurm(tmp_path, monkeypatch, "")
    assert run_command("delete", ["sibling", "--yes"]) == 0 and not run.root.exists()
