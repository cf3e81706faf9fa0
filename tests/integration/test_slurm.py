"""`rl` on a real SLURM cluster (one node, set up by tests/integration/slurm_nodes.py): a
tiny-model job runs to completion, and a job whose trainer is killed fails with nothing left
running. Skipped, saying why, where SLURM cannot be installed."""

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.integration.helpers import REPO, free_port, tiny_rl_toml, wait_for
from tests.integration.slurm_nodes import MultiNodeCluster, serving, wait_for_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = MultiNodeCluster(tmp_path_factory.mktemp("slurm"), num_nodes=1)
    reason = nodes.start()
    if reason is not None:
        pytest.skip(f"no SLURM here: {reason}")
    with serving(nodes):
        yield nodes


def submit(tmp_path: Path, model: Path, max_steps: int) -> tuple[Path, str]:
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(
        tiny_rl_toml(model, out, free_port(), max_steps=max_steps)
        + '[slurm]\nnodes = 1\ngpus_per_node = 0\ntime = "00:30:00"\n'
    )
    cmd = [sys.executable, "-m", "launcher.rl", "@", str(config)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted SLURM job" in done.stdout, done.stdout
    job_id = json.loads((out / "run.json").read_text())["slurm_job_id"]
    return out, job_id


def run_processes(out: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if str(out) in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_a_job_runs_to_completion(cluster, tiny_model_dir, tmp_path):
    out, job_id = submit(tmp_path, tiny_model_dir, max_steps=3)
    state = wait_for_job(job_id)
    log = (out / "logs" / f"slurm-{job_id}.log").read_text()
    assert state == "COMPLETED", log[-3000:]
    assert "rl: run finished" in log, log[-3000:]
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    status = subprocess.run(
        [sys.executable, "-m", "launcher.rl", "status", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"slurm job:    {job_id} (COMPLETED)" in status.stdout, status.stdout
    assert not run_processes(out)


def test_a_killed_trainer_fails_the_job_and_leaves_nothing(cluster, tiny_model_dir, tmp_path):
    out, job_id = submit(tmp_path, tiny_model_dir, max_steps=50)

    def trainer() -> psutil.Process | None:
        for proc in run_processes(out):
            if "trainer.main" in " ".join(proc.cmdline()) and proc.name().startswith("python"):
                return proc
        return None

    wait_for(lambda: trainer() is not None, 600, "the trainer to start in the job")
    wait_for(lambda: (out / "metrics.jsonl").exists(), 600, "the first step")
    trainer().kill()
    state = wait_for_job(job_id, timeout_s=300)
    log = (out / "logs" / f"slurm-{job_id}.log").read_text()
    assert state == "FAILED", log[-3000:]
    assert "rl: error: trainer" in log, log[-3000:]
    wait_for(lambda: not run_processes(out), 60, "every process of the job to exit")
