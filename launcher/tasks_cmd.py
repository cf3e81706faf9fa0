"""`rl tasks FILE.json --name NAME [--out DIR]`: check every task of a tasks.json, write them
as a local `datasets` folder (default data/tasks/NAME) and print the `[[env]]` lines to train on
it; no network. `rl init --tasks FILE.json`: connect to the first task's MCP server, list its
tools and print an rl.toml whose system prompt describes them and the call syntax."""

import asyncio
import shutil
import sys
from pathlib import Path

from rlcore.errors import USER_ERROR_EXIT_CODE

DATA_ROOT = Path("data/tasks")
USAGE = "usage: rl tasks FILE.json --name NAME [--out DIR]"


def error(message: str) -> int:
    print(f"rl: error: {message}", file=sys.stderr)
    return USER_ERROR_EXIT_CODE


def option(args: list[str], flag: str) -> str | None:
    if flag in args:
        i = args.index(flag)
        if i + 1 >= len(args):
            raise ValueError(f"{flag} needs a value")
        value = args[i + 1]
        del args[i : i + 2]
        return value
    return None


def cmd_tasks(args: list[str]) -> int:
    from rl_tasks.taskfile import TaskError, load_tasks

    args = list(args)
    try:
        name, out = option(args, "--name"), option(args, "--out")
    except ValueError as err:
        return error(f"{err}\n{USAGE}")
    if len(args) != 1 or name is None:
        return error(f"give one tasks file and --name\n{USAGE}")
    try:
        tasks = load_tasks(Path(args[0]))
    except TaskError as err:
        return error(f"{err}")
    folder = Path(out) if out else DATA_ROOT / name
    if folder.exists() and any(folder.iterdir()) and not (folder / "dataset_info.json").exists():
        return error(f"--out {folder} exists and is not a tasks dataset: pick another folder")
    from datasets import Dataset, disable_progress_bars
    from rl_tasks import task_rows

    disable_progress_bars()
    shutil.rmtree(folder, ignore_errors=True)
    Dataset.from_list(task_rows(tasks)).save_to_disk(str(folder))
    servers = sorted({next(iter(t["mcp_config"])) for t in tasks})
    print(f"rl: {len(tasks)} task(s) checked (servers: {', '.join(servers)}), written to {folder}")
    print("rl: train on them with these lines in rl.toml (or orch.toml without `orchestrator.`):")
    print(f'\n[[orchestrator.env]]\nid = "rl-tasks"\nargs = {{ dataset = "{folder}" }}')
    return 0


async def first_task_tools(path: Path) -> tuple[dict, list[dict]]:
    from rl_tasks.link import McpLink
    from rl_tasks.taskfile import load_tasks, server_spec, setup_tools

    task = load_tasks(path)[0]
    link = McpLink(*server_spec(task), timeout_s=60)
    try:
        await link.open()
        hidden = {s["name"] for s in setup_tools(task)} | {task["evaluate_tool"]["name"]}
        return task, [t for t in await link.list_tools() if t["name"] not in hidden]
    finally:
        await link.close()


def init_from_tasks(path: str, template: str) -> int:
    from rl_tasks import describe_tools
    from rl_tasks.link import McpError
    from rl_tasks.taskfile import TaskError

    try:
        task, tools = asyncio.run(first_task_tools(Path(path)))
    except (TaskError, McpError) as err:
        return error(str(err))
    name = Path(path).stem
    prompt = describe_tools(tools).replace('"""', "'''")
    config = template.format(env_id="rl-tasks", name=name).replace(
        "args = {}", f'args = {{ tasks = "{path}", system_prompt = """\n{prompt}\n""" }}'
    )
    print(f"# tools of {next(iter(task['mcp_config']))} (task {task['id']}): "
          f"{', '.join(t['name'] for t in tools)}")  # fmt: skip
    print(config, end="")
    return 0
