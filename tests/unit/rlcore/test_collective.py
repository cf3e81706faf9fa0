"""The collective transport's config, launcher derivation and refusals, and its wire format
over a real gloo group (two ranks, threads of this process)."""

import threading

import pytest
import torch

from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from rlcore.config.base import CollectiveTransferConfig
from rlcore.contracts import collective
from rlcore.errors import ConfigError
from rlcore.processes.health import free_port
from trainer.config import TrainerConfig


def test_bucket_plan_keeps_order_and_bound():
    sizes = [4, 4, 10, 1, 1, 3]
    buckets = collective.plan_buckets(sizes, 8)
    assert [list(b) for b in buckets] == [[0, 1], [2], [3, 4, 5]]
    assert collective.plan_buckets([], 8) == []


def test_timeout_scales_with_model_size_with_a_floor():
    config = CollectiveTransferConfig()
    assert config.update_timeout_s(10**8) == 120.0
    assert config.update_timeout_s(10 * 10**9) == 600.0
    assert CollectiveTransferConfig(timeout_s=5).update_timeout_s(10**12) == 5


def test_timeout_grows_with_a_slow_measured_link(tmp_path):
    config = CollectiveTransferConfig()
    assert collective.read_link_speed(tmp_path) is None  # nothing sent yet: the size rule
    speed = collective.record_link_speed(tmp_path, 10**9, 100.0)  # 10 MB/s
    assert collective.read_link_speed(tmp_path) == speed == 10**7
    assert config.update_timeout_s(10**9, speed) == 1000.0  # 10 x the 100 s send
    assert config.update_timeout_s(10**9, 10**9) == 120.0  # a fast link: the size rule
    assert CollectiveTransferConfig(timeout_s=5).update_timeout_s(10**9, speed) == 5
    (tmp_path / "state" / collective.LINK_FILE).write_text('["torn"')
    assert collective.read_link_speed(tmp_path) is None
    (tmp_path / "state" / collective.LINK_FILE).write_text("[1, 2]")
    assert collective.read_link_speed(tmp_path) is None


def test_filesystem_keys_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="weight_transfer.dir belongs to the filesystem"):
        TrainerConfig.model_validate({"weight_transfer": {"type": "collective", "dir": "/x"}})


def rl_config(**extra) -> RLConfig:
    return RLConfig.model_validate({"weight_transfer": {"type": "collective"}, **extra})


@pytest.mark.parametrize(
    ("gpus", "backend"), [([], "gloo"), ([0, 1, 2], "nccl")], ids=["no GPU", "three GPUs"]
)
def test_rl_fills_port_workers_and_backend_everywhere(monkeypatch, gpus, backend):
    """The machine is fixed here (the GPUs `rl` finds), so the expected backend is known
    before the plan is made: gloo with no GPU, nccl when inference gets GPUs. Two servers,
    each one worker (a CPU server; a GPU server with tp 1 x dp 1)."""
    monkeypatch.setattr("launcher.prepare.detect_gpus", lambda: list(gpus))
    plan = build_plan(rl_config(inference={"replicas": 2}), dry_run=True)
    config = plan.config
    transfer = config.trainer.weight_transfer
    assert transfer.port is not None
    assert transfer.backend == backend
    assert transfer.inference_workers == 2
    assert config.orchestrator.weight_transfer == transfer == config.inference.weight_transfer


@pytest.mark.parametrize(
    ("gpu_map", "backend", "workers"),
    [
        ({"orchestrator": [], "trainer": []}, "gloo", 2),  # CPU: one worker per server
        (
            {"orchestrator": [], "trainer": [0], "inference": [1, 2], "inference-1": [3, 4]},
            "nccl",
            4,
        ),  # GPUs: tp 1 x dp 2 per server, two servers
    ],
    ids=["cpu", "gpus"],
)
def test_auto_backend_follows_where_inference_runs(gpu_map, backend, workers):
    from launcher.plan import derive_transport

    config = rl_config(inference={"replicas": 2, "parallel": {"dp": 2}})
    derive_transport(config, gpu_map, "127.0.0.1")
    transfer = config.trainer.weight_transfer
    assert (transfer.backend, transfer.inference_workers) == (backend, workers)
    assert config.inference.weight_transfer == transfer


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"trainer": {"lora": {"rank": 8}}}, "trainer.lora"),
        (
            {"slurm": {"nodes": 2}, "weight_transfer": {"type": "collective", "host": "localhost"}},
            "inference on the other nodes cannot reach a loopback address",
        ),
    ],
)
def test_rl_refuses_what_collective_cannot_do(extra, words):
    with pytest.raises(ConfigError, match=words):
        build_plan(rl_config(**extra), dry_run=True)


def test_buckets_cross_a_real_gloo_group():
    """Rank 0 packs tensors into buckets as the trainer does; rank 1 unpacks them as the
    inference engine does, from update_info alone."""
    tensors = {
        "a": torch.randn(3, 5),
        "b": torch.arange(7, dtype=torch.int64),
        "c": torch.randn(40).to(torch.bfloat16),
    }
    info = {
        "names": list(tensors),
        "dtype_names": [str(t.dtype).removeprefix("torch.") for t in tensors.values()],
        "shapes": [list(t.shape) for t in tensors.values()],
    }
    port, got = free_port("127.0.0.1"), {}

    def rank(r: int) -> None:
        _, group = collective.gloo_group("127.0.0.1", port, r, 2, "g", 30)
        sizes = collective.update_sizes(info)
        for bucket in collective.update_buckets(info, 64):
            names = [info["names"][i] for i in bucket]
            if r == 0:
                flat = [tensors[n].contiguous().view(-1).view(torch.uint8) for n in names]
                collective.broadcast(group, torch.cat(flat))
                continue
            buffer = torch.empty(sum(sizes[i] for i in bucket), dtype=torch.uint8)
            collective.broadcast(group, buffer)
            for i, part in zip(bucket, buffer.split([sizes[i] for i in bucket]), strict=True):
                dtype = getattr(torch, info["dtype_names"][i])
                got[info["names"][i]] = part.view(dtype).view(info["shapes"][i]).clone()

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert set(got) == set(tensors)
    for name, tensor in tensors.items():
        assert torch.equal(got[name], tensor)


def test_request_and_done_signals(tmp_path):
    collective.write_offer(tmp_path, 3, {"id": "g1"}, {"names": []})
    assert collective.read_offer(tmp_path)["step"] == 3
    assert collective.read_request(tmp_path, "g1") is None
    collective.write_request(tmp_path, 3, "g1")
    assert collective.read_request(tmp_path, "g1") == 3
    assert collective.read_request(tmp_path, "other-start") is None  # a new trainer's group


def test_an_unreachable_group_address_names_the_node_the_address_and_the_fix():
    import socket

    with pytest.raises(
        ConnectionError, match="cannot resolve weight_transfer.host 'no-such.invalid'"
    ):
        collective.reach_group("no-such.invalid", 1234, timeout_s=5)
    port = free_port("127.0.0.1")  # nothing listens there
    with pytest.raises(ConnectionError) as refused:
        collective.reach_group("127.0.0.1", port, timeout_s=0.3)
    message = str(refused.value)
    assert f"node {socket.gethostname()} cannot reach" in message
    assert f"127.0.0.1:{port} within 0.3 s" in message and "--weight-transfer.host" in message
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        collective.reach_group("127.0.0.1", listening.getsockname()[1], timeout_s=5)
