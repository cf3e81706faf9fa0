"""The `[slurm]` table and whether this process runs inside the job it describes: the part of
SLURM that the config, the plan and the subcommands need (the job script, its submission and
the placement of components on the job's nodes are launcher/slurm.py)."""

import os
import re
import unicodedata
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from rlcore.config.base import BaseConfig

MAX_NODES = 1024
"""More nodes than any job of this launcher spans; a larger count is a typo."""
NodeCount = Annotated[int, Field(gt=0, le=MAX_NODES)]

INSIDE_ENV = "RL_SLURM_JOB"
"""Set by the job script: `rl` runs the supervisor here instead of submitting again."""

TIME_LIMIT = re.compile(r"(\d{1,9})(?::(\d{1,2}))?(?::(\d{1,2}))?")
DAYS_TIME_LIMIT = re.compile(r"(\d{1,3})-(\d{1,2})(?::(\d{1,2}))?(?::(\d{1,2}))?")
NO_TIME_LIMIT = ("UNLIMITED", "INFINITE")
MAX_TIME_DAYS = 365
"""A longer job is a typo (SLURM itself stops at a few thousand years); UNLIMITED asks for none."""
TIME_FORMS = (
    f"use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (hours below 24 after D-, "
    f"minutes and seconds below 60), at most {MAX_TIME_DAYS} days, e.g. '24:00:00' or "
    f"'2-00:00:00'; or UNLIMITED"
)
OWN_OPTIONS = {
    "--nodes": "nodes",
    "-N": "nodes",
    "--time": "time",
    "-t": "time",
    "--partition": "partition",
    "-p": "partition",
    "--account": "account",
    "-A": "account",
    "--job-name": "job_name",
    "-J": "job_name",
    "--gpus-per-node": "gpus_per_node",
    "--output": None,
    "-o": None,
    "--ntasks-per-node": None,
}
"""sbatch options the built-in script writes itself, and the field that sets each (None:
fixed: the job's output goes to `<run>/logs/slurm-<id>.log`, one task per node)."""


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
    """SLURM partition (queue) to run in (`--partition`); None: the cluster's default."""

    account: str | None = None
    """Account the job is charged to (`--account`); None: your default account."""

    time: str = "24:00:00"
    """Wall-clock limit (`--time`): minutes, HH:MM:SS or D-HH:MM:SS; SLURM stops the job
    then (resume it with `--ckpt.resume-step -1`)."""

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

    @field_validator("time")
    @classmethod
    def validate_time(cls, value: str) -> str:
        if value not in NO_TIME_LIMIT:
            time_limit_minutes(value)
        return value

    @field_validator("partition", "account", "job_name")
    @classmethod
    def validate_one_word(cls, value: str | None, info) -> str | None:
        if value is not None and (
            not value or any(c.isspace() for c in value) or control_character(value)
        ):
            raise ValueError(
                f"slurm.{info.field_name} = {value!r} must be one word without spaces or "
                f"line breaks (it becomes `#SBATCH --{info.field_name.replace('_', '-')}=...`)"
            )
        return value

    @field_validator("sbatch_lines")
    @classmethod
    def validate_sbatch_lines(cls, lines: list[str]) -> list[str]:
        for i, line in enumerate(lines):
            option = line.strip().split("=")[0].split()[0] if line.strip() else ""
            if not option.startswith("-") or control_character(line):
                raise ValueError(
                    f"slurm.sbatch_lines[{i}] = {line!r} is not one sbatch option: write it as "
                    "on sbatch's command line, e.g. '--qos=high' (one option per entry)"
                )
            if option in OWN_OPTIONS:
                field = OWN_OPTIONS[option]
                fix = f"set slurm.{field} instead" if field else "rl sets it itself; drop it"
                raise ValueError(
                    f"slurm.sbatch_lines[{i}] = {line!r}: the job script already writes "
                    f"{option}: {fix}"
                )
        return lines

    @field_validator("setup")
    @classmethod
    def validate_setup(cls, lines: list[str]) -> list[str]:
        for i, line in enumerate(lines):
            char = control_character(line)
            if char:
                raise ValueError(
                    f"slurm.setup[{i}] = {line!r} holds a line break or other control "
                    f"character ({char}): write one shell line per entry"
                )
        return lines

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
        if self.nodes <= 1:
            return self
        if self.inference_nodes is None:
            self.inference_nodes = self.nodes - self.trainer_nodes
        if self.inference_nodes + self.trainer_nodes != self.nodes:
            raise ValueError(
                f"slurm.nodes = {self.nodes} but inference_nodes + trainer_nodes = "
                f"{self.inference_nodes} + {self.trainer_nodes}: make them add up"
            )
        if self.inference_nodes < 1:
            raise ValueError(
                f"slurm.nodes = {self.nodes} leaves no node for inference after "
                f"trainer_nodes = {self.trainer_nodes}: add nodes or lower trainer_nodes"
            )
        return self


def time_limit_minutes(value: str) -> float:
    """The minutes a `--time` limit stands for (not UNLIMITED); a ValueError naming
    `slurm.time`, the value and the forms, for anything else or more than MAX_TIME_DAYS."""
    days, hours, minutes, seconds = 0, 0, 0, 0
    if match := TIME_LIMIT.fullmatch(value):  # minutes, MM:SS or HH:MM:SS
        parts = [int(g) for g in match.groups() if g]
        if len(parts) == 3:
            hours, minutes, seconds = parts
        else:
            minutes, seconds = (*parts, 0)[:2]
        fields_ok = all(part < 60 for part in parts[1:])
    elif match := DAYS_TIME_LIMIT.fullmatch(value):
        days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
        fields_ok = hours < 24 and minutes < 60 and seconds < 60
    else:
        fields_ok = False
    total = days * 1440 + hours * 60 + minutes + seconds / 60
    if not fields_ok or total > MAX_TIME_DAYS * 1440:
        raise ValueError(f"slurm.time = {value!r} is not a SLURM time limit: {TIME_FORMS}")
    return total


def control_character(text: str) -> str | None:
    """The first line break or other control character in `text` (as Python writes it, e.g.
    '\\n'), or None: none may reach a generated script, where it would start a new line."""
    for char in text:
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return repr(char)[1:-1]
    return None


def inside_job() -> bool:
    return os.environ.get(INSIDE_ENV) == "1" and "SLURM_JOB_ID" in os.environ
