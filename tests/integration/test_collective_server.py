"""The collective weight transport's receiving side: one real inference server on CPU (gloo)
with the tiny model; this test plays trainer (the real CollectiveSender over an HF model) and
orchestrator (the real CollectiveReceiver). After an update the server's logprobs equal
transformers' for the sent weights, the group survives across updates, and a sender that never
comes makes the update fail within the group's timeout and the server refuse later ones
(never a hang)."""

import asyncio
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from rlcore.config.base import CollectiveTransferConfig
from rlcore.contracts.protocol import UPDATE_WEIGHTS_ROUTE
from rlcore.runs.rundir import RunDir
from tests.inference_process import InferenceProcess
from tests.integration.helpers import (
    free_port,
)
from tests.integration.test_inference_server import (
    PROMPT_IDS,
    max_diff,
    perturbed_copy,
    prompt_logprobs,
)

# Slow: a server of its own; test_rl.py's default restart case runs the collective transport.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def hf_prompt_logprobs(model) -> list[float]:
    import torch

    ids = torch.tensor([PROMPT_IDS])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits.float(), dim=-1)[0]
    return [logprobs[i, tok].item() for i, tok in enumerate(PROMPT_IDS[1:])]


def load_hf(folder: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


def sender_for(model, run_dir: RunDir, port: int):
    from trainer.collective import CollectiveSender
    from trainer.dist import World

    config = CollectiveTransferConfig(port=port, bucket_mb=1, timeout_s=60)
    world = World(rank=0, world_size=1, device="cpu", distributed=False)
    return CollectiveSender(config, run_dir, model, world, request_timeout_s=120)


def update(server: InferenceProcess, sender, run_dir: RunDir, step: int):
    """Trainer publishes `step` in a thread; the orchestrator's receiver asks for it and POSTs."""
    from orchestrator.collective import CollectiveReceiver

    errors: list[BaseException] = []

    def publish() -> None:
        try:
            sender.publish(step)
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=publish)
    thread.start()
    receiver = CollectiveReceiver(run_dir)
    assert asyncio.run(receiver.wait(step, step, 60)) == step
    request = receiver.server_requests(receiver.load_request(step), 1)[0]
    answer = server.admin_post(UPDATE_WEIGHTS_ROUTE, request, timeout_s=120)
    thread.join(timeout=120)
    return answer, errors


@pytest.fixture(scope="module")
def collective_server(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("collective_run")
    RunDir(root).claim()
    config = root.parent / "infer.toml"
    config.write_text(
        f'output_dir = "{root}"\n[model]\nname = "{tiny_model_dir}"\ndtype = "float32"\n'
        'max_model_len = 512\n[cpu]\nkvcache_space_gib = 1\nmatmul_dtype = "model"\n'
        '[weight_transfer]\ntype = "collective"\n'
    )
    port = free_port()
    proc = InferenceProcess(["@", str(config), "--server.port", str(port)], root.parent / "inf.log")
    proc.start()
    try:
        proc.wait_ready(timeout_s=600)
        yield proc, RunDir(root)
    finally:
        proc.stop(grace_s=30)


def test_update_serves_the_sent_weights_and_group_persists(
    collective_server, tiny_model_dir, tmp_path
):
    server, run_dir = collective_server
    base = prompt_logprobs(server.url)
    perturbed = load_hf(perturbed_copy(tiny_model_dir, tmp_path / "p", scale=0.05, seed=1))
    sender = sender_for(perturbed, run_dir, free_port())
    (status, body), errors = update(server, sender, run_dir, 1)
    assert status == 200 and body["weights"] == "step_1" and not errors, (body, errors)
    served = prompt_logprobs(server.url)
    assert max_diff(base, served) > 1e-3
    assert max_diff(hf_prompt_logprobs(perturbed), served) < 1e-4
    assert not (run_dir.weights).exists()  # nothing written to weights/

    # the same group again, now with the base weights
    sender.model = load_hf(tiny_model_dir)
    (status, body), errors = update(server, sender, run_dir, 2)
    assert status == 200 and not errors, (body, errors)
    assert max_diff(base, prompt_logprobs(server.url)) < 1e-4


def test_sender_gone_mid_update_is_an_error_not_a_hang(collective_server, tiny_model_dir):
    """A new trainer (new group) that opened its group's port and then never joins or sends:
    the server reaches the port, its receive fails within the group's timeout, it answers an
    error and refuses every later update."""
    import torch.distributed as dist

    from orchestrator.collective import CollectiveReceiver
    from rlcore.contracts import collective

    server, run_dir = collective_server
    port = free_port()
    group = collective.new_group("127.0.0.1", port, "gloo", 1, 5.0, 2**20)
    # the trainer's half of the rendezvous, and then nothing
    store = dist.TCPStore(
        "127.0.0.1", port, 2, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
    )
    info = {"names": ["model.norm.weight"], "dtype_names": ["float32"], "shapes": [[64]]}
    collective.write_offer(run_dir.transfer, 3, group, info)
    receiver = CollectiveReceiver(run_dir)
    request = receiver.server_requests(receiver.load_request(3), 1)[0]
    status, body = server.admin_post(UPDATE_WEIGHTS_ROUTE, request, timeout_s=60)
    del store
    assert status in (500, 504), body
    assert "joining the trainer's group" in body["detail"] or "failed" in body["detail"], body
    status, body = server.admin_post(UPDATE_WEIGHTS_ROUTE, request, timeout_s=60)
    assert status == 503 and "restart inference" in body["detail"], body
