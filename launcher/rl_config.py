"""The composed `rl` config: trainer, orchestrator and inference plus the keys they share."""

import copy
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from inference.config import InferenceConfig
from orchestrator.config import OrchestratorConfig
from rlcore.config import NONE_STRINGS, BaseConfig
from trainer.config import TrainerConfig

COMPONENTS = ("trainer", "orchestrator", "inference")

# Top-level keys that fill the sub-configs where those are silent (docs/architecture.md).
SHARED_KEYS = (
    ("model", "name"),
    ("max_steps",),
    ("seq_len",),
    ("output_dir",),
    ("async_level",),
    ("seed",),
    ("ckpt",),
    ("wandb",),
    ("log", "level"),
)


class SharedModelConfig(BaseConfig):
    name: str | None = None
    """Model for all three processes; None leaves each sub-config's own `model.name`."""


class SharedLogConfig(BaseConfig):
    level: str | None = None
    """Log level for all three processes; None leaves each sub-config's own."""


def _get(d: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return _MISSING
        d = d[key]
    return d


def _set(d: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        d = d.setdefault(key, {})
    d[path[-1]] = value


_MISSING = object()


def _has_field(model: type[BaseConfig], path: tuple[str, ...]) -> bool:
    for key in path:
        field = model.model_fields.get(key)
        if field is None:
            return False
        model = field.annotation if isinstance(field.annotation, type) else BaseConfig
    return True


def _leaves(value: Any, prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        out = []
        for key, sub in value.items():
            out += _leaves(sub, (*prefix, key))
        return out
    return [(prefix, value)]


def _shared_leaves(data: dict) -> list[tuple[str, ...]]:
    """Every shared leaf path set at the top level or in any sub-config."""
    paths: dict[tuple[str, ...], None] = {}
    for source in [data] + [data.get(name) for name in COMPONENTS]:
        if not isinstance(source, dict):
            continue
        for shared in SHARED_KEYS:
            value = _get(source, shared)
            if value is not _MISSING and not (source is data and _is_none(value)):
                paths.update(dict.fromkeys(path for path, _ in _leaves(value, shared)))
    return list(paths)


def _is_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value in NONE_STRINGS)


def _explicit_values(data: dict, path: tuple[str, ...]) -> dict[str, Any]:
    found = {}
    top = _get(data, path)
    if top is not _MISSING and not _is_none(top):
        found["top level"] = top
    for name in COMPONENTS:
        sub = data.get(name)
        value = _get(sub, path) if isinstance(sub, dict) else _MISSING
        if value is not _MISSING:
            found[name] = value
    return found


def fill_shared(data: dict) -> dict:
    """Make shared keys agree: a value set once (top level or one sub-config) fills the
    sub-configs that are silent; two places that set different values are an error."""
    classes = {"trainer": TrainerConfig, "orchestrator": OrchestratorConfig}
    classes["inference"] = InferenceConfig
    for path in _shared_leaves(data):
        dotted = ".".join(path)
        targets = [name for name, cls in classes.items() if _has_field(cls, path)]
        if not targets:
            raise ValueError(f"`{dotted}` is not a key of any component config")
        found = {
            k: v for k, v in _explicit_values(data, path).items() if k in (*targets, "top level")
        }
        if len({str(v) for v in found.values()}) > 1:
            places = ", ".join(
                f"`{dotted}` = {v!r} (top level)" if k == "top level" else f"`{k}.{dotted}` = {v!r}"
                for k, v in found.items()
            )
            raise ValueError(
                f"disagreeing values: {places}: set it in one place, or make them equal"
            )
        if not found:
            continue
        value = next(iter(found.values()))
        for name in targets:
            sub = data.setdefault(name, {})
            if isinstance(sub, dict) and _get(sub, path) is _MISSING:
                _set(sub, path, value)
    return data


class RLConfig(BaseConfig):
    """Configuration of `rl`: the three processes, their GPUs and how they are supervised."""

    trainer: TrainerConfig = TrainerConfig()
    """The trainer process (`trainer @ train.toml` when run alone)."""

    orchestrator: OrchestratorConfig = OrchestratorConfig()
    """The orchestrator process (`orchestrator @ orch.toml` when run alone)."""

    inference: InferenceConfig = InferenceConfig()
    """The inference server (`inference @ infer.toml` when run alone)."""

    model: SharedModelConfig = SharedModelConfig()
    """Shared `model.name` for all three processes."""

    max_steps: Annotated[int, Field(gt=0)] | None = None
    """Shared `max_steps` for trainer and orchestrator; None leaves theirs."""

    seq_len: Annotated[int, Field(gt=0)] | None = None
    """Shared `seq_len` for trainer and orchestrator; None leaves theirs."""

    output_dir: Path | None = None
    """Shared run directory for all three processes; None leaves theirs (they must agree)."""

    async_level: Annotated[int, Field(ge=0)] | None = None
    """Shared `async_level` for trainer and orchestrator; None leaves theirs."""

    seed: int | None = None
    """Shared seed for all three processes; None leaves theirs."""

    ckpt: dict[str, Any] = {}
    """Shared `ckpt.*` keys (interval, keep, resume_step, enabled) for trainer and orchestrator."""

    wandb: dict[str, Any] = {}
    """Shared `wandb.*` keys (project, name, entity, offline, tags) for trainer and orchestrator."""

    log: SharedLogConfig = SharedLogConfig()
    """Shared `log.level` for all three processes."""

    inference_gpu_ids: list[int] | None = None
    """Physical GPU ids for inference; None means GPU 0 when GPUs exist, else CPU."""

    trainer_gpu_ids: list[int] | None = None
    """Physical GPU ids for the trainer; None means GPU 1 when two or more GPUs exist, else the
    inference GPUs' neighbour or CPU."""

    stall_timeout_s: Annotated[float, Field(gt=0)] = 3600.0
    """Report a component as stalled when its log is silent for this many seconds."""

    shutdown_grace_s: Annotated[float, Field(gt=0)] = 15.0
    """Seconds between SIGTERM and SIGKILL when stopping a component."""

    @model_validator(mode="before")
    @classmethod
    def auto_setup_shared(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = fill_shared(copy.deepcopy(data))
        return data

    @model_validator(mode="after")
    def validate_agreement(self) -> "RLConfig":
        t, o, i = self.trainer, self.orchestrator, self.inference
        pairs = [
            ("model.name", t.model.name, o.model.name, i.model.name),
            ("output_dir", t.output_dir, o.output_dir, i.output_dir),
        ]
        for key, *values in pairs:
            if len({str(v) for v in values}) > 1:
                raise ValueError(
                    f"trainer, orchestrator and inference disagree on `{key}` ({values}): set it "
                    f"once at the top level (--{key.replace('_', '-')}) or make them equal"
                )
        for key in ("max_steps", "seq_len", "async_level", "ckpt"):
            if getattr(t, key) != getattr(o, key):
                raise ValueError(
                    f"trainer.{key} ({getattr(t, key)}) and orchestrator.{key} "
                    f"({getattr(o, key)}) disagree: set it once at the top level "
                    f"(--{key.replace('_', '-')}) or make them equal"
                )
        return self

    @model_validator(mode="after")
    def validate_gpu_sets(self) -> "RLConfig":
        inf, trn = self.inference_gpu_ids, self.trainer_gpu_ids
        for flag, ids in (("--inference-gpu-ids", inf), ("--trainer-gpu-ids", trn)):
            if ids is not None and len(set(ids)) != len(ids):
                raise ValueError(f"{flag} {ids} lists a GPU twice")
            if ids is not None and any(i < 0 for i in ids):
                raise ValueError(f"{flag} {ids}: GPU ids are non-negative integers")
        if inf and trn and set(inf) & set(trn):
            raise ValueError(
                f"--inference-gpu-ids {inf} and --trainer-gpu-ids {trn} share GPU(s) "
                f"{sorted(set(inf) & set(trn))}: give each process its own GPUs"
            )
        if inf:
            par = self.inference.parallel
            dp = par.dp if par.dp is not None else max(1, len(inf) // par.tp)
            if dp * par.tp != len(inf):
                raise ValueError(
                    f"--inference-gpu-ids lists {len(inf)} GPU(s) but inference.parallel.dp × tp "
                    f"= {dp} × {par.tp} = {dp * par.tp}: make them equal (e.g. "
                    f"--inference.parallel.dp {max(1, len(inf) // par.tp)})"
                )
        return self
