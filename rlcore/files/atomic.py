"""Atomic, durable writes, the one way every process writes a file or folder another process
reads: readers see the old version or the complete new one, never a part. Data reaches the
disk (fsync) before the rename or marker that vouches for it, and a failed write leaves no
temporary behind."""

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from rlcore.files.disk_full import naming


def fsync_path(path: Path) -> None:
    """Flush one file's or folder's data and metadata to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """fsync every file and folder under `folder` (links are not followed), deepest first."""
    for parent, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            path = Path(parent, name)
            if not path.is_symlink():
                fsync_path(path)
        for name in dirs:
            if not Path(parent, name).is_symlink():
                fsync_path(Path(parent, name))
    fsync_path(folder)


def atomic_write_text(path: Path, text: str, mode: int | None = None, sync: bool = True) -> None:
    """Write `text` to `path` through a temporary sibling, fsync'd, then renamed. `mode` (None:
    the umask's default) is the file's from its creation on, so an owner-only file is never
    readable by others, not even while it is written. `sync=False`: no fsync (live state that
    nobody needs after a crash, written often)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        with naming(path):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
                handle.flush()
                if sync:
                    os.fsync(handle.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_path(path.parent)


def append_line(path: Path, line: str) -> None:
    """Append one line; a write that fails part-way (a full disk) is cut back off, so the file
    never ends in half a line."""
    with naming(path), path.open("ab") as handle:
        start = handle.tell()
        try:
            handle.write((line + "\n").encode())
            handle.flush()
        except BaseException:
            handle.truncate(start)
            raise


@contextlib.contextmanager
def atomic_folder(final: Path, file_mode: int | None = 0o644) -> Iterator[Path]:
    """Yield an empty temporary sibling of `final` to fill; when the block ends without an
    error its files get `file_mode` (safetensors files come out owner-only), everything is
    fsync'd, and it replaces `final` by a rename. On an error the temporary folder is removed
    and `final` is untouched."""
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with naming(final):
            yield tmp
        if file_mode is not None:
            for path in tmp.iterdir():
                if path.is_file() and not path.is_symlink():
                    path.chmod(file_mode)
        fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.is_symlink() or final.is_file():
        final.unlink()
    else:
        shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    fsync_path(final.parent)


def remove_stale_tmp(final: Path) -> None:
    """Delete temporary siblings of `final` left by a writer that was killed."""
    for stale in final.parent.glob(f".{final.name}.tmp*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
