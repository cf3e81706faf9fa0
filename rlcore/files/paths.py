"""Paths a user gives (a flag, a config key, a workflow's job name), made absolute and resolved
once, before anything checks them or writes through them.

Every check on a path (`rlcore.runs.ownership`: not the current folder, new or empty, a marked run)
looks at the folder a write will really reach: `~` expanded, relative to the current folder,
links followed, `.` and `..` resolved (`..` after a folder that does not exist yet cancels it,
as it will once that folder is created: `nothere/..` is the current folder), no trailing slash.
An empty path is an error naming its flag or key, never the current folder."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def resolve_path(value: str | os.PathLike) -> Path:
    """`value` absolute and resolved (`Path.resolve()`: links, `.`, `..`, a missing tail kept);
    a ValueError saying what is wrong with it (empty, or not a usable path)."""
    text = os.fspath(value)
    if not text.strip():
        raise ValueError("is empty: give a path, e.g. outputs/my-run")
    if text.startswith("~"):
        text = expand_home(text)
    try:
        path = Path(text).resolve()
    except (OSError, RuntimeError, ValueError) as err:  # a link loop, a NUL byte
        raise ValueError(f"is not a usable path ({err})") from None
    check_lengths(path)
    return path


NAME_MAX, PATH_MAX = 255, 4095
"""The longest file name and path Linux takes, in bytes (longer ones fail with ENAMETOOLONG)."""


def check_lengths(path: Path) -> None:
    """A ValueError when a name in `path`, or the whole of it, is longer than Linux allows: said
    at once, never an OSError from the first file operation on it."""
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > NAME_MAX:
        raise ValueError(
            f"is not a usable path: it has a name of {longest:,} bytes, and a file or folder "
            f"name may have at most {NAME_MAX}; use a shorter name"
        )
    if len(os.fsencode(path)) > PATH_MAX:
        raise ValueError(
            f"is not a usable path: it is {len(os.fsencode(path)):,} bytes long, over the "
            f"{PATH_MAX:,} a path may have; use a shorter one"
        )


def quoted(value: str | os.PathLike, max_chars: int = 200) -> str:
    """`value` quoted for a message (its repr), cut in the middle past `max_chars` characters:
    an error line never carries a whole megabyte a user or a file gave."""
    text = os.fspath(value)
    if len(text) <= max_chars:
        return repr(text)
    half = max_chars // 2
    return f"{text[:half]!r}...{text[-half:]!r} ({len(text):,} characters)"


def nearest_existing(path: str | os.PathLike, links: bool = False) -> Path:
    """`path` made absolute, or the nearest folder above it that exists: where a file or folder
    made at `path` would be created, whose file system and permissions decide. With `links`, a
    link whose target is missing counts as existing too (making `path` through it would fail,
    so a check stops there)."""
    where = Path(path).absolute()
    while not (where.exists() or links and where.is_symlink()) and where != where.parent:
        where = where.parent
    return where


def expand_home(text: str) -> str:
    """`~` or `~user` at the start of `text` expanded; a ValueError naming the user who does
    not exist, or the missing home directory, instead of Python's "Could not determine home
    directory" for both."""
    head = text[1:].split("/", 1)[0]
    expanded = os.path.expanduser(text)
    if expanded != text:
        return expanded
    if head:
        raise ValueError(
            f"is not a usable path (it names user {head!r}, who does not exist here): spell "
            "the path out"
        )
    raise ValueError("is not a usable path (~, but this process has no home directory)")


def user_path(value: str | os.PathLike, key: str) -> Path:
    """`resolve_path` for a path the user gave as `key` (a flag or config key); a ConfigError
    naming `key`, the value and the fix."""
    from rlcore.errors import ConfigError

    try:
        return resolve_path(value)
    except ValueError as err:
        raise ConfigError(f"{key} {quoted(value)} {err}") from None


def resolve_field(value: Any) -> Any:
    """A config field's path resolved at parse time (pydantic's `BeforeValidator`): the
    ValueError becomes the parser's one-line message naming the key and where it was set."""
    if isinstance(value, str | os.PathLike):
        return resolve_path(value)
    return value


def path_arg(flag: str, file: bool = False) -> Callable[[str], Path]:
    """An argparse `type` for a path flag: `user_path` (a ConfigError naming `flag`, which the
    commands turn into one line and exit 2); a `file` flag refuses an existing folder."""

    def convert(value: str) -> Path:
        from rlcore.errors import ConfigError

        path = user_path(value, flag)
        if file and path.is_dir():
            raise ConfigError(f"{flag} {value!r} is a folder ({path}): give a file name")
        return path

    return convert
