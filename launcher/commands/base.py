"""What every `rl` subcommand shares: an argparse parser whose mistakes are one message and
exit 2 (never a traceback), and whose `-h/--help` prints the subcommand's own usage; `ask`, the
one way a command prompts."""

import argparse
import sys

from rlcore.errors import ConfigError


class CommandParser(argparse.ArgumentParser):
    """argparse with errors as ConfigError (exit 2 through the dispatcher, usage included)."""

    def error(self, message: str):
        raise ConfigError(f"{message}\n{self.format_usage().strip()}")


def command_parser(name: str, description: str, epilog: str = "") -> CommandParser:
    return CommandParser(
        prog=f"rl {name}",
        description=description,
        epilog=epilog or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def has_terminal() -> bool:
    """Whether standard input is an open terminal (not missing, closed, a file or a pipe)."""
    stdin = sys.stdin
    try:
        return stdin is not None and not stdin.closed and stdin.isatty()
    except (OSError, ValueError):
        return False


def ask(question: str, without_terminal: str) -> str:
    """The user's answer to `question`. Without a terminal (standard input missing, closed,
    not a terminal, or ended) a ConfigError: `without_terminal` (what to do instead, naming
    the flag) and "(no terminal to ask)"."""
    refusal = f"{without_terminal} (no terminal to ask)"
    if not has_terminal():
        raise ConfigError(refusal)
    try:
        return input(question)
    except (EOFError, OSError, ValueError):
        raise ConfigError(refusal) from None
