"""The `[slurm]` table and whether this process runs inside the job it describes: the part of
SLURM that the config, the plan and the subcommands need (the job script, its submission and
the placement of components on the job's nodes are launcher/slurm.py)."""

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from rlcore.config import BaseConfig

MAX_NODES = 1024
"""More nodes than any job of this launcher spans; a larger count is a typo."""
NodeCount = Annotated[int, Field(gt=0, le=MAX_NODES)]

INSIDE_ENV = "RL_SLURM_JOB"
"""Set by the job script: `rl` runs the supervisor here instead of submitting again."""


class SlurmConfig(BaseConfig):
    """Run as a SLURM job (`sbatch`): the table's presence turns it on."""

    nodes: NodeCount | None = None
    """Nodes in the job (at most 1024, as each count here); None means inference_nodes +
    trainer_nodes. One node runs everything there (GPUs split as without SLURM)."""

    inference_nodes: NodeCount | None = None
    """Nodes with one inference server each; None means nodes - trainer_nodes."""

    trainer_nodes: NodeCount = 1
    """Nodes the trainer spans (torchrun across nodes, FSDP2 over all their GPUs)."""

    gpus_per_node: Annotated[int, Field(ge=0, le=64)] = 8
    """GPUs requested on each node (`--gpus-per-node`); 0 for CPU nodes; at most 64 (no node
    has more, and the job lists them one by one)."""

    partition: str | None = None
    account: str | None = None
    time: str = "24:00:00"
    """Wall-clock limit (`--time`)."""

    job_name: str | None = None
    """None uses the run directory's name."""

    sbatch_lines: list[str] = []
    """Extra `#SBATCH` options, e.g. `["--qos=high", "--mem=0"]`."""

    setup: list[str] = []
    """Shell lines run in the job before `rl` (e.g. `module load cuda`, `source
    .venv/bin/activate`)."""

    template: Path | None = None
    """Your own sbatch template instead of the built-in one; `{job_name}`, `{nodes}`,
    `{log}`, `{workdir}` and `{command}` are filled in."""

    @model_validator(mode="after")
    def check_nodes(self) -> "SlurmConfig":
        split = {"inference_nodes", "trainer_nodes"} & self.model_fields_set
        if self.nodes == 1 and split and (self.inference_nodes or 0) + self.trainer_nodes > 1:
            given = ", ".join(f"{k} = {getattr(self, k)}" for k in sorted(split))
            raise ValueError(
                f"slurm.nodes = 1 runs everything on one node, but {given} asks for more: "
                "drop them, or raise slurm.nodes to inference_nodes + trainer_nodes"
            )
        if self.nodes is None:
            self.nodes = (self.inference_nodes or 1) + self.trainer_nodes
        if self.nodes > 1 and self.inference_nodes is None:
            self.inference_nodes = self.nodes - self.trainer_nodes
        if self.nodes > 1 and self.inference_nodes + self.trainer_nodes != self.nodes:
            raise ValueError(
                f"slurm.nodes = {self.nodes} but inference_nodes + trainer_nodes = "
                f"{self.inference_nodes} + {self.trainer_nodes}: make them add up"
            )
        if self.nodes > 1 and self.inference_nodes < 1:
            raise ValueError(
                f"slurm.nodes = {self.nodes} leaves no node for inference after "
                f"trainer_nodes = {self.trainer_nodes}: add nodes or lower trainer_nodes"
            )
        return self


def inside_job() -> bool:
    return os.environ.get(INSIDE_ENV) == "1" and "SLURM_JOB_ID" in os.environ
