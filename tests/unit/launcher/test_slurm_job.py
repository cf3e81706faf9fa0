"""The SLURM job script and the placement of components on a job's nodes. The scheduler is
the boundary: the job's node list is given here; tests/integration/test_slurm.py runs real jobs, and
tests/integration/test_slurm_script.py has bash parse the script."""

import pytest

from launcher import slurm
from launcher.prepare import build_plan as make_plan
from launcher.rl_config import RLConfig
from launcher.slurm_config import INSIDE_ENV, SlurmConfig

GPU_RUN = {
    "model": {"name": "Qwen/Qwen3-0.6B"},
    "output_dir": "outputs/slurm-test",
    "slurm": {"inference_nodes": 2, "trainer_nodes": 1, "partition": "gpu", "account": "rl"},
}


def test_dry_run_script_has_the_job_layout():
    plan = make_plan(RLConfig.model_validate(GPU_RUN), dry_run=True)
    script = slurm.job_script(plan, plan.run.config_file("rl"))
    for line in (
        "#SBATCH --nodes=3",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=rl",
        f"export {INSIDE_ENV}=1",
    ):
        assert line in script, script
    assert script.splitlines()[-1].endswith("configs/rl.toml")
    assert not plan.run.root.exists()  # a dry run writes nothing


def test_node_counts_must_add_up():
    with pytest.raises(ValueError, match="inference_nodes \\+ trainer_nodes = 1 \\+ 1"):
        SlurmConfig(nodes=3, inference_nodes=1)
    assert SlurmConfig(nodes=2).inference_nodes == 1


def test_components_are_placed_on_their_nodes(monkeypatch):
    monkeypatch.setattr(slurm, "job_hosts", lambda: ["n1", "n2", "n3", "n4"])
    monkeypatch.setattr(slurm, "port_free_on", lambda hosts: 8000)  # probed on the nodes
    monkeypatch.setattr(slurm, "check_shared", lambda root, hosts: None)
    config = RLConfig.model_validate({**GPU_RUN, "slurm": {"nodes": 4, "trainer_nodes": 2}})
    plan = make_plan(config, dry_run=True)
    slurm.place_in_job(plan)
    assert plan.config.orchestrator.client.base_url == ["http://n1:8000/v1", "http://n2:8001/v1"]
    assert plan.config.inference.parallel.dp == 8 and plan.config.trainer.nodes == 2
    inference_1 = plan.command("inference-1")
    assert inference_1[:5] == [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--ntasks-per-node=1",
        "--nodelist=n2",
    ]
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in inference_1
    trainer = plan.command("trainer")
    assert "--nodes=2" in trainer and "--nodelist=n3,n4" in trainer
    assert "MASTER_ADDR=n3" in trainer and trainer[-3:-1] == ["trainer.main", "@"]
    assert plan.command("orchestrator")[0] != "srun"  # beside the supervisor
    # each (re)start's attempt id reaches the nodes through srun's exported environment: a
    # value fixed in the wrapper at placement would be every later attempt's stale one
    assert not any(arg.startswith("RL_ATTEMPT_ID=") for arg in trainer)
    assert plan.admin_token  # servers bound beyond loopback share one admin token


def test_a_multi_node_trainer_joins_the_rendezvous(monkeypatch):
    from rlcore.errors import ConfigError
    from trainer.dist import multi_node_args

    for name in ("MASTER_ADDR", "NODE_RANK", "SLURM_NODEID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="trainer.nodes = 2 needs MASTER_ADDR"):
        multi_node_args(2)
    monkeypatch.setenv("MASTER_ADDR", "n3")
    monkeypatch.setenv("SLURM_NODEID", "1")
    assert multi_node_args(2) == [
        "--nnodes=2",
        "--node-rank=1",
        "--master-addr=n3",
        "--master-port=29517",
    ]
