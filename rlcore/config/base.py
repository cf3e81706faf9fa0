"""Config base class and the sub-configs that several processes share.

Imports pydantic and the standard library only: every entrypoint parses its config before
importing torch, vLLM or verifiers.
"""

import json
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from rlcore.config.weight_transfer import Deployment
from rlcore.errors import ConfigError
from rlcore.files.paths import resolve_field
from rlcore.host.models import DEFAULT_MODEL

NONE_STRINGS = ("None", "none", "null")
RUNS_ROOT = Path("outputs")
"""Where runs live by default; `rl list`, `rl status NAME` and `rl delete NAME` look here."""
DEFAULT_RUN_DIR = RUNS_ROOT / "run"
CPU_KVCACHE_SPACE_GIB = 4
"""inference's default `cpu.kvcache_space_gib`, which the estimates read where a config leaves it
out (`evals`' free-form `inference` table)."""
CPU_BLOCK_TOKENS = 128
"""vLLM's KV-cache block on CPU unless `vllm_args.block_size` says otherwise: a request holds
whole blocks, and the prefix cache shares only whole blocks."""
GPU_BLOCK_TOKENS = 16
"""The same on GPUs."""


def allows_none(annotation: Any) -> bool:
    """Whether a field annotation accepts None (Optional[...] or a union with None)."""
    if annotation is None or annotation is type(None):
        return True
    if get_origin(annotation) is Annotated:
        return allows_none(get_args(annotation)[0])
    return any(allows_none(arg) for arg in get_args(annotation) if arg is type(None))


MAX_INT = 2**31 - 1
"""No count, size or step in any config is larger: a bigger integer is a typo, refused
(rlcore.config.cli checks every value given, also inside free-form tables)."""


class BaseConfig(BaseModel):
    """Project base: unknown keys are errors, field docstrings are the documentation, floats
    are finite."""

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
        protected_namespaces=(),
        allow_inf_nan=False,
        defer_build=True,
    )

    renamed: ClassVar[dict[str, str]] = {}
    """Names other tools (prime-rl) use for keys of this config: old name -> ours. Accepted in
    files and flags with a note naming the current key (docs/config-aliases.md)."""

    @model_validator(mode="before")
    @classmethod
    def _none_strings_clear_optionals(cls, data: Any) -> Any:
        # TOML has no null: "None"/"null" clears an optional field, in files and on the CLI alike.
        if not isinstance(data, dict):
            return data
        out = apply_renames(cls, dict(data))
        for name, field in cls.model_fields.items():
            if out.get(name) in NONE_STRINGS and allows_none(field.annotation):
                out[name] = None
        return out


def apply_renames(cls: type[BaseModel], data: dict) -> dict:
    """`data` (a dict for `cls`) with `cls.renamed` keys under our names, noting each."""
    for old, new in getattr(cls, "renamed", {}).items():
        if old not in data:
            continue
        if new in data and data[new] != data[old]:
            raise ValueError(f"`{old}` and `{new}` are two names for one key: set only `{new}`")
        note_renamed(old, new)
        data[new] = data.pop(old)
    return data


def note_renamed(old: str, new: str) -> None:
    print(f"note: `{old}` is read as `{new}`, its name here", file=sys.stderr)


PositiveInt = Annotated[int, Field(gt=0)]
UserPath = Annotated[Path, BeforeValidator(resolve_field)]
"""A path a process writes through: absolute and resolved at parse time (rlcore.files.paths), so
every check sees the folder a write really reaches; an empty one is refused naming its key."""


class ModelConfig(BaseConfig):
    name: str = DEFAULT_MODEL
    """Model to load: a hub name, a local HF folder, or the bundled default
    `HuggingFaceTB/SmolLM2-135M-Instruct`, which works with no network."""

    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Dtype the model computes in; `auto` is the fastest that is exact enough on this machine
    (rlcore/host/machine.py): bf16 on a GPU and on a CPU with native bf16 (AVX512_BF16, AMX), fp32
    on other CPUs."""

    trust_remote_code: bool = False
    """Run model code shipped in the model's repository (transformers' and vLLM's
    trust_remote_code); only for models you trust."""


class CkptConfig(BaseConfig):
    renamed = {"keep_last": "keep"}

    interval: PositiveInt | None = None
    """Save a checkpoint every this many steps (and after the last step); None saves only at the
    end of the run."""

    keep: PositiveInt | None = None
    """Number of most recent complete checkpoints to keep; None keeps all."""

    resume_step: int | None = None
    """Resume from this completed step's checkpoint; -1 means the latest complete one, None
    starts fresh."""

    enabled: bool = True
    """Whether to write checkpoints at all."""

    background: bool = True
    """Trainer: copy the state to host memory while the next step's forward and backward run
    (its optimizer step waits for the copy) and write it in a background thread (DCP async
    save); the checkpoint counts only once complete. False writes it before the next step."""

    @model_validator(mode="after")
    def validate_resume_step(self) -> "CkptConfig":
        if self.resume_step is not None and self.resume_step < -1:
            raise ValueError(
                f"ckpt.resume_step = {self.resume_step} is not a step: use a completed step "
                "number, -1 for the latest checkpoint, or None to start fresh"
            )
        return self


class WandbConfig(BaseConfig):
    project: str | None = None
    """W&B project; None disables W&B logging."""

    name: str | None = None
    """W&B run name; None lets W&B choose one."""

    entity: str | None = None
    """W&B entity (user or team); None uses the account default."""

    offline: bool | None = None
    """Log offline; None means offline exactly when no WANDB_API_KEY is set."""

    tags: list[str] = []
    """Tags attached to the W&B run."""


class LogConfig(BaseConfig):
    level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest level of message written to the console and the log file."""


class TransportConfig(BaseConfig):
    """What a weight transport tells `rl` and the processes about itself (its sender, receiver
    and loader are registered in each role's `TRANSPORTS`, rlcore.config.weight_transfer). A
    transport overrides what differs; `rl` and the roles never ask which transport they have."""

    serves_older_policies: ClassVar[bool] = True
    """Whether inference can be told to serve a policy older than the one it serves (an eval
    serves the newest; a deterministic run with async_level > 0 then needs the older one)."""

    def check_launch(self, deployment: Deployment) -> None:
        """Refuse (ConfigError) a run this transport cannot carry: `rl`'s pre-flight, before
        anything starts (a dry run too)."""

    def derive(self, deployment: Deployment) -> None:
        """Fill the settings `rl` derives for this run (the same in all three processes)."""

    def num_policy_folders(self, async_level: int) -> int:
        """Policies on disk at once at most (`rl`'s disk estimate)."""
        return 0

    def vllm_argv(self, on_cpu: bool) -> list[str]:
        """What the inference server adds to vLLM's arguments for this transport."""
        return []

    def copies_in_background(self) -> bool:
        """Whether the trainer keeps a host copy of each policy while a thread writes it out
        (`rl`'s memory estimate)."""
        return False

    def weights_root(self) -> Path | None:
        """Where the trainer keeps the run's policy folders instead of `<output_dir>/weights`
        (it links them there); None: in the run folder, or none at all."""
        return None


class FilesystemTransferConfig(TransportConfig):
    """Each policy is an HF safetensors folder `weights/step_<n>/`, marked STABLE when complete;
    inference reloads its weights from that folder in place."""

    type: Literal["filesystem"] = "filesystem"
    """Weight transport: `filesystem` (policy folders on disk) or `collective` (broadcast from
    the trainer straight into the inference workers' memory)."""

    background: bool = True
    """Write each policy folder in a background thread: the trainer's step only gathers the
    weights and copies them to host memory, and the next step trains while the folder is
    written (one write in flight at most; STABLE only once complete). False writes in the
    foreground."""

    dir: UserPath | None = None
    """Keep the policy folders here instead of inside the run directory, e.g. `/dev/shm` (in
    memory: faster writes and loads, one machine only): the trainer makes `<output_dir>/weights`
    a link to `<dir>/rl-weights-<id>`; None keeps them in `<output_dir>/weights`."""

    def num_policy_folders(self, async_level: int) -> int:
        # the trainer keeps async_level + 1; one more while the newest is written
        return async_level + 2

    def copies_in_background(self) -> bool:
        return self.background

    def weights_root(self) -> Path | None:
        return self.dir


LINK_MARGIN = 10.0
"""A collective wait may take this many times a whole send at the measured link speed."""


class CollectiveTransferConfig(TransportConfig):
    """Each policy is broadcast from trainer rank 0 straight into the inference workers'
    memory over one torch.distributed group (trainer + every inference worker), made once
    per trainer start; nothing is written to `weights/`. The orchestrator asks for a policy,
    the trainer sends it, inference pauses generation around the receive."""

    type: Literal["collective"] = "collective"
    """Weight transport: `filesystem` (policy folders on disk) or `collective` (broadcast from
    the trainer straight into the inference workers' memory)."""

    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """Collective library: `gloo` (CPU tensors, works everywhere), `nccl` (GPU to GPU, vLLM's
    own engine); `auto` picks nccl when inference runs on GPUs, else gloo."""

    host: str | None = None
    """Address of the trainer's rank 0 that every inference worker connects to; None: `rl`
    derives it (127.0.0.1 on one machine, the first trainer node in a multi-node SLURM job),
    a trainer started alone takes 127.0.0.1."""

    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    """TCP port of the group's rendezvous on `host`; None: `rl` picks one free there (on the
    trainer's node; recorded in the run's configs), a trainer started alone picks its own."""

    inference_workers: Annotated[int, Field(gt=0, le=1024)] | None = None
    """Inference worker processes that receive, all servers together (tp × dp each); None:
    `rl` derives it, a trainer started alone takes 1. At most 1024 (`rl`'s GPU limit)."""

    bucket_mb: Annotated[int, Field(gt=0, le=65536)] = 64
    """Tensors travel packed in buckets of at most this many MiB (a larger tensor goes alone):
    each side holds one bucket at a time, never a second copy of the model (at most 64 GiB)."""

    timeout_s: Annotated[float, Field(gt=0)] | None = None
    """Seconds each collective wait may take (joining the group, one whole update); None:
    `timeout_s_per_gb` × the policy's size in GB, at least `min_timeout_s`, and at least 10x a
    send at the link speed measured by an earlier send of the run (a resumed or restarted
    attempt on a slow link gets the time it needs)."""

    timeout_s_per_gb: Annotated[float, Field(gt=0)] = 60.0
    """Seconds per GB of policy for the default `timeout_s`."""

    min_timeout_s: Annotated[float, Field(gt=0)] = 120.0
    """Floor of the default `timeout_s`, in seconds."""

    @model_validator(mode="before")
    @classmethod
    def validate_no_folder_keys(cls, data: Any) -> Any:
        for key in ("dir", "background") if isinstance(data, dict) else ():
            if key in data:
                raise ValueError(
                    f"weight_transfer.{key} belongs to the filesystem transport, but "
                    "weight_transfer.type = 'collective' writes no policy folders: drop "
                    f"weight_transfer.{key}, or use --weight-transfer.type filesystem"
                )
        return data

    def update_timeout_s(self, num_bytes: int, link_bytes_per_s: float | None = None) -> float:
        """The timeout of one collective wait for a policy of `num_bytes`: `timeout_s` when
        set; else the size rule, or LINK_MARGIN times the send time at the link speed an
        earlier send of this run measured (`link_bytes_per_s`) when that is longer."""
        if self.timeout_s is not None:
            return self.timeout_s
        by_size = max(self.min_timeout_s, self.timeout_s_per_gb * num_bytes / 1e9)
        if not link_bytes_per_s:
            return by_size
        return max(by_size, LINK_MARGIN * num_bytes / link_bytes_per_s)

    # Each policy is sent once, when the orchestrator asks for it: none is kept to go back to.
    serves_older_policies: ClassVar[bool] = False

    def check_launch(self, deployment: Deployment) -> None:
        if deployment.lora:
            raise ConfigError(
                "weight_transfer.type = 'collective' with trainer.lora: the collective transport "
                "sends whole models, not LoRA adapters yet; use --weight-transfer.type "
                "filesystem for LoRA runs, or drop trainer.lora"
            )
        if deployment.num_nodes > 1 and self.host in ("127.0.0.1", "localhost", "::1"):
            raise ConfigError(
                f"weight_transfer.host = {self.host!r} with slurm.nodes = "
                f"{deployment.num_nodes}: inference on the other nodes cannot reach a loopback "
                "address; leave weight_transfer.host unset (rl takes the first trainer node's "
                "address in the job) or set an address of that node every node reaches"
            )

    def derive(self, deployment: Deployment) -> None:
        """The group's size (every inference worker), its address (where trainer rank 0 runs),
        its port (checked free there, or a free one; kept in the run's configs) and the
        backend (`auto`: nccl when inference has GPUs). Nothing before the processes' nodes
        are known (`deployment.trainer_host` None: `rl` derives it again inside the job)."""
        if deployment.trainer_host is None:
            return
        if self.inference_workers is None:
            self.inference_workers = deployment.workers_per_server * deployment.num_servers
        if self.host is None:
            self.host = deployment.trainer_host
        port = deployment.listen_port(self.port)
        if port is None:
            raise ConfigError(
                f"weight_transfer.port = {self.port} is in use on {deployment.trainer_host} "
                "(where trainer rank 0 listens for the collective group): choose a free port, "
                "or leave weight_transfer.port unset and rl picks one free there"
            )
        self.port = port
        if self.backend == "auto":
            self.backend = "nccl" if deployment.inference_on_gpus else "gloo"

    def engine_backend(self, on_cpu: bool) -> str:
        """The weight-transfer engine vLLM's workers create: `auto` is nccl on GPUs, gloo on
        CPU (inference/gloo_engine.py)."""
        if self.backend == "auto":
            return "gloo" if on_cpu else "nccl"
        return self.backend

    def vllm_argv(self, on_cpu: bool) -> list[str]:
        return ["--weight-transfer-config", json.dumps({"backend": self.engine_backend(on_cpu)})]


# The transports, told apart by `type` (a table without it is the filesystem transport). A
# new one joins as `Annotated[OtherConfig, Tag("other")]` inside the Union.
WeightTransferConfig = Annotated[
    Union[  # noqa: UP007 - tagged members
        Annotated[FilesystemTransferConfig, Tag("filesystem")],
        Annotated[CollectiveTransferConfig, Tag("collective")],
    ],
    Discriminator(lambda v: (v.get("type") if isinstance(v, dict) else v.type) or "filesystem"),
]


class SharedFields(BaseConfig):
    """Fields that trainer and orchestrator both carry; the launcher keeps them in agreement."""

    max_steps: Annotated[int, Field(gt=0, le=10_000_000)] = 100
    """Number of optimizer steps (= training batches) in the run (at most ten million)."""

    seq_len: Annotated[int, Field(gt=0, le=1 << 20)] = 2048
    """Maximum tokens in one sample, prompt and completion together (at most 2^20: no model here
    reads more, and buffers are sized by it)."""

    output_dir: UserPath = DEFAULT_RUN_DIR
    """Run directory shared by all processes: configs, logs, rollouts, weights, checkpoints
    (a new or empty folder, or an earlier run's)."""

    async_level: Annotated[int, Field(ge=0, le=64)] = 1
    """How many steps the policy that generates a batch may lag behind the trainer; 0 is fully
    on-policy (synchronous). At most 64: each step of lag keeps a policy on disk or in flight."""

    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    """Seed for sampling, data order and initialisation (0 to 2^32 - 1)."""

    deterministic: bool = False
    """Make the run a pure function of its configs, `seed` and data (same machine, thread
    counts and versions): every rollout samples with its own seed derived from (seed, step,
    example, rollout), inference keeps a request's logits independent of what it is batched
    with, batch n is always generated by exactly policy n - async_level (checkpoints carry the
    batches made before them, so a resume continues the same run), and the trainer uses
    deterministic algorithms (docs/guides/reproducible.md); False: the default, reproducible
    only in distribution."""

    ckpt: CkptConfig = CkptConfig()
    """Checkpointing and resume."""

    wandb: WandbConfig = WandbConfig()
    """Weights & Biases logging (off unless `project` is set)."""

    log: LogConfig = LogConfig()
    """Console and log-file verbosity."""

    weight_transfer: WeightTransferConfig = FilesystemTransferConfig()
    """How new policies travel from the trainer to inference; all processes must agree."""
