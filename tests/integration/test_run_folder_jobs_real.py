"""`rl stop` and `rl status` against a real one-node SLURM (tests/integration/slurm_nodes.py): the
comment `rl` submits a job with is what squeue reports back (`%k`), a job id passed after `--`
is cancelled by scancel, and a job whose comment names another run is left running. Slow tier:
the cluster needs root, network namespaces and slurm-wlm (installed when missing)."""

import json

import pytest

from launcher import slurm
from launcher.commands import run_command
from rlcore.processes.poll import wait_until
from rlcore.runs.ownership import read_run_id
from rlcore.runs.rundir import RunDir
from tests.integration.slurm_nodes import MultiNodeCluster, serving

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = MultiNodeCluster(tmp_path_factory.mktemp("slurm_node"), num_nodes=1)
    reason = nodes.start()
    if reason is not None:
        pytest.skip(f"a real SLURM node cannot start here ({reason})")
    with serving(nodes):
        yield nodes


def sleeper(cluster, comment: str, workdir) -> str:
    done = cluster.client(
        [
            "sbatch",
            "--parsable",
            f"--comment={comment}",
            f"--chdir={workdir}",
            "--output=/dev/null",
            "--wrap",
            "sleep 600",
        ]
    )
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    wait_until(
        lambda: slurm.job_state(job_id) in ("RUNNING", "PENDING"), 60, 0.5, f"job {job_id} to start"
    )
    return job_id


def test_rl_stop_cancels_only_the_job_slurm_says_is_the_runs(cluster, tmp_path, capsys):
    run = RunDir(tmp_path / "run")
    run.claim()
    ours = sleeper(cluster, slurm.job_comment(run.root, read_run_id(run.root)), tmp_path)
    stranger = sleeper(cluster, "rl-run:0123456789abcdef:/elsewhere", tmp_path)
    job = slurm.query_job(ours)
    assert job is not None and job.comment == slurm.job_comment(run.root, read_run_id(run.root))
    assert slurm.prove_job(job, run.root) is None

    run.run_json.write_text(json.dumps({"status": "submitted", "slurm_job_id": stranger}))
    assert run_command("stop", [str(run.root)]) == 0
    assert f"SLURM job {stranger} is not this run's job" in capsys.readouterr().out
    assert slurm.job_state(stranger) in slurm.ACTIVE_STATES

    run.run_json.write_text(json.dumps({"status": "submitted", "slurm_job_id": ours}))
    assert run_command("stop", [str(run.root)]) == 0
    assert f"cancelled SLURM job {ours}" in capsys.readouterr().out
    wait_until(
        lambda: slurm.job_state(ours) not in slurm.ACTIVE_STATES,
        60,
        0.5,
        f"scancel -- {ours} to cancel the job",
    )
    assert slurm.job_state(stranger) in slurm.ACTIVE_STATES
    cluster.client(["scancel", "--", stranger])


def test_after_double_dash_an_option_is_no_job_id_to_scancel(cluster, tmp_path):
    """`scancel -- --me` cancels nothing (`--me` is taken as a job id, and refused), where
    `scancel --me` cancels every job of the user; rl never passes such an id anyway."""
    job = sleeper(cluster, "someone's", tmp_path)
    done = cluster.client(["scancel", "--", "--me"])
    assert done.returncode != 0, done
    assert slurm.job_state(job) in slurm.ACTIVE_STATES
    assert cluster.client(["scancel", "--", job]).returncode == 0
    with pytest.raises(AssertionError):
        slurm.cancel("--me")
