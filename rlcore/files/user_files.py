"""Files a user names, read through one door (rl_files.user_file: a regular file of at most a
size limit, read without blocking), with its errors as ConfigError for the project's readers;
and the nesting limit on what configs, files and flags alike, may hold."""

from pathlib import Path
from typing import Any

from rl_files.user_file import MAX_CONFIG_BYTES, UserFileError, read_user_file

from rlcore.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_NESTING", "check_nesting", "read_user_bytes", "read_user_text"]


def read_user_bytes(path: Path, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
    """`rl_files.user_file.read_user_file`, its refusal a ConfigError."""
    try:
        return read_user_file(path, what, max_bytes)
    except UserFileError as err:
        raise ConfigError(str(err)) from None


def read_user_text(path: Path, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """The file's text; bytes that are not UTF-8 are a ConfigError naming file, line, column
    and the byte."""
    data = read_user_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ConfigError(
            f"{path}:{line}:{column}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}): save it as UTF-8 in your editor"
        ) from None


MAX_NESTING = 64
"""Levels of tables and arrays a config may nest, its top level counted (each part of a dotted
key is a table). The shipped configs use 4; past this the merging and checking code, which
walks configs recursively, could not finish."""


def check_nesting(data: Any, where: str, depth: int = 1) -> None:
    """A ConfigError naming `where` (a file or flag) and the key when `data`, at level `depth`,
    nests tables and arrays more than MAX_NESTING levels deep. Walks without recursion."""
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(data, depth, ())]
    while stack:
        value, level, path = stack.pop()
        if level > MAX_NESTING:
            raise ConfigError(too_deep(where, path))
        if not isinstance(value, dict | list):
            continue  # a plain value (a flag's `--inference.server.port 8123` into a table)
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(item, dict | list):
                stack.append((item, level + 1, (*path, str(key))))


def too_deep(where: str, path: tuple[str, ...] = ()) -> str:
    """The message for a value of `where` nested past MAX_NESTING (at `path`, if known)."""
    shown = ".".join(path[:6]) + (".…" if len(path) > 6 else "")
    key = f" (at `{shown}`)" if shown else ""
    return (
        f"{where}: nested more than {MAX_NESTING} levels deep{key}, counting tables, arrays "
        "and the parts of dotted keys: no config is this deep; write it flatter"
    )
