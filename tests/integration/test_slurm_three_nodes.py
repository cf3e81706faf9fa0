"""`rl` on a real SLURM cluster of three nodes on one machine (tests/integration/slurm_nodes.py:
one slurmd per network namespace, each node its own hostname and address): the tiny-model job
with one inference node and a trainer over two nodes, for each weight transport. 3 steps; a
resume to step 5 from the latest checkpoint; the trainer on one node killed mid-run and brought
back by `--max-restarts`; `rl status` and `rl logs` on the job, and `rl stop` cancelling one
(scancel). Where the cluster cannot start (no root, no namespaces, no SLURM), the test is
skipped saying why: test_two_nodes.py runs the same job under the stand-in scheduler."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.helpers import REPO, free_port, tiny_rl_toml, wait_for
from tests.integration.slurm_nodes import MultiNodeCluster, serving, wait_for_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("slurm_nodes")
    nodes = MultiNodeCluster(state, num_nodes=3, private_names={"node2": ["trainer-only"]})
    started = time.monotonic()
    reason = nodes.start()
    if reason is not None:
        pytest.skip(
            f"the real 3-node SLURM cluster cannot start here ({reason}); "
            "test_two_nodes.py runs this job under the stand-in scheduler instead"
        )
    print(f"real SLURM cluster of {nodes.nodes} idle in {time.monotonic() - started:.1f} s")
    with serving(nodes):
        yield nodes
    assert not nodes.leftovers(), f"left behind: {nodes.leftovers()}"
    assert all(daemon.poll() is not None for daemon in nodes.daemons)


def rl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "launcher.rl", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


def submit(config: Path, out: Path, *flags: str) -> str:
    done = rl("@", str(config), *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = json.loads((out / "run.json").read_text())["slurm_job_id"]
    assert f"submitted SLURM job {job_id}" in done.stdout, done.stdout
    assert f"rl logs {out} -f" in done.stdout, done.stdout
    return job_id


def job_log(out: Path, job_id: str) -> str:
    log = out / "logs" / f"slurm-{job_id}.log"
    return log.read_text()[-4000:] if log.exists() else "(no job log)"


def trainer_steps(out: Path) -> list[int]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if r["component"] == "trainer"]


def run_processes(out: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if str(out) in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def trainer_on(cluster: MultiNodeCluster, node: str) -> psutil.Process | None:
    """The trainer's worker process running on `node` (inside that node's namespace)."""
    pids = subprocess.run(
        ["ip", "netns", "pids", cluster.namespaces[node]], capture_output=True, text=True
    ).stdout.split()
    for pid in pids:
        try:
            proc = psutil.Process(int(pid))
            cmdline = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "trainer.main" in cmdline and "torchrun" not in cmdline and "srun" not in cmdline:
            if not any("trainer.main" in " ".join(c.cmdline()) for c in proc.children()):
                return proc
    return None


def run_job(config: Path, out: Path, *flags: str) -> tuple[str, float]:
    """Submit `rl @ config` and wait for its job to complete: (job id, seconds)."""
    started = time.monotonic()
    job_id = submit(config, out, *flags)
    state = wait_for_job(job_id)
    assert state == "COMPLETED", f"job {job_id} {state}:\n{job_log(out, job_id)}"
    return job_id, time.monotonic() - started


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("transport", ["filesystem", "collective"])
def test_three_real_nodes(cluster, tiny_model_dir, tmp_path, transport):
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(
        tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=3)
        + f'[weight_transfer]\ntype = "{transport}"\n'
        + '[slurm]\nnodes = 3\ntrainer_nodes = 2\ngpus_per_node = 0\ntime = "00:40:00"\n'
    )
    times = {}

    # 3 steps: inference on node1, the trainer over node2 and node3
    job_id, times["3 steps"] = run_job(config, out)
    trainer_log = (out / "logs" / "trainer.log").read_text()
    assert "world size 2 on cpu, 2 node(s)" in trainer_log, trainer_log[-3000:]
    assert trainer_steps(out) == [1, 2, 3], job_log(out, job_id)
    orchestrator_toml = (out / "configs" / "orchestrator.toml").read_text()
    assert "http://node1:" in orchestrator_toml, orchestrator_toml
    if transport == "collective":
        assert 'host = "node2"' in orchestrator_toml, orchestrator_toml
        assert "over gloo at node2:" in trainer_log, trainer_log[-3000:]
    status = rl("status", str(out))
    assert f"slurm job:    {job_id} (COMPLETED)" in status.stdout, status.stdout
    logs = rl("logs", str(out), "trainer")
    assert logs.returncode == 0 and "world size 2" in logs.stdout, logs.stdout[-2000:]

    # resume from the latest checkpoint to step 5
    job_id, times["resume to 5"] = run_job(
        config, out, "--ckpt.resume-step", "-1", "--max-steps", "5"
    )
    assert trainer_steps(out)[-2:] == [4, 5], job_log(out, job_id)

    # the trainer on node3 killed mid-run; --max-restarts brings the run back
    started = time.monotonic()
    flags = ("--ckpt.resume-step", "-1", "--max-steps", "8", "--max-restarts", "1")
    job_id = submit(config, out, *flags)
    wait_for(lambda: trainer_steps(out)[-1] >= 6, 1200, "step 6 in the restart job")
    victim = trainer_on(cluster, "node3")
    assert victim is not None, job_log(out, job_id)
    victim.kill()
    state = wait_for_job(job_id)
    times["kill at 6, restart, to 8"] = time.monotonic() - started
    log = job_log(out, job_id)
    assert state == "COMPLETED", log
    assert "rl: restarting" in log, log
    assert trainer_steps(out)[-1] == 8, log

    # rl stop cancels a running job (scancel); nothing of the run is left
    job_id = submit(config, out, "--ckpt.resume-step", "-1", "--max-steps", "50")
    wait_for(lambda: trainer_steps(out)[-1] >= 9, 1200, "step 9 in the job to stop")
    stopped = rl("stop", str(out))
    assert stopped.returncode == 0 and f"cancelled SLURM job {job_id}" in stopped.stdout, (
        stopped.stdout + stopped.stderr
    )
    assert wait_for_job(job_id, 300) == "CANCELLED"
    assert json.loads((out / "run.json").read_text())["status"] == "stopped"
    wait_for(lambda: not run_processes(out), 120, "every process of the job to exit")
    print(f"{transport}: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()))


@pytest.mark.timeout(1200)
def test_a_node_that_cannot_reach_the_group_is_named_with_the_fix(
    cluster, tiny_model_dir, tmp_path
):
    """weight_transfer.host set to a name only the trainer's node resolves (the cluster's
    `private_names`; a name missing from the other nodes' DNS): inference on node1
    cannot resolve it, and the job fails at the first swap naming node1, the address and the
    fix, well before the group's timeout (no traceback in the job's summary, no hang)."""
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(
        tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=3)
        + '[weight_transfer]\ntype = "collective"\nhost = "trainer-only"\n'
        + "min_timeout_s = 600\n"
        + '[slurm]\nnodes = 3\ntrainer_nodes = 2\ngpus_per_node = 0\ntime = "00:20:00"\n'
    )
    started = time.monotonic()
    job_id = submit(config, out)
    state = wait_for_job(job_id, timeout_s=900)
    log = job_log(out, job_id)
    assert state == "FAILED", log
    orchestrator_log = (out / "logs" / "orchestrator.log").read_text()
    for words in (
        "node node1 cannot resolve weight_transfer.host 'trainer-only'",
        "--weight-transfer.host",
    ):
        assert words in orchestrator_log, orchestrator_log[-3000:]
    assert "rl: error: orchestrator" in log, log
    assert time.monotonic() - started < 600  # the group's timeout (600 s) was not waited out
    wait_for(lambda: not run_processes(out), 120, "every process of the job to exit")
