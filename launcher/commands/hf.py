"""`rl hf tasks.json --name ORG/NAME [--private] [--no-push]`: check the tasks (one object or a
list), fill a task's missing `mcp_config` from rl.lock.yaml (the environment `rl init` read),
write them as a local `datasets` dataset (data/datasets/ORG/NAME) and make it the lock file's
primary dataset, which `rl --config` trains on. It is pushed to the Hugging Face hub only when
asked (not --no-push), with a token (HF_TOKEN) and a network; otherwise it says where it is."""

import os
import sys
from pathlib import Path
from typing import Any

from launcher.commands.base import command_parser
from launcher.commands.tasks import check_out, check_servers, print_local_commands, write_dataset
from rlcore.errors import ConfigError
from rlcore.files.paths import user_path
from rlcore.runs.runguard import writing_into
from rlcore.secrets import REDACTED, redact_urls

NAME = "hf"
HELP = "check tasks, save them as a dataset, make it rl.lock.yaml's primary one (and push it)"
NAME_PART = r"[A-Za-z0-9][\w.-]*"
TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")

EPILOG = """\
Nothing is written until every check passed: the tasks, rl.lock.yaml, .env, and each task
server (no literal secret in its url, env or headers: write $VAR and set it in the environment
or .env; every $VAR set; its command on PATH)."""


def parser():
    parser = command_parser(NAME, HELP + ".", EPILOG)
    parser.add_argument("file", type=Path, metavar="FILE.json", help="one task or a list")
    parser.add_argument("--name", required=True, help="the dataset's name, ORG/NAME or NAME")
    parser.add_argument("--private", action="store_true", help="push it as a private dataset")
    parser.add_argument("--no-push", action="store_true", help="keep it local only")
    return parser


def run(args) -> int:
    import re

    from launcher.lockfile import (
        LOCK_FILE,
        check_writable,
        dataset_dir,
        now_iso,
        read_lock,
        update_lock,
    )

    if not re.fullmatch(f"({NAME_PART}/)?{NAME_PART}", args.name) or ".." in args.name:
        raise ConfigError(
            f"--name {args.name!r}: expected ORG/NAME or NAME (letters, digits, `-`, `_`, `.`)"
        )
    # Every check before the first write: the dataset folder, the lock file, the tasks (their
    # servers' secrets, variables and commands), .env (read for the token too).
    folder = user_path(dataset_dir(args.name), "--name")  # resolved before any check
    check_out(folder)
    check_writable(LOCK_FILE, "the lock file")
    tasks = load_filled(args.file, read_lock())
    check_servers(tasks, args.file)
    token = None if args.no_push else hub_token()
    print_local_commands(tasks)
    # In a run folder only under its lock, never beside a running rl (rlcore.runs.runguard).
    with writing_into(folder, "--name"), writing_into(LOCK_FILE.absolute(), "the lock file"):
        write_dataset(tasks, folder)
        update_lock(
            {
                "primary_dataset": {
                    "name": args.name,
                    "task_count": len(tasks),
                    "updated_at": now_iso(),
                }
            }
        )
    print(
        f"rl: {len(tasks)} task(s) checked, saved to {folder}; rl.lock.yaml's primary "
        f"dataset is {args.name}"
    )
    if not args.no_push:
        push(folder, args.name, args.private, token)
    return 0


def load_filled(path: Path, lock: dict[str, Any]) -> list[dict]:
    """The tasks of `path`, each without `mcp_config` given the lock file's environment."""
    from rl_tasks.taskfile import TaskError, parse_tasks, read_json

    try:
        data = read_json(path)
        items = data if isinstance(data, list) else [data]
        servers = lock.get("mcp_config")
        for index, task in enumerate(items):
            if isinstance(task, dict) and "mcp_config" not in task:
                if not servers:
                    raise TaskError(
                        f"{path}: task {index}: `mcp_config` is missing and rl.lock.yaml names no "
                        "environment: run `rl init TARGET` first, or give the task its server"
                    )
                task["mcp_config"] = servers
        return parse_tasks(items, path)
    except TaskError as err:
        raise ConfigError(str(err)) from None


def hub_token() -> str | None:
    from rlcore.secrets import dotenv

    env = {**dotenv(), **os.environ}
    return next((env[v] for v in TOKEN_VARS if env.get(v)), None)


def push(folder: Path, name: str, private: bool, token: str | None) -> None:
    """Push to the hub when a token is set and the hub answers; a failure is a note, since the
    dataset is saved either way."""
    if token is None:
        print(
            f"rl: not pushed (no HF_TOKEN in the environment or .env); the dataset is in {folder}"
        )
        return
    try:
        push_to_hub(folder, name, private, token)
    except Exception as err:  # noqa: BLE001 - offline, refused, ...: the local copy stands
        reason = redact_urls(str(err).replace(token, REDACTED))[:200]
        print(
            f"rl: not pushed ({type(err).__name__}: {reason}); the dataset is in {folder}",
            file=sys.stderr,
        )
        return
    print(f"rl: pushed to the hub as {name}{' (private)' if private else ''}")


def push_to_hub(folder: Path, name: str, private: bool, token: str) -> None:
    """The hub boundary: upload the saved dataset."""
    from datasets import load_from_disk

    load_from_disk(str(folder)).push_to_hub(name, private=private, token=token)
