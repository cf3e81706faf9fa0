"""Files a user names, read through one door (rl_envs.user_file: a regular file of at most a
size limit, read without blocking), with its errors as ConfigError for the project's readers."""

from pathlib import Path

from rl_envs.user_file import MAX_CONFIG_BYTES, UserFileError, read_user_file

from rlcore.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "read_user_bytes", "read_user_text"]


def read_user_bytes(path: Path, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
    """`rl_envs.user_file.read_user_file`, its refusal a ConfigError."""
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
