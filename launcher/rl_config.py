"""The composed `rl` config: trainer, orchestrator and inference plus the keys they share
(launcher/shared.py). Top-level shared values are moved into the components that carry them
before validation, so the resolved config holds each value where it is used."""

import copy
import re
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from inference.config import InferenceConfig
from launcher.hosted import from_hosted
from launcher.shared import COMPONENTS, check_agreement, fill_shared, shared_overrides
from launcher.slurm_config import SlurmConfig
from orchestrator.config import OrchestratorConfig
from rlcore.config.base import BaseConfig
from rlcore.config.schema import rename_deep
from trainer.config import TrainerConfig

__all__ = ["COMPONENTS", "RLConfig"]

PROVIDERS = ("local", "slurm")
MAX_GPUS = 1024
"""No run here spans more GPUs (128 nodes of 8): `--gpus` and GPU ids beyond it are typos, and
a count lists its ids one by one."""


def gpu_count(gpus: str) -> int:
    """`8` or `8xH100` -> 8."""
    return int(gpus.split("x", 1)[0])


def gpu_type(gpus: str) -> str | None:
    """`8xH100` -> `H100`; None for a bare count."""
    return gpus.split("x", 1)[1] if "x" in gpus else None


class CostConfig(BaseConfig):
    """What the run's GPUs cost, for the estimate `rl` prints before it starts."""

    gpu_hour_usd: Annotated[float, Field(gt=0, le=10_000)] | None = None
    """Price of one GPU for one hour in US dollars (e.g. 2.5): the estimate then prices the
    run's GPU-hours; None prices nothing. Read by `rl` only."""


SharedOverrides: Any = shared_overrides()  # built from SHARED_KEYS: no static type to check
"""The top-level shared keys (`max_steps`, `model.name`, ...), from their one declaration."""


class RLConfig(SharedOverrides):
    """Configuration of `rl`: the three processes, their GPUs and how they are supervised."""

    trainer: TrainerConfig = TrainerConfig()
    """The trainer process (`trainer @ train.toml` when run alone)."""

    orchestrator: OrchestratorConfig = OrchestratorConfig()
    """The orchestrator process (`orchestrator @ orch.toml` when run alone)."""

    inference: InferenceConfig = InferenceConfig()
    """The inference server (`inference @ infer.toml` when run alone)."""

    inference_gpu_ids: list[int] | None = None
    """Physical GPU ids for inference; None means GPU 0 when GPUs exist, else CPU."""

    trainer_gpu_ids: list[int] | None = None
    """Physical GPU ids for the trainer; None means GPU 1 when two or more GPUs exist, else the
    inference GPUs' neighbour or CPU."""

    stall_timeout_s: Annotated[float, Field(gt=0)] | None = None
    """Stop the run when a component that waits on no other and uses no CPU makes no progress
    for this many seconds (at least 10): the trainer or orchestrator writes no metrics record,
    an inference server answers no /health or, while a peer waits on it, does no work. None
    follows the run's own pace: 5x the longest gap between a component's records (at least
    180 s; 900 s before its first). A component that works, or waits on one that works, is
    never stopped. A stopped process, or components waiting on each other, is named within a
    minute either way; stacks go to the logs first."""

    max_restarts: Annotated[int, Field(ge=0, le=100)] = 0
    """After a component fails, stop the run and restart all components from the latest
    complete checkpoint (like --ckpt.resume-step -1) up to this many times; a second failure
    with no new checkpoint in between stops for good. At most 100: more is a crash loop."""

    shutdown_grace_s: Annotated[float, Field(gt=0, le=3600)] = 15.0
    """Seconds between SIGTERM and SIGKILL when stopping a component (at most an hour: a
    longer wait is a hang)."""

    gpus: str | None = None
    """GPUs for the run, `N` or `NxTYPE` (e.g. `4xH100`): a quarter of them (at least one) go
    to the trainer, the rest to inference (2: 1+1, 4: 3+1, 8: 6+2); the count (at most 1024)
    and type are checked against the GPUs found. None: --inference-gpu-ids / --trainer-gpu-ids,
    or the defaults."""

    provider: str = "local"
    """Where the run goes: `local` (this machine) or `slurm` (an sbatch job with the [slurm]
    settings; one node with `gpus` GPUs when [slurm] is not given)."""

    cost: CostConfig = CostConfig()
    """Prices for the pre-launch estimate (`--cost.gpu-hour-usd 2.5`)."""

    slurm: SlurmConfig | None = None
    """Run as a SLURM job: `rl` writes and submits an sbatch script (`--dry-run` prints it), and
    inside the job starts each component with `srun` on its nodes; None runs here."""

    @model_validator(mode="before")
    @classmethod
    def auto_setup_shared(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = from_hosted(copy.deepcopy(data))
            data = fill_shared(rename_deep(cls, data))
        return data

    @field_validator("gpus")
    @classmethod
    def validate_gpus(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[1-9]\d*(x[A-Za-z0-9_-]+)?", value):
            raise ValueError("expected N or NxTYPE, e.g. `--gpus 4` or `--gpus 8xH100`")
        if value is not None and (len(value.split("x")[0]) > 5 or gpu_count(value) > MAX_GPUS):
            raise ValueError(f"{value}: at most {MAX_GPUS} GPUs (a larger count is a typo)")
        return value

    @model_validator(mode="after")
    def auto_setup_gpus(self) -> "RLConfig":
        if self.provider not in PROVIDERS:
            raise ValueError(
                f"provider = {self.provider!r} is not supported: use one of {', '.join(PROVIDERS)} "
                "(`slurm` submits through the [slurm] settings)"
            )
        if self.gpus is None:
            if self.provider == "slurm" and self.slurm is None:
                self.slurm = SlurmConfig(nodes=1)
            return self
        if self.inference_gpu_ids is not None or self.trainer_gpu_ids is not None:
            raise ValueError(
                "--gpus and --inference-gpu-ids / --trainer-gpu-ids both choose GPUs: give one"
            )
        count = gpu_count(self.gpus)
        if count < 2:
            raise ValueError(f"--gpus {self.gpus}: inference and trainer need a GPU each (2+)")
        trainer = max(1, count // 4)
        self.inference_gpu_ids = list(range(count - trainer))
        self.trainer_gpu_ids = list(range(count - trainer, count))
        if self.provider == "slurm" and self.slurm is None:
            self.slurm = SlurmConfig(nodes=1, gpus_per_node=count)
        return self

    @model_validator(mode="after")
    def validate_agreement(self) -> "RLConfig":
        check_agreement(self)
        return self

    @model_validator(mode="after")
    def validate_gpu_sets(self) -> "RLConfig":
        inf, trn = self.inference_gpu_ids, self.trainer_gpu_ids
        for flag, ids in (("--inference-gpu-ids", inf), ("--trainer-gpu-ids", trn)):
            if ids is not None and len(set(ids)) != len(ids):
                raise ValueError(f"{flag} {ids} lists a GPU twice")
            if ids is not None and any(i < 0 for i in ids):
                raise ValueError(f"{flag} {ids}: GPU ids are non-negative integers")
            if ids is not None and any(i >= MAX_GPUS for i in ids):
                raise ValueError(f"{flag}: GPU ids are below {MAX_GPUS} (a larger id is a typo)")
        if inf == [] and trn:
            raise ValueError(
                f"--inference-gpu-ids is empty while --trainer-gpu-ids {trn} uses GPUs: "
                "inference would run on the CPU; give it GPUs of its own (e.g. "
                "--inference-gpu-ids 0) or leave the flag out"
            )
        if inf and trn and set(inf) & set(trn):
            raise ValueError(
                f"--inference-gpu-ids {inf} and --trainer-gpu-ids {trn} share GPU(s) "
                f"{sorted(set(inf) & set(trn))}: give each process its own GPUs"
            )
        if inf:
            par, replicas = self.inference.parallel, self.inference.replicas
            dp = par.dp if par.dp is not None else max(1, len(inf) // (par.tp * replicas))
            if dp * par.tp * replicas != len(inf):
                fit = max(1, len(inf) // (par.tp * replicas))
                raise ValueError(
                    f"--inference-gpu-ids lists {len(inf)} GPU(s) but inference.replicas × "
                    f"parallel.dp × tp = {replicas} × {dp} × {par.tp} = "
                    f"{replicas * dp * par.tp}: make them equal (e.g. --inference.parallel.dp "
                    f"{fit}, or list {replicas * dp * par.tp} GPUs)"
                )
        return self
