"""`rl stop`, `status` and `delete` on a run submitted to SLURM (issue #60): a job id read back
from run.json is cancelled only when the scheduler says the job is this run's (the comment rl
submits it with, launcher.slurm.prove_job), never a copied folder's or a stale number's job.
The scheduler is a stand-in (squeue, scancel and sbatch on PATH: a remote cluster's
boundary)."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from launcher import slurm
from launcher.commands import run_command
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from rlcore.config.entry import parse_config
from rlcore.runs.ownership import read_run_id
from rlcore.runs.rundir import RunDir

pytestmark = pytest.mark.integration

SQUEUE = """\
#!{python}
import json, os, sys
jobs = json.load(open(os.environ["FAKE_SLURM_JOBS"]))
ids = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--jobs=")]
if not ids or ids[0] not in jobs:
    sys.stderr.write("slurm_load_jobs error: Invalid job id specified\\n")
    sys.exit(1)
state, comment = jobs[ids[0]]
print(f"{{state}}|{{comment}}")
"""
SCANCEL = """\
#!{python}
import json, os, sys
with open(os.environ["FAKE_SLURM_CANCELLED"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
"""


@pytest.fixture
def scheduler(tmp_path, monkeypatch):
    """squeue and scancel stand-ins on PATH: `jobs(id=(state, comment))` sets what squeue
    knows; `cancelled()` lists each scancel's arguments."""
    bin_dir, known, log = tmp_path / "bin", tmp_path / "jobs.json", tmp_path / "cancelled"
    bin_dir.mkdir()
    for name, text in (("squeue", SQUEUE), ("scancel", SCANCEL)):
        (bin_dir / name).write_text(text.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_JOBS", str(known))
    monkeypatch.setenv("FAKE_SLURM_CANCELLED", str(log))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)

    class Scheduler:
        def jobs(self, **jobs):
            known.write_text(json.dumps({k.lstrip("j"): v for k, v in jobs.items()}))

        def cancelled(self):
            return (
                [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
            )

    found = Scheduler()
    found.jobs()
    return found


def submitted_run(root: Path, job_id, status: str = "submitted") -> RunDir:
    run = RunDir(root)
    run.claim()
    run.run_json.write_text(json.dumps({"status": status, "slurm_job_id": job_id}))
    return run


def comment_of(run: RunDir) -> str:
    return slurm.job_comment(run.root, read_run_id(run.root))


#


def test_rl_stop_cancels_the_job_the_scheduler_says_is_this_runs(tmp_path, scheduler, capsys):
    run = submitted_run(tmp_path / "r", "4242")
    scheduler.jobs(j4242=("RUNNING", comment_of(run)))
    assert run_command("stop", [str(run.root)]) == 0
    assert scheduler.cancelled() == [["--", "4242"]]  # after --: never an option
    assert "cancelled SLURM job 4242" in capsys.readouterr().out
    assert json.loads(run.run_json.read_text())["status"] == "stopped"


def test_rl_stop_leaves_a_job_of_a_copied_or_stale_folder_alone(tmp_path, scheduler, capsys):
    """A copy of a run (same marker, same job id) or a stale id reused by someone else's job:
    the scheduler's record names another run or folder, so nothing is cancelled; the run is
    marked stopped (no job of it runs) and `rl delete` then agrees."""
    original = submitted_run(tmp_path / "original", "4242")
    copy = tmp_path / "copy"
    shutil.copytree(original.root, copy, symlinks=True)
    scheduler.jobs(j4242=("RUNNING", comment_of(original)), j77=("RUNNING", "someone's job"))
    assert run_command("stop", [str(copy)]) == 0
    out = capsys.readouterr().out
    assert "SLURM job 4242 is not this run's job" in out and "nothing cancelled" in out
    stale = submitted_run(tmp_path / "stale", "77")
    assert run_command("stop", [str(stale.root)]) == 0
    assert "SLURM job 77 is not this run's job" in capsys.readouterr().out
    assert scheduler.cancelled() == []
    assert run_command("delete", [str(copy), "--yes"]) == 0 and not copy.exists()


def test_rl_stop_refuses_a_job_it_cannot_prove_and_delete_agrees(tmp_path, scheduler, capsys):
    """A job without rl's comment (an older rl's, or anyone's) may be the run's: neither
    cancelled nor taken as over."""
    run = submitted_run(tmp_path / "r", "4242")
    scheduler.jobs(j4242=("RUNNING", ""))
    assert run_command("stop", [str(run.root)]) == 1
    out = capsys.readouterr().out
    assert "carries no rl-run comment" in out and "nothing cancelled" in out
    assert "`scancel 4242`" in out and scheduler.cancelled() == []
    assert run_command("delete", [str(run.root), "--yes"]) == 2 and run.root.exists()
    assert "SLURM as job 4242" in capsys.readouterr().err


def test_rl_status_says_whose_job_it_is(tmp_path, scheduler, capsys):
    run = submitted_run(tmp_path / "r", "4242")
    scheduler.jobs(j4242=("PENDING", "rl-run:0123456789abcdef:/elsewhere"))
    assert run_command("status", [str(run.root)]) == 0
    out = capsys.readouterr().out
    assert "slurm job:    4242 (PENDING; SLURM job 4242 is not this run's job" in out


def test_sbatch_submits_with_the_runs_comment(tmp_path, monkeypatch):
    """The comment the scheduler keeps is what proves the job later (`prove_job`)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(tmp_path / 'argv')!r}, 'w').write(json.dumps(sys.argv[1:]))\nprint('9')\n"
    )
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    argv = ["--slurm.nodes", "1", "--slurm.gpus-per-node", "0", "--output-dir", "run"]
    config, _ = parse_config(
        RLConfig, "rl", argv, sections=("trainer", "orchestrator", "inference")
    )
    plan = build_plan(config, dry_run=False)
    try:
        assert slurm.submit(plan, lambda plan: None) == 0
    finally:
        from tests.unit.launcher.test_path_promises import release_locks

        release_locks()
    run = RunDir(tmp_path / "run")
    argv = json.loads((tmp_path / "argv").read_text())
    assert f"--comment={comment_of(run)}" in argv
    assert comment_of(run) == f"rl-run:{read_run_id(run.root)}:{run.root.resolve()}"
    job = slurm.Job("9", "RUNNING", comment_of(run))
    assert slurm.prove_job(job, run.root) is None
