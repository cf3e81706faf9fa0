"""What a run owns, and the only way anything is deleted from one.

A folder is a run only if it carries the marker `.rl-run` (JSON with the run's id), written when
the folder is first used as an `output_dir` (by `rl`, or by a component started alone) and only
if it is new or empty. Deleting (`rl --clean`, `rl delete`) needs that marker, removes only the
entries a run creates (RUN_ENTRIES), never follows a symbolic link, and refuses the current
folder, its ancestors, home, `/` and a git work tree. The policy folders kept outside the run
(`weight_transfer.dir`, `rl-weights-<id>`) carry a marker of their own naming the run."""

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rlcore.errors import ConfigError
from rlcore.files.paths import nearest_existing
from rlcore.files.readback import MARKER, Damaged, read_object

RUN_MARKER = ".rl-run"
WEIGHTS_MARKER = ".rl-weights"
RUN_ENTRIES = (
    "configs",
    "logs",
    "rollouts",
    "weights",
    "checkpoints",
    "metrics.jsonl",
    "run.json",
    "admin_token",
    "slurm",
    "wandb",
    "plot.png",
    "transfer",
    "state",
    "samples",
    "evals",
)
"""What a run creates directly inside its folder; nothing else there is ever deleted."""
_TEMPORARY = re.compile(
    rf"\.(?:{'|'.join(re.escape(name) for name in RUN_ENTRIES)})\.tmp[0-9]+"
    rf"|\.{re.escape(RUN_MARKER)}\.tmp[0-9]+-[0-9a-f]{{8}}"
    r"|\.shared-probe-(?:[0-9]+(?:_[0-9]+)?|x)"
)
"""The temporary names the run itself writes beside its entries, matched whole: rlcore.files.atomic'
`.<entry>.tmp<pid>` of a RUN_ENTRIES entry, the marker's `..rl-run.tmp<pid>-<hex>` and the SLURM
shared-filesystem probe `.shared-probe-<job>` (never a user's `.bashrc.tmp1`)."""
RUN_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
"""A run id as a marker holds it (rl writes 16 hex digits)."""


def read_run_id(root: Path) -> str | None:
    """The run id in `root`'s marker; None when there is no readable marker or its id is not
    one rl writes."""
    run_id = read_marker(root).get("run_id")
    return run_id if isinstance(run_id, str) and RUN_ID.fullmatch(run_id) else None


def read_marker(root: Path) -> dict:
    """The marker's record (run_id, and since runs record it, kind and entry); {} when there is
    no readable marker: none, a link, not a regular file (a FIFO is never waited on), over
    its bound or not a JSON object (rlcore.files.readback)."""
    try:
        return read_object(root / RUN_MARKER, MARKER)
    except (FileNotFoundError, Damaged):
        return {}


def protected_reason(folder: Path) -> str | None:
    """Why `folder` must never be written as a run nor deleted; None if it may."""
    resolved = folder.resolve()
    cwd = Path.cwd().resolve()
    if resolved == Path(resolved.anchor):
        return "it is the filesystem root"
    if resolved == cwd:
        return "it is the current folder"
    if cwd.is_relative_to(resolved):
        return "it holds the current folder"
    if resolved == Path.home().resolve():
        return "it is the home folder"
    if (resolved / ".git").exists():
        return "it is a git work tree"
    return None


def _contents(folder: Path, limit: int = 5) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def claim(
    root: Path, key: str = "output_dir", kind: str | None = None, entry: str | None = None
) -> str:
    """Make sure `root` is a run folder and return its id: a run's folder as it is; a new or
    empty folder gets the marker (recording the run's `kind` and the `entry` point that made
    it, rlcore.runs.runguard); anything else (a file, a protected folder, a folder with other
    contents) is a ConfigError naming `key`. Entry points claim through rlcore.runs.runguard, which
    also checks the run's kind and holders."""
    run_id = read_run_id(root)
    if run_id is not None:
        return run_id
    if root.exists() and not root.is_dir():
        raise ConfigError(
            f"{key} = {str(root)!r} is a file, not a folder: pick another --output-dir"
        )
    reason = protected_reason(root) if root.exists() else None
    if reason is not None:
        raise ConfigError(
            f"{key} = {str(root)!r} cannot be a run folder ({reason}): use a folder of its "
            "own, e.g. --output-dir outputs/my-run"
        )
    if root.is_dir() and not _only_markers(root):
        raise ConfigError(
            f"{key} = {str(root)!r} is not empty and is not a run (no {RUN_MARKER} marker; "
            f"found: {_contents(root)}): rl writes only into new or empty folders and its own "
            "runs; pick another --output-dir, e.g. outputs/my-run"
        )
    _check_creatable(root, key)
    check_writable(root, key)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"{key} = {str(root)!r} cannot be created ({err.strerror or err}): pick another "
            "--output-dir"
        ) from None
    return _write_marker(root, kind, entry)


def _check_creatable(root: Path, key: str) -> None:
    """A ConfigError naming `key` when a file stands where a folder above `root` must be."""
    parent = nearest_existing(root.parent, links=True)
    if not parent.is_dir():
        raise ConfigError(
            f"{key} = {str(root)!r} cannot be created: {str(parent)!r} is a file, not a "
            "folder; pick another --output-dir"
        )


def check_writable(root: Path, key: str = "output_dir") -> None:
    """A ConfigError naming `key` when `root`, or the folder above it that would hold it, may
    not be written by this process (a read-only file system, or no permission)."""
    where = nearest_existing(root)
    if not where.is_dir() or os.access(where, os.W_OK | os.X_OK):
        return
    try:
        read_only = bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    why = "its file system is mounted read-only" if read_only else "permission denied"
    shown = "it" if where == root else f"{str(where)!r}, which would hold it,"
    raise ConfigError(
        f"{key} = {str(root)!r} cannot be written: {shown} is not writable ({why}); pick "
        "another --output-dir, e.g. outputs/my-run, or make it writable"
    )


def check_claimable(root: Path, key: str = "output_dir") -> None:
    """`claim`'s checks without writing anything (for dry runs)."""
    if read_run_id(root) is not None:
        return
    if not root.exists():
        _check_creatable(root, key)
        check_writable(root, key)
        return
    if not root.is_dir():
        raise ConfigError(
            f"{key} = {str(root)!r} is a file, not a folder: pick another --output-dir"
        )
    reason = protected_reason(root)
    if reason is not None or not _only_markers(root):
        claim(root, key)  # raises the same message a real start would
    check_writable(root, key)


def _only_markers(folder: Path) -> bool:
    """Empty but for a marker (or one being written by a process claiming it right now)."""
    return all(p.name.startswith((RUN_MARKER, f".{RUN_MARKER}.tmp")) for p in folder.iterdir())


def _write_marker(root: Path, kind: str | None = None, entry: str | None = None) -> str:
    """Create the marker exclusively: of two processes claiming one folder, both end with the
    winner's id. It is never rewritten (its inode carries the run's lock, rlcore.runs.runguard)."""
    root.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:16]
    record = {"run_id": run_id, "created": time.time(), "folder": str(root.resolve())}
    record.update({k: v for k, v in (("kind", kind), ("entry", entry)) if v is not None})
    tmp = root / f".{RUN_MARKER}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps(record) + "\n")
    try:
        os.link(tmp, root / RUN_MARKER)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    winner = read_run_id(root)
    assert winner is not None, root
    return winner


def verified_run(folder: Path, what: str) -> str:
    """The run id of `folder` if it may be deleted from; else a ConfigError saying what was
    found there."""
    if folder.is_symlink():
        raise ConfigError(
            f"{what} {str(folder)!r} is a symbolic link: give the run folder it points to"
        )
    if not folder.is_dir():
        raise ConfigError(f"{what} {str(folder)!r} is not a folder")
    reason = protected_reason(folder)
    if reason is not None:
        raise ConfigError(f"{what} {str(folder)!r} is never deleted from: {reason}")
    run_id = read_run_id(folder)
    if run_id is None:
        found = _contents(folder) or "nothing"
        raise ConfigError(
            f"{what} {str(folder)!r} is not a run (no {RUN_MARKER} marker written by rl; "
            f"found: {found}): nothing deleted"
        )
    return run_id


@dataclass
class Removal:
    """What removing a run's files did."""

    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    """Entries that a run does not create (a user's), left in place."""
    nested: dict[str, list[Path]] = field(default_factory=dict)
    """Entries the run created that hold another run (its own marker): entry name -> the
    folders of the runs inside it. They are left in place, and so is the marker."""

    def kept_lines(self, root: Path, again: str) -> list[str]:
        """What was kept and why, and what the user can do (`again`: the command that finishes
        the removal once the nested runs are gone)."""
        lines = []
        for name, runs in self.nested.items():
            inner = ", ".join(str(r) for r in runs)
            lines.append(
                f"kept {root / name}: rl made it for this run, but it now holds another run "
                f"({inner}, with its own {RUN_MARKER}), which rl deletes only when named; "
                f"`rl delete {runs[0]}` (or move it out), then `{again}` removes the rest"
            )
        if self.kept:
            lines.append(
                f"kept {', '.join(self.kept)} in {root}: not made by rl (left for "
                "you to keep or remove)"
            )
        return lines


def remove_run_files(root: Path, keep_marker: bool) -> Removal:
    """Delete what the run in `root` created (its verified marker is required by the caller):
    RUN_ENTRIES and their temporaries, links removed and never followed, the run's own policy
    folder outside it (found by its marker); everything else is kept and listed. An entry
    that holds another run is kept with the marker, so that deleting the run again after that
    one finishes the job."""
    run_id = read_run_id(root)
    assert run_id is not None, root
    result = Removal()
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name == RUN_MARKER:
            continue
        if name not in RUN_ENTRIES and not _TEMPORARY.fullmatch(name):
            result.kept.append(name)
            continue
        if name == "weights" and entry.is_symlink():
            remove_weights_folder(entry, run_id, root)
        inner = _runs_inside(entry)
        if inner:
            result.nested[name] = inner
            continue
        remove_path(entry)
        result.removed.append(name)
    if not keep_marker and not result.nested:
        (root / RUN_MARKER).unlink()
        if not result.kept:
            root.rmdir()
    return result


def _runs_inside(entry: Path) -> list[Path]:
    """The folders under `entry` (a folder, not a link; links inside are not followed) that
    hold a run marker."""
    if entry.is_symlink() or not entry.is_dir():
        return []
    return [Path(folder) for folder, _, files in os.walk(entry) if RUN_MARKER in files]


def remove_path(path: Path) -> None:
    """Delete a file, a link (never what it points to) or a folder tree (links inside it are
    unlinked, not followed)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def weights_marker(folder: Path, run_id: str, run_root: Path) -> None:
    """Mark `folder` (a `rl-weights-<id>` folder outside the run) as the run's own."""
    record = {"run_id": run_id, "run_folder": str(run_root.resolve())}
    (folder / WEIGHTS_MARKER).write_text(json.dumps(record) + "\n")


def weights_record(folder: Path) -> dict:
    """The record in `folder`'s weights marker; {} when there is no readable one (read back
    bounded: a link, a FIFO or a huge file is no marker)."""
    if folder.is_symlink():
        return {}
    try:
        return read_object(folder / WEIGHTS_MARKER, MARKER)
    except (FileNotFoundError, Damaged):
        return {}


def owns_weights_folder(folder: Path, run_id: str) -> bool:
    return weights_record(folder).get("run_id") == run_id


def remove_weights_folder(link: Path, run_id: str, run_root: Path) -> bool:
    """Delete the folder `link` points to if it is this run's policy folder: outside the run
    and not holding it (a link to the run itself, a folder in it or one above it is only
    unlinked), with a marker naming this run and this very folder (a copied run's link to the
    original's folder is only unlinked); True if deleted."""
    target, root = Path(os.path.realpath(link)), run_root.resolve()
    if target.is_relative_to(root) or root.is_relative_to(target):
        return False
    if not target.is_dir() or protected_reason(target) or not owns_weights_folder(target, run_id):
        return False
    if weights_record(target).get("run_folder") != str(root):
        return False
    shutil.rmtree(target)
    return True
