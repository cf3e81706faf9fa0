"""Process topology: one CPU process, or one rank per visible GPU (torchrun).

`maybe_reexec_under_torchrun` runs before torch is imported: with more than one GPU listed in
CUDA_VISIBLE_DEVICES the entrypoint replaces itself with `torchrun --nproc-per-node N`, which
starts one copy of `trainer.main` per GPU with the same argv.
"""

import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("trainer")


def visible_gpu_ids() -> list[str]:
    """GPU ids listed in CUDA_VISIBLE_DEVICES (empty when unset, blank or -1)."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    ids = [x.strip() for x in raw.split(",") if x.strip()]
    return [] if ids in ([], ["-1"]) else ids


def maybe_reexec_under_torchrun(
    argv: list[str], nodes: int = 1, module: str = "trainer.main"
) -> None:
    """Exec torchrun running `module` with one rank per listed GPU when several are listed, or
    across `nodes` nodes (rendezvous at MASTER_ADDR:MASTER_PORT); else return."""
    num_gpus = len(visible_gpu_ids())
    if (num_gpus <= 1 and nodes == 1) or "LOCAL_RANK" in os.environ:
        return
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    if nodes == 1:
        cmd.append("--standalone")
    else:
        cmd += multi_node_args(nodes)
    cmd += [f"--nproc-per-node={max(num_gpus, 1)}", "-m", module, *argv]
    logger.info(f"{num_gpus} GPUs listed on each of {nodes} node(s), re-executing under torchrun")
    os.execv(sys.executable, cmd)


def multi_node_args(nodes: int) -> list[str]:
    from rlcore.errors import ConfigError

    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT", "29517")
    rank = os.environ.get("NODE_RANK", os.environ.get("SLURM_NODEID"))
    if not addr or rank is None:
        raise ConfigError(
            f"trainer.nodes = {nodes} needs MASTER_ADDR (the first trainer node) and NODE_RANK "
            "(or SLURM_NODEID) in the environment: run it under `rl` with [slurm], or set them"
        )
    return [
        f"--nnodes={nodes}",
        f"--node-rank={rank}",
        f"--master-addr={addr}",
        f"--master-port={port}",
    ]


@dataclass
class World:
    """This process's place in the job."""

    rank: int
    world_size: int
    device: Any  # torch.device
    distributed: bool
    """Whether a process group exists (GPU runs; CPU runs are one plain process)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def all_reduce_sum(self, value: Any) -> Any:
        """Sum a tensor across ranks (in place) and return it."""
        if self.distributed:
            import torch.distributed as dist

            dist.all_reduce(value)
        return value

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's `value` on every rank."""
        if not self.distributed:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def setup_world() -> World:
    """Join torchrun's process group, or make a one-rank group on a single GPU, or run plain
    on CPU."""
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        if "LOCAL_RANK" in os.environ:  # torchrun on CPU (tests of the sharded path): gloo
            dist.init_process_group("gloo")
            rank, world_size = dist.get_rank(), dist.get_world_size()
            return World(rank, world_size, device=torch.device("cpu"), distributed=True)
        return World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)
    if "LOCAL_RANK" in os.environ:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    else:
        # One GPU: a world of one without ports, so FSDP2 and DCP run the same code path. The
        # device makes NCCL build its communicator now, not at the first collective, where
        # a full GPU made it fail with an error of its own.
        torch.cuda.set_device(0)
        store, device = dist.HashStore(), torch.device("cuda", 0)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=device)
    rank = dist.get_rank()
    device = torch.device("cuda", torch.cuda.current_device())
    return World(rank=rank, world_size=dist.get_world_size(), device=device, distributed=True)


def teardown_world(world: World) -> None:
    if world.distributed:
        import torch.distributed as dist

        dist.destroy_process_group()
