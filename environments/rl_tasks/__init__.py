"""`rl-tasks`: agent tasks from a tasks.json (see rl_tasks.taskfile), each on its own MCP
server. Per rollout: connect to the task's server (a stdio server is started for the rollout
and always stopped), call its setup tool, show the model the server's other tools and how to
call them, run up to `max_turns` model turns (tool calls parsed from the model's text, tool
results fed back as user turns, which are not model tokens and so are masked out of the loss),
then call the evaluate tool: its answer (a number, or JSON with `reward`) is the reward.

A server that fails or hangs (`tool_timeout_s`) ends that rollout with an error: it is counted
and left out of training, and the run goes on.

    [[orchestrator.env]]
    id = "rl-tasks"
    args = { dataset = "data/tasks/NAME" }     # written by `rl tasks FILE.json --name NAME`
    # or  args = { tasks = "tasks.json" }

A workflow config (`rl init`, `rl --config x.yaml`) adds `parser`, `action_mappings` and
`rubric`: the model then also writes text calls `<tool>name(args)</tool>` (rl_tasks.actions),
and the reward is the rubric's weighted sum of task completion (the evaluate tool), tool
execution (the share of calls that ran without error) and format compliance, each logged.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    """`load_environment` and the rest come from rl_tasks.environment, imported on first use:
    `rl` checks tasks files through rl_tasks.taskfile before anything starts, without paying
    for verifiers and datasets (about 5 s and 0.15 GiB in the launcher's process)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("rl_tasks.environment"), name)
