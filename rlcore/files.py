"""Atomic writes, the one way every process writes a file or folder another process reads:
readers see the old version or the complete new one, never a part."""

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    """Write `text` to `path` through a temporary sibling and a rename; `mode` sets permissions
    before the file appears."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    if mode is not None:
        tmp.chmod(mode)
    tmp.replace(path)


@contextlib.contextmanager
def atomic_folder(final: Path, file_mode: int | None = 0o644) -> Iterator[Path]:
    """Yield an empty temporary sibling of `final` to fill; when the block ends without an
    error its files get `file_mode` (safetensors files come out owner-only) and it replaces
    `final` by a rename. On an error the temporary folder is removed and `final` is untouched."""
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if file_mode is not None:
        for path in tmp.iterdir():
            if path.is_file():
                path.chmod(file_mode)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


def remove_stale_tmp(final: Path) -> None:
    """Delete temporary siblings of `final` left by a writer that was killed."""
    for stale in final.parent.glob(f".{final.name}.tmp*"):
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink()
