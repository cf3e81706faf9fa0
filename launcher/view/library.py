"""The runs `rl view` may show: those at or below the folders named on the command line (links
are not followed into other folders), each addressed by an id the server derives from its path.
A request names a run by that id, or by a path relative to one of the folders, checked by
launcher.view.safe; nothing else reaches the disk."""

import hashlib
import os
import time
from pathlib import Path

from launcher.view import safe
from launcher.view.data import RunData
from rlcore.runs.ownership import RUN_MARKER
from rlcore.runs.runguard import LEGACY_CONFIGS

RESCAN_S = 5.0
"""How long a listing of the runs is reused before the folders are looked at again."""


def run_id(root: Path) -> str:
    """A run's id: from its path's bytes (a name need not be UTF-8)."""
    return hashlib.sha256(os.fsencode(root)).hexdigest()[:12]


class Library:
    """The folders given, the runs found in them by id, and each run's cached readers."""

    def __init__(self, folders: list[Path]):
        self.folders = [f.resolve() for f in folders]
        self.runs: dict[str, RunData] = {}
        self.scanned = -RESCAN_S

    def scan(self) -> dict[str, RunData]:
        """Every run under the folders (rescanned at most every RESCAN_S)."""
        if time.monotonic() - self.scanned < RESCAN_S:
            return self.runs
        found: dict[str, RunData] = {}
        for folder in self.folders:
            for root in find_runs(folder):
                rid = run_id(root)
                found.setdefault(rid, self.runs.get(rid) or RunData(root, folder))
        self.runs, self.scanned = found, time.monotonic()
        return found

    def get(self, rid: str) -> RunData | None:
        return self.scan().get(rid) or (self.rescan().get(rid))

    def rescan(self) -> dict[str, RunData]:
        self.scanned = -RESCAN_S
        return self.scan()

    def at(self, relative: str) -> RunData:
        """The run at `relative` below one of the folders; safe.Refused for a path that
        escapes, safe.Missing where there is no run."""
        parts = safe.check_relative(relative)
        for folder in self.folders:
            try:
                real = safe.inside(folder, *parts, kind="dir")
            except safe.Missing:
                continue
            found = self.get(run_id(real))
            if found is not None:
                return found
            raise safe.Missing(f"{relative} in {folder} is not a run folder")
        raise safe.Missing(f"no folder {relative!r} in {', '.join(map(str, self.folders))}")


RUN_ENTRIES = (RUN_MARKER, "run.json", *(f"configs/{c}.toml" for c in LEGACY_CONFIGS))
"""Any of these makes a folder a run to show (rlcore.runs.runguard.looks_like_run's rule)."""
MAX_FOLDERS = 10_000
"""Folders looked into for runs, in all (a folder of runs holds tens to thousands)."""


def find_runs(folder: Path, depth: int = 3) -> list[Path]:
    """Run folders at or below `folder` (not inside another run; links not followed): those
    rl marked or an older rl left (RUN_ENTRIES), and `evals` output folders (eval.toml beside
    their results). A folder that cannot be listed is passed over; one that holds a run entry
    is a run however damaged it is (its page says what is wrong)."""
    found, todo, seen = [], [(folder, depth)], 0
    while todo and seen < MAX_FOLDERS:
        current, left = todo.pop()
        seen += 1
        if is_run(current):
            found.append(current)
            continue
        if left == 0:
            continue
        try:
            with os.scandir(current) as entries:
                children = [
                    Path(e.path)
                    for e in entries
                    if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
                ]
        except OSError:
            continue
        todo += [(child, left - 1) for child in sorted(children, reverse=True)]
    return sorted(found)


def is_run(folder: Path) -> bool:
    for name in (*RUN_ENTRIES, "eval.toml"):
        try:
            os.lstat(folder / name)
            return True
        except OSError:
            continue
    return False
