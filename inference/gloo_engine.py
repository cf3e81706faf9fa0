"""vLLM weight-transfer engine `gloo`: the collective transport's receiving side on CPU (and on
GPUs when `weight_transfer.backend = "gloo"`), shaped like vLLM's own `nccl` engine so that the
same worker methods (`init_weight_transfer_engine`, `start_weight_update`, `update_weights`,
`finish_weight_update`) carry either.

vLLM creates the engine inside each worker process (`Worker.load_model`, from
`--weight-transfer-config`), so the name must be registered there: `inference.vllm_plugin` is a
`vllm.general_plugins` entry point (pyproject.toml), which vLLM runs in every process it starts.

Consumes: buckets broadcast by trainer rank 0 (rlcore.contracts.collective's wire format), loaded
with vLLM's layerwise reload (`load_weights` per bucket, finalised once per update). Waits for: the
trainer, up to the group's timeout; a trainer that dies mid-update fails the receive at once.
"""

from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

from rlcore.contracts.collective import broadcast, gloo_group, update_buckets, update_sizes
from rlcore.processes import heap


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    """Where the group meets and this server's place in it
    (rlcore.contracts.collective.worker_init_info)."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    group_id: str
    timeout_s: float
    bucket_bytes: int


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    """The update's tensors, in the order they are sent (vLLM's nccl engine's fields)."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, config, vllm_config, device: torch.device, model: torch.nn.Module) -> None:
        super().__init__(config, vllm_config, device, model)
        self.store = None
        self.group = None
        self.bucket_bytes = 0
        self.tied: list[list[str]] = []

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        """Join the trainer's group (blocks until every rank joined, up to its timeout)."""
        self.shutdown()
        parallel = self.parallel_config
        worker_rank = parallel.data_parallel_index * parallel.world_size + parallel.rank
        self.bucket_bytes = init_info.bucket_bytes
        self.store, self.group = gloo_group(
            init_info.master_address,
            init_info.master_port,
            worker_rank + init_info.rank_offset,
            init_info.world_size,
            init_info.group_id,
            init_info.timeout_s,
        )

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        self.tied = tied_groups(self.model)
        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)
        retie(self.model, self.tied)
        heap.trim()  # the old prepacked weights' pages (inference/worker_extension.py)

    def update_weights(self, update_info: dict) -> None:
        self.receive_weights(self.parse_update_info(update_info))
        if self.device.type != "cpu":
            torch.accelerator.synchronize()

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        """One `load_weights` call over the whole update, as vLLM's own in-place reload does
        (tied parameters stay tied); its iterator receives one bucket at a time."""
        if self.group is None:
            raise RuntimeError("gloo weight transfer: init_weight_transfer_engine first")
        self.model.load_weights(self.received(asdict(update_info)))

    def received(self, info: dict) -> Iterator[tuple[str, torch.Tensor]]:
        """Each bucket broadcast into a buffer of its size, unpacked into named tensors."""
        sizes = update_sizes(info)
        for bucket in update_buckets(info, self.bucket_bytes):
            buffer = torch.empty(sum(sizes[i] for i in bucket), dtype=torch.uint8)
            broadcast(self.group, buffer)
            parts = buffer.split([sizes[i] for i in bucket])
            for i, part in zip(bucket, parts, strict=True):
                yield info["names"][i], self.unpack(part, info["dtype_names"][i], info["shapes"][i])
            del parts, buffer

    def unpack(self, part: torch.Tensor, dtype_name: str, shape: list[int]) -> torch.Tensor:
        return part.view(getattr(torch, dtype_name)).view(shape).to(self.device)

    def shutdown(self) -> None:
        self.group = None
        self.store = None


def tied_groups(model: torch.nn.Module) -> list[list[str]]:
    """Names of parameters that are one tensor (tied embeddings), first-registered first."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return [group for group in names.values() if len(group) > 1]


def retie(model: torch.nn.Module, groups: list[list[str]]) -> None:
    """vLLM's layerwise reload loads a tied tensor through its first owner only; the other
    owner (`lm_head` of a tied-embedding model) gets the new values in the shared tensor but is
    not processed again, so on CPU it kept computing with the old weights' prepacked copy.
    Process every other owner again."""
    for _, *others in groups:
        for name in others:
            owner = model.get_submodule(name.rpartition(".")[0])
            method = getattr(owner, "quant_method", None)
            if method is not None:
                method.process_weights_after_loading(owner)
