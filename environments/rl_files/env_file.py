"""`.env` in the working folder: the KEY=VALUE lines that `$VAR` references are read from when
the environment itself does not set them. python-dotenv's syntax (quotes, `export`, comments);
a line it cannot read is an error naming the file and line, never a silent skip, and no message
quotes the file's contents.

The one reader for the project (rlcore.secrets, W&B's key) and the bundled environments
(rl_tasks): it lives here because the environments ship as a package of their own, which the
project depends on and which cannot import the project."""

import io
import os
from pathlib import Path

from dotenv.parser import parse_stream

from rl_files.user_file import UserFileError, read_user_file

DOTENV = Path(".env")


class DotenvError(ValueError):
    """A `.env` that cannot be used; the message names the file (and line), never a value."""


def read_dotenv(path: Path | str = DOTENV) -> dict[str, str]:
    """The variables `path` sets ({} when there is no such file, or a folder of that name);
    a key given without `=` sets nothing. It is read through rl_files.user_file: a device,
    FIFO or file over 16 MiB is a DotenvError."""
    path = Path(path)
    if not path.exists() or path.is_dir():  # a folder `.env` is a virtual environment
        return {}
    try:
        text = read_user_file(path, ".env file").decode("utf-8")
    except UserFileError as err:
        raise DotenvError(str(err)) from None
    except UnicodeDecodeError as err:
        where = f"byte {err.start}"
        raise DotenvError(f"{path} is not UTF-8 text ({where}): save it as UTF-8") from None
    values: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            raise DotenvError(
                f"{path}, line {binding.original.line}: not a `NAME=value` line (a quote left "
                "open, or a space in the key?): fix it, or start it with `#`"
            )
        if binding.key is not None and binding.value is not None:
            values[binding.key] = binding.value
    return values


def environment(path: Path | str = DOTENV) -> dict[str, str]:
    """What `$VAR`s are read from: the environment, and `path` under it."""
    return {**read_dotenv(path), **os.environ}
