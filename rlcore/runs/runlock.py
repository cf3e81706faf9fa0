"""One live launcher per run folder.

`rl` holds an exclusive lock on its run's marker (`.rl-run`, rlcore.runs.ownership) from its checks
until it exits. A second `rl` given the same `output_dir` while the first runs (another port, a
second terminal, a `--clean` typed by mistake) is refused before it clears or deletes anything.
The kernel drops the lock when the process ends, however it ends, so a crashed run never
leaves a stale lock behind and a reused pid never blocks a folder. Filesystems without locks
(some network mounts) run without this guard.

A trainer or orchestrator started alone takes a shared lock on the same marker: components
started alone share a folder with each other (the researcher's workflow), never with a running
`rl`, in either order. `rl`'s own children carry LAUNCHER_ENV and take no lock: their launcher
holds it for them."""

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlcore.errors import ConfigError
from rlcore.files.readback import Damaged
from rlcore.processes import procs
from rlcore.runs import run_json
from rlcore.runs.ownership import RUN_MARKER

LAUNCHER_ENV = "RL_LAUNCHER_PID"
"""Set by `rl` in its components' environment: the launcher holds their run's lock."""

_held: dict[Path, int] = {}
"""Run folders this process holds, and the marker's open descriptor (kept open to hold)."""


def hold_run(root: Path, shared: bool = False) -> None:
    """Lock the run in `root` (it must carry its marker) for the rest of this process's life,
    exclusively (`rl`) or `shared` (a component alone); a ConfigError naming the folder and
    the holder when a conflicting lock is held."""
    key = root.resolve()
    if key not in _held:
        fd = _lock(root, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        if fd is not None:
            _held[key] = fd


def join_run(root: Path) -> None:
    """A component's part: nothing under `rl` (it holds the lock), else a shared lock."""
    if not os.environ.get(LAUNCHER_ENV):
        hold_run(root, shared=True)


def check_not_held(root: Path, shared: bool = False, what: str = "output_dir") -> None:
    """`hold_run`'s refusal without keeping the lock (checks before a start, dry runs): probed
    exclusively, so any holder (an `rl`, or a trainer or orchestrator started alone) is
    reported, as an exclusive start would be refused by it; `shared`, only an exclusive holder.
    A folder this process holds already passes."""
    marker = root / RUN_MARKER
    if root.resolve() in _held or not marker.is_file() or marker.is_symlink():
        return
    fd = _lock(root, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, what)
    if fd is not None:
        os.close(fd)


@contextmanager
def locked(
    root: Path, what: str = "output_dir", shared: bool = False, fix: str | None = None
) -> Iterator[None]:
    """Hold the run in `root` while the body runs, then let go: exclusively (`rl delete`: a
    ConfigError naming `what`, the folder and every holder when anyone else holds it) or
    `shared` (`rl export` into a run: refused only beside a running `rl`); `fix` replaces the
    refusal's advice."""
    fd = _lock(root, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, what, fix)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _lock(
    root: Path, operation: int, what: str = "output_dir", fix: str | None = None
) -> int | None:
    """The marker's descriptor, locked with `operation`; None where the filesystem has no
    locks; a ConfigError when another process holds a conflicting lock."""
    marker = root / RUN_MARKER
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise ConfigError(
            f"{what} {str(root)!r}: its run marker {RUN_MARKER} cannot be opened "
            f"({err.strerror}); was the folder deleted or replaced while this started? Start "
            "again, or pick another --output-dir"
        ) from None
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(in_use_message(root, what, fix)) from None
    except OSError:
        os.close(fd)  # no locks on this filesystem
        return None
    return fd


def in_use_message(root: Path, what: str = "output_dir", fix: str | None = None) -> str:
    """Who holds the run in `root` (every holder, shared ones included) and what to do (`fix`,
    when given)."""
    holders = lock_holders(root)
    if holders:
        by = "; ".join(holders)
    else:
        by = f"another rl{holder(root)} or a trainer or orchestrator started alone there"
    if fix is not None:
        pass
    elif what == "output_dir":
        fix = (
            f"Wait for it to finish, stop it (`rl stop {root}` for an rl), or pick another "
            "--output-dir"
        )
    else:
        fix = (
            f"Stop it first (`rl stop {root}` for an rl; a trainer or orchestrator started "
            "alone: end it, e.g. Ctrl-C or `kill PID`), then try again"
        )
    return f"{what} {str(root)!r} is in use by {by}: nothing was changed. {fix}"


def lock_holders(root: Path) -> list[str]:
    """'pid N (`command`, exclusive|shared lock)' for every process holding the lock on
    `root`'s marker: the processes that have the marker open (psutil) while its lock is held,
    the lock's kind probed (rlcore.processes.procs.lock_mode); empty when nobody holds it or where
    that cannot be read."""
    marker = root / RUN_MARKER
    holding = procs.openers(marker)
    if not holding:
        return []
    mode = procs.lock_mode(marker)
    if mode not in ("exclusive", "shared"):
        return []
    return [f"pid {p.pid} ({procs.command_of(p)}, {mode} lock)" for p in holding]


def holder(root: Path) -> str:
    """' (pid N, status S)' from run.json when the launcher it records is proved to run this
    folder (rlcore.processes.procs.verify), else ''."""
    try:
        state = run_json.read(root / "run.json", root)
        record = state.identities[procs.LAUNCHER] if state else None
        status = state.status or "?" if state else "?"
    except (Damaged, OSError, KeyError):
        return ""
    if record is None:
        return ""
    found = procs.verify(record, "this run's launcher", lock=root / RUN_MARKER)
    return "" if isinstance(found, str) else f" (pid {found.pid}, status {status})"
