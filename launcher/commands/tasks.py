"""`rl tasks FILE.json --name NAME [--out DIR]`: check every task of a tasks.json, write them
as a local `datasets` folder (default data/tasks/NAME) and print the `[[env]]` lines to train on
it; no network."""

import sys
from pathlib import Path

from launcher.commands.base import command_parser
from rlcore.errors import ConfigError
from rlcore.files.paths import path_arg
from rlcore.runs.runguard import writing_into
from rlcore.secrets import redact_command

NAME = "tasks"
HELP = "check a tasks.json (MCP tool tasks), write it as a dataset and print the [[env]] lines"
DATA_ROOT = Path("data/tasks")
DATASET_MARKER = ".rl-tasks"
"""Written into every dataset folder `rl tasks` makes: only such a folder is ever replaced."""

EPILOG = """\
Nothing is written until every check passed: the tasks, --out, .env, and each task server (no
literal secret in its url, env or headers: write $VAR and set it in the environment or .env;
every $VAR set; its command on PATH)."""


def parser():
    parser = command_parser(NAME, HELP + ".", EPILOG)
    parser.add_argument("file", type=Path, metavar="FILE.json", help="one task or a list")
    parser.add_argument("--name", required=True, help="the dataset's name (a plain name)")
    parser.add_argument(
        "--out", type=path_arg("--out"), help=f"the folder to write (default {DATA_ROOT}/NAME)"
    )
    return parser


def check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("-"):
        raise ConfigError(
            f"--name {name!r} must be a plain name (no path separators, not . or ..): "
            "use --out DIR to choose the folder"
        )


def check_out(folder: Path) -> None:
    """A new or empty folder, or a dataset `rl tasks` wrote (which is replaced), that can be
    written."""
    from launcher.lockfile import check_writable

    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ConfigError(f"--out {folder} exists and is not a folder: pick a new folder")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / DATASET_MARKER).is_file():
        raise ConfigError(
            f"--out {folder} exists and is not a dataset written by `rl tasks`: pick a new folder"
        )
    check_writable(folder, "--out", folder=True)


def check_servers(tasks: list[dict], path: Path) -> None:
    """Before anything is written: no literal secret in a task's server (the dataset would
    hold it), every `$VAR` it uses set (environment or .env) and every command on PATH."""
    from rl_tasks.taskfile import TaskError, check_runnable

    from rlcore.config.literal_secrets import refuse_literal_secrets

    for index, task in enumerate(tasks):
        where = f"{path}: task {index} ({task['id']!r}): mcp_config"
        refuse_literal_secrets(task["mcp_config"], where, "a tasks dataset")
    try:
        check_runnable(tasks, path)
    except TaskError as err:
        raise ConfigError(str(err)) from None


def run(args) -> int:
    from rl_tasks.taskfile import TaskError, load_tasks

    check_name(args.name)
    folder = args.out or DATA_ROOT / args.name
    check_out(folder)
    try:
        tasks = load_tasks(args.file)
    except TaskError as err:
        raise ConfigError(str(err)) from None
    check_servers(tasks, args.file)
    print_local_commands(tasks)
    with writing_into(
        folder.absolute(), "--out"
    ):  # in a run: under its lock (rlcore.runs.runguard)
        write_dataset(tasks, folder)
    servers = sorted({next(iter(t["mcp_config"])) for t in tasks})
    print(f"rl: {len(tasks)} task(s) checked (servers: {', '.join(servers)}), written to {folder}")
    print("rl: train on them with these lines in rl.toml (or orch.toml without `orchestrator.`):")
    print(f'\n[[orchestrator.env]]\nid = "rl-tasks"\nargs = {{ dataset = "{folder}" }}')
    return 0


def print_local_commands(tasks: list[dict], file=None) -> None:
    from rl_tasks.taskfile import local_commands

    commands = local_commands(tasks)
    if commands:
        print(
            "rl: these tasks start local programs on this machine (their MCP servers):\n"
            + "\n".join(f"    {redact_command(c)}" for c in commands),
            file=file or sys.stdout,
        )


def write_dataset(tasks: list[dict], folder: Path) -> None:
    from datasets import Dataset, disable_progress_bars
    from rl_tasks import task_rows

    from rlcore.files.atomic import atomic_folder

    disable_progress_bars()
    try:
        with atomic_folder(folder, file_mode=None) as tmp:
            Dataset.from_list(task_rows(tasks)).save_to_disk(str(tmp))
            (tmp / DATASET_MARKER).write_text("written by rl tasks\n")
    except OSError as err:
        raise ConfigError(f"cannot write {folder}: {err.strerror or err}") from None
