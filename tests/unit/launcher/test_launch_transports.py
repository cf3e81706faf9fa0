"""The weight-transport seam as `rl` sees it: each transport's config class holds its launch
checks, derived settings, disk estimate and vLLM arguments (rlcore.config.base.TransportConfig), and
the launcher, inference and the orchestrator only call those methods."""

import pytest

from inference.config import InferenceConfig
from inference.vllm_args import owned_argv
from launcher.plan import make_plan
from launcher.prepare import disk_need
from launcher.rl_config import RLConfig
from rlcore.config.base import CollectiveTransferConfig, FilesystemTransferConfig
from rlcore.config.weight_transfer import Deployment
from rlcore.errors import ConfigError

COLLECTIVE = {"weight_transfer": {"type": "collective"}}


def plan_for(**sections):
    return make_plan(RLConfig.model_validate(sections), [], dry_run=False, submitting=False)


def test_collective_settings_are_derived_once_for_all_three_processes():
    plan = plan_for(**COLLECTIVE, inference={"replicas": 2})
    config = plan.config
    transfer = config.trainer.weight_transfer
    assert transfer.inference_workers == 2  # one worker per CPU server
    assert transfer.backend == "gloo" and transfer.port is not None
    assert config.orchestrator.weight_transfer == transfer == config.inference.weight_transfer


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"trainer": {"lora": {"rank": 8}}}, "sends whole models, not LoRA adapters"),
        (
            {"weight_transfer": {"type": "collective", "host": "127.0.0.1"}, "slurm": {"nodes": 2}},
            "weight_transfer.host = '127.0.0.1' with slurm.nodes = 2: inference on the other "
            "nodes cannot reach a loopback address",
        ),
    ],
)
def test_collective_refuses_what_it_cannot_carry(sections, message):
    with pytest.raises(ConfigError, match=message):
        plan_for(**{**COLLECTIVE, **sections})


def test_a_multi_node_job_is_checked_before_and_derived_inside_the_job():
    sections = {"slurm": {"nodes": 3, "trainer_nodes": 2, "gpus_per_node": 0}}
    transfer = plan_for(**COLLECTIVE, **sections).config.trainer.weight_transfer
    # submitting: the nodes are not known yet, so neither the address nor a port there
    assert (transfer.host, transfer.port, transfer.inference_workers) == (None, None, None)
    asked = []

    def on_trainer_node(port):
        asked.append(port)
        return 4321

    transfer.derive(
        Deployment(1, 1, False, 3, lora=False, trainer_host="node2", listen_port=on_trainer_node)
    )
    assert (transfer.host, transfer.port, transfer.backend) == ("node2", 4321, "gloo")
    assert asked == [None]  # the port was picked where trainer rank 0 listens


def test_a_port_in_use_on_the_trainer_node_is_refused_naming_both():
    transfer = CollectiveTransferConfig(port=5555)
    deployment = Deployment(
        1, 1, False, 3, lora=False, trainer_host="node2", listen_port=lambda port: None
    )
    with pytest.raises(ConfigError, match="weight_transfer.port = 5555 is in use on node2"):
        transfer.derive(deployment)
    kept = CollectiveTransferConfig(port=5555, host="10.0.0.2")
    kept.derive(
        Deployment(1, 1, False, 3, lora=False, trainer_host="node2", listen_port=lambda port: port)
    )
    assert (kept.host, kept.port) == ("10.0.0.2", 5555)  # the user's address is kept


def test_placing_a_collective_job_derives_the_trainer_nodes_address(monkeypatch):
    from launcher import slurm

    monkeypatch.setattr(slurm, "job_hosts", lambda: ["n1", "n2", "n3"])
    monkeypatch.setattr(slurm, "check_shared", lambda root, hosts: None)
    monkeypatch.setattr(slurm, "listen_port_on", lambda host: lambda port: 2345)
    monkeypatch.setattr(slurm, "port_free_on", lambda hosts: 8000)  # probed on the nodes
    sections = {"slurm": {"nodes": 3, "trainer_nodes": 2, "gpus_per_node": 0}}
    plan = plan_for(**COLLECTIVE, **sections)
    slurm.place_in_job(plan)
    config = plan.config
    transfer = config.trainer.weight_transfer
    assert (transfer.host, transfer.port, transfer.inference_workers) == ("n2", 2345, 1)
    assert config.orchestrator.weight_transfer == transfer == config.inference.weight_transfer


def test_the_filesystem_transport_derives_nothing_and_refuses_nothing():
    deployment = Deployment(4, 2, True, 3, lora=True)
    transfer = FilesystemTransferConfig()
    transfer.check_launch(deployment)
    transfer.derive(deployment)
    assert transfer == FilesystemTransferConfig()
    assert plan_for(trainer={"lora": {"rank": 8}}).config.inference.weight_transfer == transfer


def test_gpu_deployments_derive_nccl_and_every_worker():
    transfer = CollectiveTransferConfig(port=1234)
    transfer.derive(Deployment(2, 4, True, 1, lora=False))
    assert (transfer.backend, transfer.inference_workers, transfer.port) == ("nccl", 8, 1234)


def test_the_disk_check_counts_the_transports_policy_folders(tiny_model_dir):
    """A filesystem transport at async level 2 keeps 4 policy folders live, each about the size
    of the model's own folder (its safetensors in float32 and its side files); collective
    keeps none."""

    def sections() -> dict:
        model = {"name": str(tiny_model_dir), "dtype": "float32"}
        return {"trainer": {"model": model}, "inference": {"model": dict(model)}, "async_level": 2}

    filesystem, collective = plan_for(**sections()), plan_for(**COLLECTIVE, **sections())
    assert filesystem.config.trainer.weight_transfer.num_policy_folders(2) == 4
    assert collective.config.trainer.weight_transfer.num_policy_folders(2) == 0
    folder = sum(f.stat().st_size for f in tiny_model_dir.iterdir() if f.is_file())
    extra = disk_need(filesystem) - disk_need(collective)
    assert abs(extra - 4 * folder) < 4 * 64 * 1024  # the safetensors headers aside


def test_inference_adds_what_the_transport_asks_of_vllm():
    for on_cpu, backend in ((True, "gloo"), (False, "nccl")):
        plain = owned_argv(InferenceConfig(), "/m", on_cpu=on_cpu)
        assert "--weight-transfer-config" not in plain
        config = InferenceConfig(weight_transfer={"type": "collective"})
        argv = owned_argv(config, "/m", on_cpu=on_cpu)
        assert argv[len(plain) :] == ["--weight-transfer-config", f'{{"backend": "{backend}"}}']
