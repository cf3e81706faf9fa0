"""Workflow configs, `rl --config configs/my-env.yaml`, as tool-use projects write them (and
`rl init` generates them): the job, the system prompt, how text tool calls are parsed and mapped
to the environment's MCP tools, and the rubric. `rl` turns one into the `rl-tasks` environment
on a tasks dataset (`--dataset`, else the lock file's primary dataset) with training settings
fit for it; every `rl` flag and `@` file still overrides them.

    job: {name: my-env, metadata: {environment: my-env:latest}}
    system_prompt: |
      ...
    few_shot: [{role: user, content: ...}, {role: assistant, content: <tool>...</tool>}, ...]
    parser: {use_thinking: false, xml_weight: 0.6, action_weight: 0.4}
    action_mappings: {...}          # rl_tasks.actions
    rubric: {weights: {task_completion: 0.8, tool_execution: 0.1, format_compliance: 0.1}}
    defaults: {max_turns: 4}
    rl: {max_steps: 12}             # optional: rl settings for this workflow
"""

import copy
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from launcher.lockfile import LOCK_FILE, dataset_dir, primary_dataset, read_yaml
from rlcore.config.base import BaseConfig
from rlcore.config.cli import deep_merge
from rlcore.errors import ConfigError
from rlcore.files.paths import user_path


class JobConfig(BaseConfig):
    name: str
    """The job's name: the run folder is outputs/<name>."""

    @field_validator("name")
    @classmethod
    def validate_name(cls, name: str) -> str:
        if not re.fullmatch(r"\w[\w.-]*", name):  # never "", "." or "..": a folder of its own
            raise ValueError(
                f"{name!r} is not a run folder name (the run goes to outputs/<name>): use "
                "letters, digits, `_`, `.` and `-`, starting with a letter, digit or `_`"
            )
        return name

    metadata: dict[str, Any] = {}
    """Free-form facts about the job; `environment` names what `rl init` read the tools from."""


class ParserConfig(BaseConfig):
    use_thinking: bool = False
    """Expect <think>...</think> before each <tool> call."""

    xml_weight: float = Field(default=0.6, ge=0)
    """Share of the format score for one well-formed <tool>...</tool> block per turn."""

    action_weight: float = Field(default=0.4, ge=0)
    """Share of the format score for an action that maps to a tool call."""


class RubricConfig(BaseConfig):
    weights: dict[str, float] = {
        "task_completion": 0.8,
        "tool_execution": 0.1,
        "format_compliance": 0.1,
    }
    """Weights of the reward's terms: task_completion (the task's evaluate tool),
    tool_execution (calls that ran without error), format_compliance (the parser's score)."""


class DefaultsConfig(BaseConfig):
    max_turns: int = Field(default=4, gt=0, le=100)
    """Model turns per rollout."""


class MessageConfig(BaseConfig):
    role: Literal["user", "assistant"]
    """Who says it: `user` (a task, or a tool's <tool_response>) or `assistant` (the model)."""

    content: str = Field(min_length=1)
    """What is said."""


class WorkflowConfig(BaseConfig):
    """A workflow config file (YAML)."""

    job: JobConfig
    """Who this is: the name and where the tools came from."""

    system_prompt: str | None = None
    """The system prompt (the tools and how to call them); None describes the server's tools."""

    few_shot: list[MessageConfig] = []
    """A solved example shown before each task (after the system prompt): alternating user and
    assistant turns, the assistant's written as the model should write them. Small models
    copy a demonstration far more reliably than they follow a description."""

    parser: ParserConfig = ParserConfig()
    """How text tool calls are recognised and scored."""

    action_mappings: dict[str, dict[str, Any]] = {}
    """Actions the model writes -> MCP tool calls (rl_tasks.actions)."""

    rubric: RubricConfig = RubricConfig()
    """The reward's terms and weights."""

    defaults: DefaultsConfig = DefaultsConfig()
    """Episode settings."""

    rl: dict[str, Any] = {}
    """`rl` settings for this workflow, any key of `rl --help` as a nested table (e.g.
    `{max_steps: 12, orchestrator: {sampling: {temperature: 0.7}}}`), over the workflow
    defaults; flags and `@` files still override them."""


TRAINING = {
    "max_steps": 10,
    "seq_len": 1024,
    "async_level": 1,
    "ckpt": {"interval": 5, "keep": 1},
    "trainer": {"optim": {"lr": 2e-5}},
    "inference": {"model": {"dtype": "float32"}, "cpu": {"kvcache_space_gib": 2}},
    "orchestrator": {
        "batch_size": 16,
        "rollouts_per_example": 4,
        "sampling": {"max_tokens": 96, "temperature": 0.7},
    },
}
"""Settings a workflow run starts from (measured on 2 CPU cores with the locker example: at
6e-5 one step could tip the small model into repeating a call)."""


def load_workflow(path: Path) -> WorkflowConfig:
    from rl_tasks.actions import Workflow

    data = read_yaml(path, "the workflow config")
    try:
        workflow = WorkflowConfig.model_validate(data)
        Workflow.from_args(
            workflow.parser.model_dump(), workflow.action_mappings, workflow.rubric.model_dump()
        )
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: `{key}`: {first['msg']}") from None
    except ValueError as err:
        raise ConfigError(f"{path}: {err}") from None
    return workflow


def resolve_dataset(dataset: str | None) -> Path:
    """The tasks dataset folder: `--dataset` (a name `rl hf` wrote, or a folder), else the lock
    file's primary dataset."""
    name = dataset or primary_dataset()
    if name is None:
        raise ConfigError(
            f"no tasks dataset: pass --dataset ORG/NAME, or write one with `rl hf tasks.json "
            f"--name ORG/NAME` (it becomes {LOCK_FILE}'s primary dataset)"
        )
    folder = user_path(dataset_dir(name), "--dataset" if dataset else f"{LOCK_FILE} dataset")
    if not folder.is_dir():
        raise ConfigError(
            f"dataset {name!r} is not here ({folder} does not exist): write it with `rl hf "
            f"tasks.json --name {name}` (the hub is not read at run time)"
        )
    return folder


def workflow_layer(config: Path | None, dataset: str | None) -> dict[str, Any]:
    """The `rl` settings a workflow config and/or a tasks dataset stand for."""
    folder = resolve_dataset(dataset)
    args: dict[str, Any] = {"dataset": str(folder)}
    name = folder.name
    if config is not None:
        workflow = load_workflow(config)
        name = workflow.job.name
        args |= {
            "max_turns": workflow.defaults.max_turns,
            "parser": workflow.parser.model_dump(),
            "action_mappings": workflow.action_mappings,
            "rubric": workflow.rubric.model_dump(),
        }
        if workflow.system_prompt:
            args["system_prompt"] = workflow.system_prompt
        if workflow.few_shot:
            args["few_shot"] = [m.model_dump() for m in workflow.few_shot]
    layer = deep_merge(copy.deepcopy(TRAINING), {"output_dir": f"outputs/{name}"})
    layer["orchestrator"]["env"] = [{"id": "rl-tasks", "args": args}]
    if config is not None:
        layer = deep_merge(layer, copy.deepcopy(workflow.rl))
    return layer
