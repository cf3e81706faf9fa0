"""Bare `rl`: look for a workflow config (configs/*.yaml), a tasks dataset (rl.lock.yaml's
primary dataset) and the lock file, say what was found, offer `rl init` / `rl hf` for what is
missing and ask before starting. Without a terminal it says what is missing and exits 2: it
never starts a run nobody asked for."""

import sys
from dataclasses import dataclass
from pathlib import Path

from launcher.commands import run_command
from launcher.lockfile import LOCK_FILE, dataset_dir, read_lock
from launcher.prompt import ask, has_terminal
from rlcore.errors import USER_ERROR_EXIT_CODE, ConfigError
from rlcore.secrets import redact_message


@dataclass
class Found:
    config: Path | None
    dataset: str | None
    lock: bool

    def missing(self) -> list[str]:
        out = []
        if self.config is None:
            out.append(
                "a workflow config: `rl init TARGET` (a docker image, an MCP URL or a "
                "server command) writes configs/<env>.yaml"
            )
        if self.dataset is None:
            out.append("a tasks dataset: `rl hf tasks.json --name ORG/NAME`")
        return out


def look_around() -> Found:
    configs = sorted(Path("configs").glob("*.yaml")) if Path("configs").is_dir() else []
    try:
        lock = read_lock()
    except ConfigError:
        lock = {}
    entry = lock.get("primary_dataset")
    name = entry.get("name") if isinstance(entry, dict) else None
    dataset = name if name and dataset_dir(name).is_dir() else None
    return Found(configs[0] if configs else None, dataset, LOCK_FILE.exists())


def report(found: Found) -> None:
    print(f"rl: workflow config: {found.config or 'none found in configs/'}")
    print(f"rl: tasks dataset:   {found.dataset or 'none (rl.lock.yaml names no saved dataset)'}")
    print(f"rl: lock file:       {LOCK_FILE if found.lock else 'none'}")


def bare_rl() -> int | list[str]:
    """An exit code, or the arguments of the run the user agreed to start."""
    found = look_around()
    report(found)
    if not has_terminal():
        missing = found.missing()
        for item in missing:
            print(f"rl: missing {item}", file=sys.stderr)
        print(
            "rl: error: no terminal to ask before starting; run "
            f"`rl --config {found.config or 'CONFIG.yaml'}` (see `rl --help`)",
            file=sys.stderr,
        )
        return USER_ERROR_EXIT_CODE
    return ask_and_start(found)


def ask_and_start(found: Found) -> int | list[str]:
    """Ask for what is missing and whether to start; the standard input ending on the way is
    "no terminal" (exit 2), never a traceback."""
    try:
        return questions(found)
    except ConfigError as err:
        print(f"rl: error: {redact_message(str(err))}", file=sys.stderr)
        return USER_ERROR_EXIT_CODE


def questions(found: Found) -> int | list[str]:
    instead = f"run `rl --config {found.config or 'CONFIG.yaml'}` instead"
    if found.config is None:
        question = (
            "No workflow config. Generate one with `rl init`: docker image, MCP URL or "
            "server command (empty: stop)? "
        )
        target = ask(question, "run `rl init TARGET`").strip()
        if not target or run_command("init", [target]) != 0:
            return USER_ERROR_EXIT_CODE
        found = look_around()
    if found.dataset is None:
        hf = "run `rl hf tasks.json --name ORG/NAME`"
        tasks = ask("No tasks dataset. A tasks.json to save with `rl hf` (empty: stop)? ", hf)
        if not tasks.strip():
            return USER_ERROR_EXIT_CODE
        name = ask("Its name, ORG/NAME [local/tasks]: ", hf).strip() or "local/tasks"
        if run_command("hf", [tasks.strip(), "--name", name, "--no-push"]) != 0:
            return USER_ERROR_EXIT_CODE
        found = look_around()
    if found.config is None or found.dataset is None:
        return USER_ERROR_EXIT_CODE
    command = ["--config", str(found.config), "--dataset", found.dataset]
    answer = ask(f"Start training: rl {' '.join(command)}? [y/N] ", instead).strip().lower()
    if answer not in ("y", "yes"):
        print("rl: nothing started")
        return 0
    return command
