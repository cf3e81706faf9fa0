"""The keys the processes share, declared once here (SHARED_KEYS; their schemas are
rlcore.config.base's SharedFields): the top-level `rl` keys for them, filling silent sub-configs,
the agreement checks (before and after validation) and `rl --help`; which components carry a key is
read off their schemas."""

from typing import Any, Optional

from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo

from inference.config import InferenceConfig
from orchestrator.config import OrchestratorConfig
from rlcore.config.base import NONE_STRINGS, BaseConfig, LogConfig, ModelConfig, SharedFields
from rlcore.config.schema import model_members
from trainer.config import TrainerConfig

COMPONENT_CONFIGS: dict[str, type[BaseConfig]] = {
    "trainer": TrainerConfig,
    "orchestrator": OrchestratorConfig,
    "inference": InferenceConfig,
}
COMPONENTS = tuple(COMPONENT_CONFIGS)

SHARED_KEYS: tuple[tuple[str, ...], ...] = (
    ("model", "name"),
    ("max_steps",),
    ("seq_len",),
    ("output_dir",),
    ("async_level",),
    ("seed",),
    ("deterministic",),
    ("ckpt",),
    ("wandb",),
    ("log", "level"),
    ("weight_transfer",),
)
"""The keys the processes share, declared once: set at the top level of `rl` (or in one
sub-config) they fill every process that carries them; two places with different values are an
error naming both. Their schemas are SharedFields' fields (and ModelConfig's, LogConfig's)."""

LOOSE_KEYS: tuple[tuple[str, ...], ...] = (("wandb", "name"),)
"""Shared leaves the processes may set differently (prime-rl names each process's W&B run);
a top-level value fills only the processes that are silent."""

_NESTED_SCHEMAS: dict[str, type[BaseConfig]] = {"model": ModelConfig, "log": LogConfig}
"""Where a shared key inside a table (`model.name`, `log.level`) is declared."""


def _override(field: FieldInfo, dotted: str) -> tuple[Any, Any]:
    doc = " ".join((field.description or "").split())
    text = f"Shared `{dotted}`: {doc} Set here, it fills every process that carries it; None "
    return Optional[field.rebuild_annotation()], Field(None, description=text + "leaves theirs.")  # noqa: UP045


def shared_overrides() -> type[BaseConfig]:
    """The top-level `rl` keys for SHARED_KEYS, each optional (None: the processes' own
    values stand), typed and documented from where the key is declared."""
    fields: dict[str, Any] = {}
    for path in SHARED_KEYS:
        if len(path) == 1:
            fields[path[0]] = _override(SharedFields.model_fields[path[0]], path[0])
            continue
        table, key = path
        nested_fields: dict[str, Any] = {
            key: _override(_NESTED_SCHEMAS[table].model_fields[key], ".".join(path))
        }
        nested = create_model(f"Shared{table.title()}Config", __base__=BaseConfig, **nested_fields)
        fields[table] = (nested, Field(default_factory=nested, description=f"Shared `{table}.*`."))
    return create_model("SharedOverrides", __base__=BaseConfig, **fields)


def carriers(path: tuple[str, ...]) -> list[str]:
    """The components whose config has the key at `path`."""
    return [name for name, cls in COMPONENT_CONFIGS.items() if _has_field(cls, path)]


def shared_help() -> str:
    """One line per shared key for `rl --help`: its flag and the components it fills."""
    lines = []
    for path in SHARED_KEYS:
        flag = (
            "--"
            + ".".join(path).replace("_", "-")
            + (".*" if len(path) == 1 and _is_table(path) else "")
        )
        lines.append(f"  {flag:<24}{', '.join(carriers(path))}")
    return "\n".join(lines)


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


def _has_field(model: type[BaseModel], path: tuple[str, ...]) -> bool:
    """Whether `path` names a field of `model`; through a union (e.g. the weight transports),
    a field of any of its members."""
    field = model.model_fields.get(path[0])
    if field is None:
        return False
    members = model_members(field.annotation)
    if len(path) == 1 or not members:
        return len(path) == 1 or field.annotation is Any
    return any(_has_field(member, path[1:]) for member in members)


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
    classes = COMPONENT_CONFIGS
    for path in _shared_leaves(data):
        dotted = ".".join(path)
        targets = [name for name, cls in classes.items() if _has_field(cls, path)]
        if not targets:
            raise ValueError(f"`{dotted}` is not a key of any component config")
        found = {
            k: v for k, v in _explicit_values(data, path).items() if k in (*targets, "top level")
        }
        if len({str(v) for v in found.values()}) > 1 and path not in LOOSE_KEYS:
            places = ", ".join(
                f"`{dotted}` = {v!r} (top level)" if k == "top level" else f"`{k}.{dotted}` = {v!r}"
                for k, v in found.items()
            )
            raise ValueError(
                f"disagreeing values: {places}: set it in one place, or make them equal"
            )
        if not found:
            continue
        value = found.get("top level", next(iter(found.values())))
        for name in targets:
            sub = data.setdefault(name, {})
            if isinstance(sub, dict) and _get(sub, path) is _MISSING:
                _set(sub, path, value)
    for path in SHARED_KEYS:  # now held by the components that use them
        _pop(data, path)
    return data


def _pop(data: dict, path: tuple[str, ...]) -> None:
    parent = _get(data, path[:-1]) if len(path) > 1 else data
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def check_agreement(config: Any) -> None:
    """After validation: every component carrying a shared key has the same value."""
    for path in SHARED_KEYS:
        values = {name: _loose(_attr(getattr(config, name), path), path) for name in carriers(path)}
        shown = {name: _plain(v) for name, v in values.items()}
        if len({repr(v) for v in shown.values()}) > 1:
            dotted = ".".join(path)
            places = ", ".join(f"{k}.{dotted} = {v!r}" for k, v in shown.items())
            flag = "--" + dotted.replace("_", "-")
            raise ValueError(
                f"{places} disagree: set `{dotted}` once at the top level ({flag}) or make them "
                "equal"
            )


def _loose(value: Any, path: tuple[str, ...]) -> Any:
    """`value` without the leaves under `path` that may differ (LOOSE_KEYS)."""
    loose = [p[len(path) :] for p in LOOSE_KEYS if p[: len(path)] == path and len(p) > len(path)]
    if not loose or not isinstance(value, BaseModel):
        return value
    return value.model_copy(update={p[0]: None for p in loose if len(p) == 1})


def _attr(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = getattr(obj, key)
    return obj


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else str(value)


def _is_table(path: tuple[str, ...]) -> bool:
    field = TrainerConfig.model_fields.get(path[0]) or InferenceConfig.model_fields.get(path[0])
    return bool(field and model_members(field.annotation))
