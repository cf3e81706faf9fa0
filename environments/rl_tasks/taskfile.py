"""tasks.json: one task or a list of them, as agent builders write them (HUD style):

    {"id": "task-001", "prompt": "...",
     "mcp_config": {"NAME": {"url": "http://...", "headers": {...}}      (streamable HTTP)
                    or {"NAME": {"command": "...", "args": [...], "env": {...}, "cwd": "..."}},
     "setup_tool": {"name": "...", "arguments": {...}}     (optional; or a list of them)
     "evaluate_tool": {"name": "...", "arguments": {...}},
     "metadata": {...}}                                    (optional)

`load_tasks` checks every task and raises TaskError naming the task's index and field. Pure
Python: `rl tasks` and the environment both use it."""

import json
import os
import re
from pathlib import Path
from typing import Any

from rl_files.env_file import DotenvError, read_dotenv
from rl_files.user_file import UserFileError, read_user_file

TASK_KEYS = {
    "id",
    "prompt",
    "mcp_config",
    "setup_tool",
    "evaluate_tool",
    "metadata",
    "system_prompt",
}
URL_KEYS = {"url", "headers"}
STDIO_KEYS = {"command", "args", "env", "cwd"}
TOOL_KEYS = {"name", "arguments"}
VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


class TaskError(ValueError):
    """A task file that cannot be used; the message names the file, task and field."""


def read_json(path: Path) -> Any:
    """A tasks file's JSON, read through rl_files.user_file (a regular file of at most 16 MiB)."""
    try:
        return json.loads(read_user_file(path, "tasks file").decode("utf-8"))
    except UserFileError as err:
        raise TaskError(str(err)) from None
    except UnicodeDecodeError as err:
        raise TaskError(f"{path} is not UTF-8 text (byte {err.start}): save it as UTF-8") from None
    except ValueError as err:
        raise TaskError(f"{path}: not valid JSON ({err})") from None
    except RecursionError:
        raise TaskError(f"{path}: nested too deeply to be a tasks file") from None


def load_tasks(path: Path) -> list[dict[str, Any]]:
    return parse_tasks(read_json(path), path)


def parse_tasks(data: Any, path: Path) -> list[dict[str, Any]]:
    """Checked tasks from a tasks file's JSON (one task or a list); `path` names it in errors."""
    tasks = data if isinstance(data, list) else [data]
    if not tasks:
        raise TaskError(f"{path}: holds no task (an empty list)")
    for index, task in enumerate(tasks):
        check_task(task, f"{path}: task {index}")
    tasks = [{"id": t.get("id") or f"task-{i:03d}", **t} for i, t in enumerate(tasks)]
    check_unique_ids(tasks, path)
    return tasks


def check_unique_ids(tasks: list[dict[str, Any]], path: Path) -> None:
    first: dict[str, int] = {}
    for index, task in enumerate(tasks):
        task_id = str(task["id"])
        if task_id in first:
            raise TaskError(
                f"{path}: task {index} has id {task_id!r}, like task {first[task_id]}: "
                "give every task its own id"
            )
        first[task_id] = index


def local_commands(tasks: list[dict[str, Any]]) -> list[str]:
    """The programs the tasks start on this machine (stdio MCP servers), each once, as a
    shell would show them."""
    import shlex

    commands = []
    for task in tasks:
        _, spec = server_spec(task)
        if "command" in spec:
            commands.append(shlex.join([spec["command"], *spec.get("args", [])]))
    return list(dict.fromkeys(commands))


def check_task(task: Any, where: str) -> None:
    if not isinstance(task, dict):
        raise TaskError(f"{where}: a task is a JSON object, got {type(task).__name__}")
    if "id" in task:
        where = f"{where} ({task['id']!r})"
    unknown = sorted(set(task) - TASK_KEYS)
    if unknown:
        raise TaskError(f"{where}: unknown field(s) {unknown}; known: {sorted(TASK_KEYS)}")
    prompt = task.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise TaskError(f"{where}: `prompt` is missing or empty: give the task's instructions")
    check_servers(task.get("mcp_config"), f"{where}: mcp_config")
    if "setup_tool" in task:
        setups = task["setup_tool"]
        for i, spec in enumerate(setups if isinstance(setups, list) else [setups]):
            check_tool(
                spec, f"{where}: setup_tool" + (f"[{i}]" if isinstance(setups, list) else "")
            )
    if "evaluate_tool" not in task:
        raise TaskError(f"{where}: `evaluate_tool` is missing: the reward comes from it")
    check_tool(task["evaluate_tool"], f"{where}: evaluate_tool")
    if "metadata" in task and not isinstance(task["metadata"], dict):
        raise TaskError(f"{where}: `metadata` must be an object")


def check_servers(config: Any, where: str) -> None:
    if not isinstance(config, dict) or not config:
        raise TaskError(f"{where}: expected an object naming one MCP server, got {config!r}")
    if len(config) != 1:
        raise TaskError(f"{where}: names {len(config)} servers; a task connects to one")
    name, spec = next(iter(config.items()))
    where = f"{where}.{name}"
    if not isinstance(spec, dict):
        raise TaskError(f"{where}: expected an object with `url` or `command`")
    if ("url" in spec) == ("command" in spec):
        raise TaskError(f"{where}: give exactly one of `url` (HTTP) or `command` (stdio)")
    allowed = URL_KEYS if "url" in spec else STDIO_KEYS
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise TaskError(
            f"{where}: unknown key(s) {unknown} for this server; allowed {sorted(allowed)}"
        )
    for key in ("url", "command", "cwd"):
        if key in spec and (not isinstance(spec[key], str) or not spec[key]):
            raise TaskError(f"{where}.{key}: expected a non-empty string")
    if "args" in spec and not (
        isinstance(spec["args"], list) and all(isinstance(a, str) for a in spec["args"])
    ):
        raise TaskError(f"{where}.args: expected a list of strings")
    for key in ("headers", "env"):
        value = spec.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise TaskError(f"{where}.{key}: expected an object of strings")


def check_tool(spec: Any, where: str) -> None:
    if not isinstance(spec, dict):
        raise TaskError(f'{where}: expected {{"name": ..., "arguments": {{...}}}}, got {spec!r}')
    unknown = sorted(set(spec) - TOOL_KEYS)
    if unknown:
        raise TaskError(
            f"{where}: unknown key(s) {unknown}; a tool spec has `name` and `arguments`"
        )
    if not isinstance(spec.get("name"), str) or not spec["name"]:
        raise TaskError(f"{where}.name: the tool's name is missing")
    if not isinstance(spec.get("arguments", {}), dict):
        raise TaskError(f"{where}.arguments: expected an object")


def server_spec(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(name, spec) of the task's one server."""
    return next(iter(task["mcp_config"].items()))


def setup_tools(task: dict[str, Any]) -> list[dict[str, Any]]:
    spec = task.get("setup_tool")
    return [] if spec is None else spec if isinstance(spec, list) else [spec]


def expand(value: str, env: dict[str, str] | None = None) -> str:
    """`$VAR` and `${VAR}` from the environment (or `.env` in the working folder); a variable
    that is not set is an error naming it, never an empty string sent to a server."""
    env = {**dotenv(), **os.environ} if env is None else env

    def one(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in env:
            raise TaskError(f"${name} is not set: export it or put it in .env")
        return env[name]

    return VAR.sub(one, value)


def check_server(name: str, spec: dict[str, Any], where: str, env: dict[str, str]) -> None:
    """What would make the server fail at its first rollout, found before anything starts or
    is written: a `$VAR` in its url, headers or env that is not set, a command that is not on
    PATH, a `cwd` that is not a folder. Messages name the variable, never a value."""
    import shutil

    fields = [("url", spec.get("url"))]
    for key in ("headers", "env"):
        fields += [(f"{key}.{k}", v) for k, v in spec.get(key, {}).items()]
    for field, value in fields:
        if isinstance(value, str):
            try:
                expand(value, env)
            except TaskError as err:
                raise TaskError(f"{where}.{name}.{field}: {err}") from None
    cwd = spec.get("cwd")
    if cwd is not None and not Path(cwd).is_dir():
        raise TaskError(f"{where}.{name}.cwd: {cwd!r} is not a folder here")
    command = spec.get("command")
    if command is None or command in ("python", "python3"):  # the link runs this Python
        return
    path = env.get("PATH", os.defpath)
    if "/" in command:
        found = (Path(cwd or ".") / command).is_file()
    else:
        found = shutil.which(command, path=path) is not None
    if not found:
        raise TaskError(
            f"{where}.{name}.command: {command!r} is not on PATH (nor a file "
            "here): install it, or give its full path"
        )


def environment() -> dict[str, str]:
    """What `$VAR`s are read from: the environment, and `.env` in the working folder under it."""
    return {**dotenv(), **os.environ}


def check_runnable(tasks: list[dict[str, Any]], path: Path, env: dict | None = None) -> None:
    """`check_server` for every task's server, each once (`env`: `environment()`)."""
    env = environment() if env is None else env
    seen = set()
    for index, task in enumerate(tasks):
        name, spec = server_spec(task)
        key = json.dumps([name, spec], sort_keys=True)
        if key not in seen:
            seen.add(key)
            check_server(name, spec, f"{path}: task {index} ({task['id']!r}): mcp_config", env)


def dotenv(path: Path = Path(".env")) -> dict[str, str]:
    """The variables `.env` sets; a bad one is a TaskError naming the file and line."""
    try:
        return read_dotenv(path)
    except DotenvError as err:
        raise TaskError(str(err)) from None


def tasks_in_args(args: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks of an `rl-tasks` environment with these args (its tasks file or `rl tasks`
    dataset); empty when they cannot be read (loading reports that)."""
    try:
        if args.get("tasks"):
            return load_tasks(Path(args["tasks"]))
        if args.get("dataset"):
            from datasets import load_from_disk

            rows = load_from_disk(str(args["dataset"])).to_list()
            return [json.loads(row["info"]["rl_task"]) for row in rows]
    except (TaskError, OSError, ValueError, KeyError, FileNotFoundError):
        return []
    return []
