"""What a folder holds on disk: the bytes of its regular files, links not followed. `rl status`,
`rl list`, `rl delete` and `rl view` say a run's size with it, and the launcher records a
finished run's."""

import os
from pathlib import Path


def folder_bytes(root: Path) -> int:
    """Bytes of the regular files inside `root` (links are not followed). One `scandir` per
    folder (a run of 10,000 archived steps is read in tens of milliseconds); an entry removed
    while it is read (a live run pruning its steps) is skipped."""
    total, folders = 0, [root]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def disk_use_gib(root: Path) -> float:
    """`folder_bytes(root)` in GiB."""
    return folder_bytes(root) / 2**30
