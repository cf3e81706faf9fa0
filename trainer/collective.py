"""The collective transport's sender (rlcore.contracts.collective): after each step, offer the
policy and send it when the orchestrator asks, straight from the trainer's parameters (cast to the
serving dtype) into the inference workers' memory; nothing is written to `weights/`.

Consumes: `transfer/request.json` (the orchestrator asks for the offered step) or
`transfer/done` (no more asks). Produces: `transfer/offer.json`, then one broadcast per bucket
from rank 0. Waits for: the ask, up to `data.wait_timeout_s` (the orchestrator asks at its next
batch boundary); the group and each update, up to the transport's timeout (both recorded for
`rl`, rlcore.runs.waits: the ask as a wait on the orchestrator, the send on every inference server).
Every rank takes part (FSDP gathers each tensor with `full_tensor()`), only rank 0 broadcasts.
"""

import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from rlcore.config.base import CollectiveTransferConfig
from rlcore.config.weight_transfer import LOOPBACK, WeightSender
from rlcore.contracts import collective
from rlcore.errors import ConfigError
from rlcore.processes.health import free_port
from rlcore.processes.poll import wait_until
from rlcore.runs import waits
from rlcore.runs.attempt import AttemptFilter
from rlcore.runs.rundir import RunDir
from trainer.dist import World
from trainer.lora import is_lora
from trainer.model import cast, drop_tied_copies
from trainer.model_type import TrainerModel

logger = logging.getLogger("trainer")
MIB = 1024 * 1024


def resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return backend


def policy_tensors(model: TrainerModel) -> dict[str, torch.Tensor]:
    """The tensors a policy update sends, by checkpoint name (tied copies left out); on FSDP
    still sharded (DTensors: their shapes are global)."""
    return drop_tied_copies(model, dict(model.state_dict()))


def describe(model: TrainerModel, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The update_info of every update: names, serving dtypes and full shapes, in send order."""
    dtype = getattr(model, "serving_dtype", None)
    dtypes = [
        dtype if dtype is not None and t.is_floating_point() else t.dtype for t in tensors.values()
    ]
    return {
        "names": list(tensors),
        "dtype_names": [str(d).removeprefix("torch.") for d in dtypes],
        "shapes": [list(t.shape) for t in tensors.values()],
    }


@dataclass
class CollectiveSender(WeightSender):
    config: CollectiveTransferConfig
    run_dir: RunDir
    model: TrainerModel
    world: World
    request_timeout_s: float
    group: dict[str, Any] = field(default_factory=dict)
    update_info: dict[str, Any] = field(default_factory=dict)
    link: Any = None
    """Rank 0's end of the group once made: (store, gloo group) or vLLM's NCCL communicator."""
    timings: dict[str, float] = field(default_factory=dict)
    num_bytes: int = 0
    """One policy's bytes on the wire."""
    attempts: AttemptFilter = field(default_factory=AttemptFilter)

    def __post_init__(self) -> None:
        if is_lora(self.model):
            raise ConfigError(
                "weight_transfer.type = 'collective' does not send LoRA adapters yet (trainer.lora "
                "is set): use weight_transfer.type = 'filesystem' or drop trainer.lora"
            )
        self.update_info = describe(self.model, policy_tensors(self.model))
        self.num_bytes = num_bytes = sum(collective.update_sizes(self.update_info))
        config = self.config
        group = None
        if self.world.is_main:
            shutil.rmtree(self.run_dir.transfer, ignore_errors=True)  # an earlier start's signals
            host = config.host or LOOPBACK
            speed = collective.read_link_speed(self.run_dir.root)  # an earlier attempt's sends
            group = collective.new_group(
                host,
                config.port or free_port(host),
                resolve_backend(config.backend),
                config.inference_workers or 1,
                config.update_timeout_s(num_bytes, speed),
                config.bucket_mb * MIB,
            )
            link = f", link {speed / 1e6:.0f} MB/s measured before" if speed else ""
            logger.info(
                f"collective weight transfer: {num_bytes / 1e9:.2f} GB per policy over "
                f"{group['backend']} at {group['host']}:{group['port']}, timeout "
                f"{group['timeout_s']:g} s{link}"
            )
        self.group = self.world.broadcast_object(group)

    def publish_initial(self, step: int) -> None:
        if step > 0:  # a fresh start's inference already serves the base model
            self.publish(step)

    def publish(self, step: int) -> None:
        start = time.perf_counter()
        if self.world.is_main:
            collective.write_offer(self.run_dir.transfer, step, self.group, self.update_info)
        with waits.waiting(f"a request for policy step {step}", "orchestrator"):
            asked = self.world.broadcast_object(self.wait_for_request(step))
        waited = time.perf_counter() - start
        if asked:
            with waits.waiting(f"inference to receive policy step {step}", "inference"):
                self.send()
        sent_s = time.perf_counter() - start - waited if asked else 0.0
        self.timings = {"transfer_wait_s": waited, "transfer_send_s": sent_s}

    def wait_for_request(self, step: int) -> bool:
        """True once the orchestrator asks for `step`; False when it will ask no more."""
        folder = self.run_dir.transfer

        def answered() -> tuple[bool] | None:
            # `done` before the request: see rlcore.contracts.collective
            done = collective.is_done(folder, self.group["id"], self.attempts)
            asked = collective.read_request(folder, self.group["id"])
            if asked is not None and asked >= step:
                return (True,)
            return (False,) if done else None

        try:
            (asked,) = wait_until(
                answered,
                self.request_timeout_s,
                collective.POLL_S,
                f"a request for policy step {step}",
            )
        except TimeoutError:
            raise RuntimeError(
                f"the orchestrator did not ask for policy step {step} within "
                f"{self.request_timeout_s:g} s (data.wait_timeout_s): is it running with "
                f"output_dir {self.run_dir.root}?"
            ) from None
        return asked

    def send(self) -> None:
        """Every rank gathers each tensor in turn; rank 0 broadcasts bucket by bucket and
        records the link's speed."""
        if self.world.is_main and self.link is None:
            self.link = join_group(self.group)
        started = time.perf_counter()
        self.broadcast_all()
        if self.world.is_main:
            self.check_link(time.perf_counter() - started)

    def check_link(self, seconds: float) -> None:
        """Keep the link speed of this send for the next attempt's timeout; warn when a send
        takes more than half of this group's."""
        speed = collective.record_link_speed(self.run_dir.root, self.num_bytes, seconds)
        if seconds > self.group["timeout_s"] / 2:
            logger.warning(
                f"sending the policy took {seconds:.0f} s ({speed / 1e6:.0f} MB/s), more than "
                f"half the group's timeout of {self.group['timeout_s']:g} s: a restart or resume "
                "uses a timeout fitted to this speed; set --weight-transfer.timeout-s to give "
                "this attempt more"
            )

    def broadcast_all(self) -> None:
        tensors = policy_tensors(self.model)
        info, dtype = self.update_info, getattr(self.model, "serving_dtype", None)
        pairs = ((n, cast(full(tensors[n]), dtype)) for n in info["names"])
        if self.group["backend"] == "nccl":
            send_nccl(self.link, pairs, self.group, self.world.is_main)
            return
        for bucket in collective.update_buckets(info, self.group["bucket_bytes"]):
            parts = [next(pairs)[1] for _ in bucket]
            if self.world.is_main:
                flat = [p.detach().cpu().contiguous().view(-1).view(torch.uint8) for p in parts]
                collective.broadcast(self.link[1], torch.cat(flat))

    def close(self) -> None:
        self.link = None

    def metrics(self) -> dict[str, float]:
        return self.timings


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor on this rank (an FSDP shard is gathered: a collective)."""
    gather = getattr(tensor, "full_tensor", None)
    return (gather() if callable(gather) else tensor).detach()


def join_group(group: dict[str, Any]):
    """Rank 0 of the group: blocks until every inference worker joined (they join when the
    orchestrator's first /update_weights reaches them), up to the group's timeout."""
    logger.info(
        f"waiting for {group['world_size'] - 1} inference worker(s) to join "
        f"{group['backend']} group {group['id']}"
    )
    if group["backend"] == "nccl":
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        rendezvous = {
            "master_address": group["host"],
            "master_port": group["port"],
            "world_size": group["world_size"],
        }
        return trainer_init(rendezvous)
    return collective.gloo_group(
        group["host"], group["port"], 0, group["world_size"], group["id"], group["timeout_s"]
    )


def send_nccl(link, pairs: Iterator, group: dict[str, Any], is_main: bool) -> None:
    """vLLM's packed NCCL producer, the counterpart of its `nccl` engine's consumer."""
    if not is_main:
        for _ in pairs:  # the other ranks only take part in the gathers
            pass
        return
    from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer

    packed_nccl_broadcast_producer(
        iterator=pairs,
        group=link,
        src=0,
        post_iter_func=lambda item: item[1],
        buffer_size_bytes=group["bucket_bytes"],
        num_buffers=2,
    )
    torch.cuda.current_stream().synchronize()
