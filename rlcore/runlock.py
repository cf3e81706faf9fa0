"""One live launcher per run folder.

`rl` holds an exclusive lock on its run's marker (`.rl-run`, rlcore.ownership) from its checks
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
import json
import os
from pathlib import Path

from rlcore.errors import ConfigError
from rlcore.ownership import RUN_MARKER

LAUNCHER_ENV = "RL_LAUNCHER_PID"
"""Set by `rl` in its components' environment: the launcher holds their run's lock."""

_held: dict[Path, int] = {}
"""Run folders this process holds, and the marker's open descriptor (kept open to hold)."""


def hold_run(root: Path, shared: bool = False) -> None:
    """Lock the run in `root` (it must carry its marker) for the rest of this process's life,
    exclusively (`rl`) or `shared` (a component alone); a ConfigError naming the folder and
    the holder when a conflicting lock is held."""
    key = root.resolve()
    if key in _held:
        return
    fd = os.open(root / RUN_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(in_use_message(root)) from None
    except OSError:
        os.close(fd)  # no locks on this filesystem
        return
    _held[key] = fd


def join_run(root: Path) -> None:
    """A component's part: nothing under `rl` (it holds the lock), else a shared lock."""
    if not os.environ.get(LAUNCHER_ENV):
        hold_run(root, shared=True)


def check_not_held(root: Path) -> None:
    """`hold_run`'s refusal without keeping the lock (dry runs)."""
    marker = root / RUN_MARKER
    if marker.is_symlink() or not marker.is_file():
        return
    fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ConfigError(in_use_message(root)) from None
    except OSError:
        pass
    finally:
        os.close(fd)


def in_use_message(root: Path) -> str:
    return (
        f"output_dir {str(root)!r} is in use by another rl{holder(root)} or by a trainer or "
        f"orchestrator started alone there: nothing was changed. Wait for it to finish, stop "
        f"it (`rl stop {root}` for an rl), or pick another --output-dir"
    )


def holder(root: Path) -> str:
    """' (pid N, status S)' from run.json when the launcher it names is alive, else ''."""
    try:
        state = json.loads((root / "run.json").read_text())
        pid = state["launcher_pid"]
    except (OSError, ValueError, TypeError, KeyError):
        return ""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return ""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return ""
    except PermissionError:
        pass  # alive, another user's
    return f" (pid {pid}, status {state.get('status', '?')})"
