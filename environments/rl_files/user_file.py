"""The one door for files a user names: `@` configs, `rl --config`, `slurm.template`, `.env`,
tasks files and the lock file. Only a regular file (links followed) of at most a size limit is
read; a device (`/dev/zero`), a FIFO, a socket, a folder or a larger file is refused unread, with
one message naming the file, what it is and the fix. Nothing here can block: the kind is checked
with stat before opening, the file is opened non-blocking and checked again on the open
descriptor (the path may have been swapped in between), and at most limit + 1 bytes are read.

It lives here, not in rlcore, because the environments ship as a package of their own that
cannot import the project; rlcore wraps it (rlcore.files.user_files) for the project's readers."""

import os
import stat
from pathlib import Path

MAX_CONFIG_BYTES = 16 << 20
"""Configs, templates, `.env` and tasks files are KiB; a larger file is not one."""

_KINDS = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
}


class UserFileError(ValueError):
    """A file the user named that cannot be read as one; the message names it and the fix."""


def read_user_file(path: Path | str, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of the regular file `path` (links followed), `what` (e.g. "config file")
    naming it in errors; a UserFileError for anything else, or for more than `max_bytes`."""
    path = Path(path)
    try:
        _check(path, os.stat(path), what, max_bytes)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserFileError(f"{what} {path} does not exist: check the path") from None
    except OSError as err:
        raise UserFileError(f"{what} {path}: cannot read it ({err.strerror or err})") from None
    try:
        _check(path, os.fstat(fd), what, max_bytes)  # what was opened, not what was checked
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise UserFileError(f"{what} {path}: cannot read it ({err.strerror or err})") from None
    finally:
        os.close(fd)
    if size > max_bytes:  # it grew after the check
        raise UserFileError(_too_big(path, what, size, max_bytes))
    return b"".join(chunks)


def _check(path: Path, info: os.stat_result, what: str, max_bytes: int) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise UserFileError(f"{what} {path} is a folder: name a file")
    if not stat.S_ISREG(info.st_mode):
        kind = _KINDS.get(stat.S_IFMT(info.st_mode), "a special file")
        raise UserFileError(
            f"{what} {path} is not a regular file ({kind}): name a file saved on disk"
        )
    if info.st_size > max_bytes:
        raise UserFileError(_too_big(path, what, info.st_size, max_bytes))


def _too_big(path: Path, what: str, size: int, max_bytes: int) -> str:
    limit = max_bytes >> 20
    return f"{what} {path} is {size:,} bytes, over the {limit} MiB limit: name the right file"
