"""Every command the README and the documentation site show is run, so that a renamed flag, a
moved config file or a changed default cannot leave the docs wrong.

A command is a line of a fenced `bash`/`sh`/`shell`/`console` block whose program is `rl`,
`trainer`, `orchestrator`, `inference`, `sft` or `evals` (after `uv run ...` or `.venv/bin/`).
It runs in-process, in the form that starts nothing, from a scratch folder that sees the
repository's `configs/`, `examples/` and `environments/` (so `outputs/` is the scratch's):

- `rl ...` with `--dry-run` (which checks files, keys, values, the run folder and the plan);
- `rl SUBCOMMAND ...` parsed by that subcommand's parser;
- `rl sft`, `rl eval`, `trainer`, `orchestrator`, `inference`, `sft`, `evals` with
  `--print-config` (which validates the whole config);
- a command that already says `--help`, `--dry-run` or `--print-config` as written.

A command that needs what this test cannot give says so in a trailing comment, the page's one
marker: `# needs: GPU`, `# needs: SLURM`, `# needs: rl init` (the MCP server `rl init`
connects to) or `# needs: the run above` (a folder an earlier command of the page writes, such
as a model that `rl sft` trained). Such a command is not run, but its flags must still be
`rl`'s and the files it names must exist. Every path-like argument (`configs/...`,
`examples/...`) must exist."""

import contextlib
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PROGRAMS = ("rl", "trainer", "orchestrator", "inference", "sft", "evals")
SHELL_BLOCKS = ("bash", "sh", "shell", "console")
MARKER = re.compile(r"#\s*needs:\s*(GPU|SLURM|rl init|the run above)(?![\w-])")
SHARED_FOLDERS = ("configs", "examples", "environments")
STARTS_NOTHING = ("--help", "-h", "--dry-run", "--print-config")


def documented_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@dataclass
class Command:
    page: Path
    line: int
    argv: list[str]  # from the program on: ["rl", "@", "configs/...", ...]
    needs: str | None

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}: {shlex.join(self.argv)}"


def _blocks(text: str):
    """(first line number, lines) of each fenced shell block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"\s*(```+|~~~+)\s*([\w-]*)", lines[i])
        if not fence:
            i += 1
            continue
        close, info = fence.group(1), fence.group(2)
        start = i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(close):
            i += 1
        if info in SHELL_BLOCKS:
            yield start + 1, lines[start:i]
        i += 1


def _logical_lines(first: int, lines: list[str]):
    """(line number, text) with backslash continuations joined."""
    i = 0
    while i < len(lines):
        number, text = first + i, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i].strip()
        yield number, text
        i += 1


def _program_argv(words: list[str]) -> list[str] | None:
    """`words` from the program on, `uv run ...`, `.venv/bin/` and `VAR=value` dropped; None
    if the program is none of ours."""
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]
    if words[:2] == ["uv", "run"]:
        words = words[2:]
        while words and words[0].startswith("-"):
            takes_value = words[0] in ("--extra", "--group", "--with", "--python")
            words = words[2:] if takes_value else words[1:]
    if words and words[0].startswith(".venv/bin/"):
        words = [words[0].removeprefix(".venv/bin/"), *words[1:]]
    return words if words and words[0] in PROGRAMS else None


def documented_commands() -> list[Command]:
    found = []
    for page in documented_pages():
        for first, lines in _blocks(page.read_text()):
            for number, text in _logical_lines(first, lines):
                marker = MARKER.search(text)
                lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
                lexer.whitespace_split = True
                lexer.commenters = "#"
                words: list[str] = []
                for token in [*lexer, ";"]:
                    if token and set(token) <= set(";&|"):
                        argv = _program_argv(words) if words else None
                        if argv:
                            needs = marker.group(1) if marker else None
                            found.append(Command(page, number, argv, needs))
                        words = []
                    else:
                        words.append(token)
    return found


COMMANDS = documented_commands()


def _paths(argv: list[str]) -> list[str]:
    """Arguments that name a file or folder of the repository."""
    return [
        word
        for word in argv
        if word.startswith(tuple(f"{folder}/" for folder in SHARED_FOLDERS))
        and not word.startswith("configs/locker")  # what `rl init -o` writes
    ]


def _run(main, argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            result = main(argv)
            code = result if isinstance(result, int) else 0
        except SystemExit as end:
            code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    return code, out.getvalue()


def _starting_nothing(argv: list[str], form: str) -> list[str]:
    return argv if any(word in STARTS_NOTHING for word in argv) else [*argv, form]


def run_documented(argv: list[str]) -> tuple[int, str]:
    """Run one documented command in the form that starts nothing; (exit code, output)."""
    from launcher.commands import COMMANDS as SUBCOMMANDS
    from launcher.commands.base import CommandParser
    from rlcore.errors import ConfigError

    program, args = argv[0], argv[1:]
    if program == "rl" and args[:1] == ["run"]:
        args = args[1:]
    if program == "rl" and args and args[0] in SUBCOMMANDS:
        parser: CommandParser = SUBCOMMANDS[args[0]].parser()
        try:
            return _run(parser.parse_args, args[1:])
        except ConfigError as err:
            return 2, str(err)
    if program == "rl" and args[:1] == ["sft"]:
        from launcher.sft_run import main

        return _run(main, _starting_nothing(args[1:], "--print-config"))
    if (program == "rl" and args[:1] == ["eval"]) or program == "evals":
        from orchestrator.evals.main import main

        rest = args[1:] if program == "rl" else args
        return _run(main, _starting_nothing(rest, "--print-config"))
    if program == "rl":
        from launcher.rl import main

        return _run(main, _starting_nothing(args, "--dry-run"))
    mains = {
        "trainer": "trainer.main",
        "orchestrator": "orchestrator.main",
        "inference": "inference.main",
        "sft": "trainer.sft.main",
    }
    module = __import__(mains[program], fromlist=["main"])
    return _run(module.main, _starting_nothing(args, "--print-config"))


RL_WORDS = {"--config", "--dataset", "--model", "--gpus", "--provider", "--wandb-api-key"}


def rl_flag_problems(argv: list[str]) -> list[str]:
    """The `--flags` of an `rl` training command that `rl` does not have."""
    from launcher.rl_config import RLConfig
    from rlcore.config.cli import COMMAND_FLAGS, ArgParser

    known = set(ArgParser(RLConfig, "rl").flag_names) | RL_WORDS
    known |= {"--" + flag.replace("_", "-") for flag in COMMAND_FLAGS}
    known |= {f"--no-{flag[2:]}" for flag in known}
    flags = [word.split("=")[0] for word in argv if word.startswith("--")]
    tables = {flag.rsplit(".", 1)[0] for flag in known if "." in flag}
    return [f for f in flags if f not in known and f not in tables]


@pytest.fixture
def scratch(tmp_path, monkeypatch, hub_environments):
    """A folder with the repository's configs, examples and environments, as the current
    folder, with the hub environments the shipped configs name installed (as the pages say to
    do first); the environment restored after each command."""
    for folder in SHARED_FOLDERS:
        (tmp_path / folder).symlink_to(REPO / folder)
    monkeypatch.chdir(tmp_path)
    saved = dict(os.environ)
    yield tmp_path
    os.environ.clear()
    os.environ.update(saved)


def test_the_docs_show_commands():
    """The README's two commands are among them, and every page of commands is found."""
    shown = {shlex.join(c.argv) for c in COMMANDS if c.page.name == "README.md"}
    assert (
        "rl --trainer @ configs/quickstart/train.toml --orchestrator @ "
        "configs/quickstart/orch.toml --inference @ configs/quickstart/infer.toml"
    ) in shown
    assert len(COMMANDS) >= 40, len(COMMANDS)


def test_every_documented_command_runs(scratch):
    """All of them in one test (one scratch folder, one import of each entry point): the
    failures are listed together, each with its page, line and output."""
    failures = []
    ran = marked = 0
    for command in COMMANDS:
        missing = [p for p in _paths(command.argv) if not (REPO / p).exists()]
        if missing:
            failures.append(f"{command}\n    names files that do not exist: {missing}")
            continue
        if command.needs:
            marked += 1
            if command.argv[0] == "rl" and (problems := rl_flag_problems(command.argv)):
                failures.append(f"{command}\n    unknown flags: {problems}")
            continue
        ran += 1
        code, output = run_documented(command.argv)
        if code != 0:
            tail = "\n    ".join(output.strip().splitlines()[-6:])
            failures.append(f"{command}\n    exit {code}:\n    {tail}")
    assert not failures, "documented commands that fail:\n" + "\n".join(failures)
    print(f"{ran} documented commands run, {marked} marked `# needs: ...`")
