"""The stand-in for test_slurm_three_nodes.py where a real cluster of namespaces cannot start
(no root, no network namespaces): skipped, saying so, where it can. Two nodes on one machine:
`rl` with [slurm] nodes = 3 (one inference node, a trainer over two nodes) submits its job
script, and the test runs that very script as the job's first node would, with the job's hosts
being loopback addresses. Only the scheduler is a stand-in (tests/integration/fake_slurm:
`srun` runs the command once per listed host with SLURM_NODEID set, `scontrol` lists the
hosts, `sbatch` accepts the job); the trainer's two ranks meet through torchrun's rendezvous
at the first trainer node (gloo), inference is served from its own node on 0.0.0.0, and
everything meets in the run directory. 3 steps, then a resume to step 5 from the latest
checkpoint."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, free_port, tiny_rl_toml
from tests.integration.slurm_nodes import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAKE_SLURM = Path(__file__).parent / "fake_slurm"
HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]  # inference, trainer node 0, trainer node 1


def job_env() -> dict[str, str]:
    return os.environ | {
        "PATH": f"{FAKE_SLURM}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": ",".join(HOSTS),
        "OMP_NUM_THREADS": "1",
    }


def submit_and_run(config: Path, out: Path, *flags: str) -> str:
    """`rl @ config` (which writes and submits the job script), then the script itself; the
    job's log."""
    cmd = [sys.executable, "-m", "launcher.rl", "@", str(config), *flags]
    done = subprocess.run(cmd, cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "submitted SLURM job 4242" in done.stdout, done.stderr
    script = out / "slurm" / "job.sbatch"
    job = subprocess.run(
        ["bash", str(script)], cwd="/", env=job_env(), capture_output=True, text=True, timeout=900
    )
    log = job.stdout + job.stderr
    assert job.returncode == 0, log[-4000:]
    return log


def trainer_steps(out: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if r["component"] == "trainer"]


def test_three_nodes_train_and_resume(tiny_model_dir, tmp_path):
    reason = unavailable()
    if reason is None:
        pytest.skip(
            "a real 3-node SLURM cluster can start here: test_slurm_three_nodes.py runs "
            "this job on it; the stand-in scheduler runs only where it cannot"
        )
    print(f"stand-in scheduler (tests/integration/fake_slurm): {reason}")
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(
        tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=3)
        + "[slurm]\nnodes = 3\ntrainer_nodes = 2\ngpus_per_node = 0\n"
    )
    log = submit_and_run(config, out)
    trainer_log = (out / "logs" / "trainer.log").read_text()
    assert "world size 2 on cpu, 2 node(s)" in trainer_log, trainer_log[-3000:]
    assert [s for s, _ in trainer_steps(out)] == [1, 2, 3], log[-3000:]
    state = json.loads((out / "run.json").read_text())
    assert state["status"] == "finished"

    log = submit_and_run(config, out, "--ckpt.resume-step", "-1", "--max-steps", "5")
    assert [s for s, _ in trainer_steps(out)][-2:] == [4, 5], log[-3000:]
    assert "resum" in (out / "logs" / "trainer.log").read_text()
