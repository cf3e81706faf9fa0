"""The runs `rl view` may show: those at or below the folders named on the command line (links
are not followed into other folders), each addressed by an id the server derives from its path.
A request names a run by that id, or by a path relative to one of the folders, checked by
launcher.view.safe; nothing else reaches the disk."""

import hashlib
import time
from pathlib import Path

from launcher.commands.runs import find_runs
from launcher.view import safe
from launcher.view.data import RunData
from rlcore.rundir import RunDir
from rlcore.runguard import looks_like_run

RESCAN_S = 5.0
"""How long a listing of the runs is reused before the folders are looked at again."""


def run_id(root: Path) -> str:
    return hashlib.sha256(str(root).encode()).hexdigest()[:12]


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
            for run in [*find_runs(folder), *evals_runs(folder)]:
                rid = run_id(run.root)
                found.setdefault(rid, self.runs.get(rid) or RunData(run.root, folder))
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


def evals_runs(folder: Path, depth: int = 3):
    """`evals` output folders not marked as runs by an older version: results.jsonl or
    step_<n>/summary.json beside eval.toml. Marked ones are found by find_runs."""
    if depth < 0 or not folder.is_dir() or folder.is_symlink() or looks_like_run(folder):
        return []
    if (folder / "eval.toml").is_file():
        return [RunDir(folder)]
    found = []
    for child in sorted(c for c in folder.iterdir() if c.is_dir() and not c.is_symlink()):
        if not child.name.startswith("."):
            found += evals_runs(child, depth - 1)
    return found
