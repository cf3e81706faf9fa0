"""Asking the user: whether there is a terminal to ask, and `ask`, the one way `rl` prompts (bare
`rl`, `rl delete`). Without a terminal a question is a ConfigError that says what to do instead."""

import sys

from rlcore.errors import ConfigError


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
