"""A full disk, said as one message: which file could not be written, how much space its file
system has, and what to do. Never a traceback, and an exit code of its own
(`DISK_FULL_EXIT_CODE`) that tells `rl` and `rl sft` not to restart a component the disk
stopped: the component's own message may not have fit in its log.

A write's OSError (ENOSPC) names no file, and torch's and safetensors' writers wrap it in
errors of their own; the writers of rlcore.files.atomic and the trainer's checkpoints wrap what they
write in `naming(path)`, so the error that reaches an entry point carries the path.

Light module: the standard library only."""

import contextlib
import errno
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from rlcore.files.paths import nearest_existing

DISK_FULL_EXIT_CODE = 74
"""sysexits' EX_IOERR: a component stopped because a write found its disk full."""
NOT_WRITE_ERRORS = (KeyboardInterrupt, SystemExit, GeneratorExit)


class DiskFullError(OSError):
    """A write that found the disk full, naming what it was writing."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def is_disk_full(err: BaseException | None) -> bool:
    """Whether `err`, or an error it wraps, is a full disk (ENOSPC); never an exit or an
    interrupt, even one raised while handling a full disk."""
    return not isinstance(err, NOT_WRITE_ERRORS) and _full_disk_error(err) is not None


def _full_disk_error(err: BaseException | None) -> BaseException | None:
    """The first error in `err`'s chain that is a full disk: one that names its file first."""
    found = None
    while err is not None:
        if isinstance(err, OSError) and err.errno == errno.ENOSPC and err.filename:
            return err
        if found is None and (
            (isinstance(err, OSError) and err.errno == errno.ENOSPC)
            or "No space left on device" in str(err)
        ):
            found = err
        err = err.__cause__ or err.__context__
    return found


NEARLY_FULL_BYTES = 4 << 20
"""A write that failed on a file system with less room than this met a full disk, whatever its
error says: torch's zip writer reports ENOSPC as `unexpected pos 704 vs 598`, errno lost (the
part it wrote still holds the space while the error travels)."""


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """A full disk met inside the block is raised as a DiskFullError naming `path` (the
    original error as its cause); other errors pass unchanged."""
    try:
        yield
    except BaseException as err:
        if isinstance(err, (DiskFullError, *NOT_WRITE_ERRORS)):
            raise
        if not is_disk_full(err) and free_bytes(path) >= NEARLY_FULL_BYTES:
            raise
        raise DiskFullError(path) from err


def free_bytes(path: Path) -> int:
    """The room left to this user on the file system holding `path` (unknown: a lot)."""
    try:
        return shutil.disk_usage(nearest_existing(path)).free
    except OSError:
        return 1 << 62


def space_text(path: Path) -> str:
    """'12 KiB free of 20.0 MiB on /mnt/data': the file system holding `path` (or the nearest
    folder above it that exists)."""
    where = nearest_existing(path)
    mount = where
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        usage = shutil.disk_usage(where)
    except OSError:
        return f"its file system's free space unknown ({where})"
    return f"{size_text(usage.free)} free of {size_text(usage.total)} on {mount}"


def size_text(num_bytes: int) -> str:
    value, unit = float(num_bytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{num_bytes} B" if unit == "B" else f"{value:.1f} {unit}"


def disk_full_text(err: BaseException, folder: Path | None) -> str:
    """'the disk is full: writing FILE failed (SPACE)', FILE the path the error carries; else
    'a write into FOLDER failed' (`folder`: where the process writes, None: unknown)."""
    full = _full_disk_error(err)
    named = getattr(full, "filename", None)
    if isinstance(named, str):
        return f"the disk is full: writing {named} failed ({space_text(Path(named))})"
    if folder is not None:
        return f"the disk is full: a write into {folder} failed ({space_text(folder)})"
    return f"the disk is full: a write failed (the current folder has {space_text(Path.cwd())})"


GENERIC_ADVICE = "free space there (or point the output at another disk) and run it again"
CKPT_ADVICE = (
    "a checkpoint or weights folder left incomplete is never loaded; free space (or keep fewer "
    "checkpoints: --ckpt.keep) and resume with --ckpt.resume-step -1"
)


def exit_disk_full(prog: str, err: BaseException, folder: Path | None, advice: str) -> NoReturn:
    """Print `prog: error: <disk_full_text>; <advice>` and exit DISK_FULL_EXIT_CODE. The print
    is skipped where it does not fit: stderr may be a log on the full disk (`rl` and `rl sft`
    then say it from the exit code)."""
    with contextlib.suppress(OSError, ValueError):
        print(
            f"{prog}: error: {disk_full_text(err, folder)}; {advice}", file=sys.stderr, flush=True
        )
    sys.exit(DISK_FULL_EXIT_CODE)


def stopped_text(component: str, folder: Path, log: Path) -> str:
    """What `rl` and `rl sft` say when a component exits DISK_FULL_EXIT_CODE."""
    return (
        f"{component} stopped: the disk is full ({space_text(folder)}); the end of {log} names "
        "the file it could not write, where there was room for it. Not restarting: free space "
        "(or keep fewer checkpoints: --ckpt.keep) and resume with --ckpt.resume-step -1"
    )
