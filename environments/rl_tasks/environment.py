"""The `rl-tasks` environment itself (see the package's docstring): the verifiers env, its
rubric and the helpers tests and `rl tasks` use. Imported on first use of any of them."""

import json
import re
from pathlib import Path
from typing import Any

import verifiers as vf
from datasets import Dataset, load_from_disk

from rl_tasks.actions import (
    TOOL_TAG,
    ActionError,
    Workflow,
    format_score,
    parse_call,
    to_mcp_call,
)
from rl_tasks.link import McpError, McpLink
from rl_tasks.taskfile import load_tasks, server_spec, setup_tools

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
CALL_SYNTAX = (
    'To use a tool, write <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>; its '
    "result comes back in <tool_response>...</tool_response>. When the task is done, answer "
    "without a tool call."
)


FEW_SHOT_ROLES = {"user": vf.UserMessage, "assistant": vf.AssistantMessage}


class TaskServerError(vf.Error):
    """The task's MCP server failed or hung."""


def task_rows(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dataset rows: the prompt as a user turn, the whole task (JSON) in `info`."""
    return [
        {
            "prompt": [{"role": "user", "content": t["prompt"]}],
            "answer": "",
            "info": {"rl_task": json.dumps(t)},
        }
        for t in tasks
    ]


def describe_tools(tools: list[dict[str, Any]]) -> str:
    """The tools and the call syntax, for a system prompt."""
    lines = ["You can use these tools:"]
    for tool in tools:
        params = ", ".join(tool["parameters"].get("properties", {}))
        lines.append(f"- {tool['name']}({params}): {tool['description'].strip()}")
    return "\n".join([*lines, CALL_SYNTAX])


def parse_calls(message: Any) -> list[dict[str, Any]]:
    """Tool calls in an assistant message: the API's `tool_calls`, <tool_call> JSON blocks and
    <tool>name(args)</tool> text calls (`{"text": ...}`, mapped by the workflow)."""
    calls = []
    for call in getattr(message, "tool_calls", None) or []:
        calls.append({"name": call.name, "arguments": call.arguments})
    text = getattr(message, "content", None) or ""
    for block in TOOL_CALL.findall(text if isinstance(text, str) else ""):
        try:
            parsed = json.loads(block)
        except ValueError:
            calls.append({"error": f"not JSON: {block[:200]}"})
            continue
        calls.append(parsed if isinstance(parsed, dict) else {"error": "not an object"})
    calls += [{"text": block} for block in TOOL_TAG.findall(text if isinstance(text, str) else "")]
    return calls


def reward_of(text: str) -> float:
    """A number, or JSON with `reward` (also {"result": ...} around either)."""
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, dict) and "result" in value and "reward" not in value:
        return reward_of(str(value["result"]))
    if isinstance(value, dict):
        value = value.get("reward")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TaskServerError(f"the evaluate tool answered {text[:200]!r}, not a reward") from None


class TasksEnv(vf.MultiTurnEnv):
    def __init__(
        self,
        tool_timeout_s: float,
        system_prompt: str | None,
        few_shot: list[dict[str, str]],
        workflow: Workflow,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.tool_timeout_s = tool_timeout_s
        self.task_system_prompt = system_prompt
        self.few_shot = few_shot
        self.workflow = workflow

    async def setup_state(self, state: vf.State) -> vf.State:
        task = json.loads(state["info"]["rl_task"])
        name, spec = server_spec(task)
        state.update(task_reward=0.0, num_calls=0, num_ok_calls=0, format_scores=[])
        link = McpLink(name, spec, self.tool_timeout_s)
        state["mcp"] = link
        try:
            await link.open()
            for setup in setup_tools(task):
                await self.checked_call(link, setup, "setup")
            hidden = {s["name"] for s in setup_tools(task)} | {task["evaluate_tool"]["name"]}
            tools = [t for t in await link.list_tools() if t["name"] not in hidden]
        except McpError as err:
            raise TaskServerError(str(err)) from None
        state["tool_params"] = {
            t["name"]: list(t["parameters"].get("properties", {})) for t in tools
        }
        system = self.task_system_prompt or describe_tools(tools)
        if task.get("system_prompt"):
            system = f"{task['system_prompt']}\n\n{system}"
        example = [FEW_SHOT_ROLES[m["role"]](content=m["content"]) for m in self.few_shot]
        state["prompt"] = [vf.SystemMessage(content=system), *example, *state["prompt"]]
        return state

    async def checked_call(self, link: McpLink, spec: dict, role: str) -> str:
        text, is_error = await link.call(spec["name"], spec.get("arguments", {}))
        if is_error:
            raise McpError(f"the {role} tool {spec['name']} answered an error: {text[:200]}")
        return text

    @vf.stop
    async def no_tool_call(self, state: vf.State) -> bool:
        if not state["trajectory"]:
            return False
        return not parse_calls(state["trajectory"][-1]["completion"][-1])

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs):
        replies, valid = [], True
        for call in parse_calls(messages[-1]):
            call = self.resolve(call, state["tool_params"])
            valid = valid and "error" not in call
            reply, ok = await self.run_call(state["mcp"], call)
            state["num_calls"] += 1
            state["num_ok_calls"] += ok
            replies.append(reply)
        text = getattr(messages[-1], "content", None) or ""
        state["format_scores"].append(format_score(str(text), self.workflow, valid))
        return [vf.UserMessage(content="\n".join(replies))]

    def resolve(self, call: dict[str, Any], params: dict[str, list[str]]) -> dict[str, Any]:
        """A text call (`{"text": "name(args)"}`) as `{"name", "arguments"}` through the
        workflow's action mappings; a call that does not map carries its `error`."""
        if "text" not in call:
            return call
        try:
            action, args, kwargs = parse_call(call["text"])
            name, arguments = to_mcp_call(action, args, kwargs, self.workflow, params)
        except ActionError as err:
            return {"error": str(err)}
        return {"name": name, "arguments": arguments}

    async def run_call(self, link: McpLink, call: dict[str, Any]) -> tuple[str, bool]:
        """The <tool_response> for one call, and whether the tool ran without an error."""
        if "error" in call:
            text = f"error: the tool call is {call['error']}"
            return f"<tool_response>\n{text}\n</tool_response>", False
        arguments = call.get("arguments") or {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {}
        try:
            text, is_error = await link.call(str(call.get("name")), arguments)
        except McpError as err:
            if "hung" in str(err) or "not connected" in str(err):
                raise TaskServerError(str(err)) from None
            text, is_error = f"error: {err}", True
        return f"<tool_response>\n{text}\n</tool_response>", not is_error

    @vf.cleanup
    async def evaluate_and_close(self, state: vf.State) -> None:
        link: McpLink | None = state.pop("mcp", None)
        if link is None:
            return
        try:
            if state.get("error") is None:
                task = json.loads(state["info"]["rl_task"])
                text = await self.checked_call(link, task["evaluate_tool"], "evaluate")
                state["task_reward"] = reward_of(text)
        except (McpError, TaskServerError) as err:
            state["error"] = TaskServerError(str(err))
        finally:
            await link.close()


def task_completion(state: vf.State, **kwargs) -> float:
    """The task's own reward: the evaluate tool's answer."""
    return float(state.get("task_reward") or 0.0)


def tool_execution(state: vf.State, **kwargs) -> float:
    """The share of the rollout's tool calls that ran without an error (0 without calls)."""
    return state.get("num_ok_calls", 0) / state["num_calls"] if state.get("num_calls") else 0.0


def format_compliance(state: vf.State, **kwargs) -> float:
    """The mean format score of the turns that called a tool (0 without calls)."""
    scores = state.get("format_scores") or []
    return sum(scores) / len(scores) if scores else 0.0


RUBRIC_FUNCS = {
    "task_completion": task_completion,
    "tool_execution": tool_execution,
    "format_compliance": format_compliance,
}


def build_rubric(workflow: Workflow) -> vf.Rubric:
    """The reward: the workflow's weighted terms (the task's reward alone by default); every
    term is logged as a metric, weighted or not."""
    names = list(RUBRIC_FUNCS)
    return vf.Rubric(
        funcs=[RUBRIC_FUNCS[n] for n in names],
        weights=[workflow.weights.get(n, 0.0) for n in names],
    )


def check_few_shot(messages: list) -> list[dict[str, str]]:
    """`few_shot` as {role, content} dicts; anything else is a ValueError naming the message."""
    for i, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or message.get("role") not in FEW_SHOT_ROLES
            or not isinstance(message.get("content"), str)
            or set(message) != {"role", "content"}
        ):
            raise ValueError(
                f"few_shot[{i}] is {message!r}: each message is {{role: user|assistant, "
                f"content: TEXT}}"
            )
    return messages


def load_environment(
    dataset: str | None = None,
    tasks: str | None = None,
    max_turns: int = 4,
    tool_timeout_s: float = 30.0,
    system_prompt: str | None = None,
    few_shot: list | None = None,
    parser: dict | None = None,
    action_mappings: dict | None = None,
    rubric: dict | None = None,
) -> vf.Environment:
    """Tasks from a `rl tasks` dataset folder (`dataset`) or straight from a tasks.json
    (`tasks`); `system_prompt` replaces the generated tool description; `few_shot` is a solved
    example (user/assistant messages) shown before each task; `parser`, `action_mappings` and
    `rubric` are a workflow config's sections (rl_tasks.actions)."""
    if (dataset is None) == (tasks is None):
        raise ValueError("rl-tasks takes one of args.dataset (a `rl tasks` folder) or args.tasks")
    if dataset is not None:
        rows = load_from_disk(str(Path(dataset))).to_list()
    else:
        rows = task_rows(load_tasks(Path(tasks)))
    workflow = Workflow.from_args(parser, action_mappings, rubric)
    return TasksEnv(
        tool_timeout_s=tool_timeout_s,
        system_prompt=system_prompt,
        few_shot=check_few_shot(few_shot or []),
        workflow=workflow,
        dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows),
        rubric=build_rubric(workflow),
        max_turns=max_turns,
    )
