"""The one door into a run folder: every entry point that writes into a run goes through here.

A run folder (rlcore.runs.ownership: its marker `.rl-run`) records its kind: `rl` (made by `rl`, or
by a trainer, orchestrator or inference started alone), `sft` (`rl sft`, `sft`) or `eval`
(`evals`). An entry point that starts in a run (`open_run`) first checks everything, writing
nothing: the folder is a run of its own kind, or new or empty (never a user's folder, the
current one, home or a git work tree); no other process holds it in a way that conflicts
(the lock, below); no entry it writes or deletes is a link out of the run, and anything it
replaces wholesale is its own (marked by it, `mark_own`). Only then does it claim the folder
(the marker, kind recorded) and hold its lock. A refusal is a ConfigError naming the folder
and the fix, and leaves the folder exactly as it was.

A command that writes one thing a user names (`rl export --out`, `rl plot`, `rl tasks --out`,
`rl hf`, `rl init -o`) goes through `writing_into`: never through a link, and when the path is
inside a run, under that run's lock (shared) for the write, so never beside a running `rl`,
`rl sft` or `evals`.

Runs are found by `find_run` (a name under outputs/, or a path), read-only and before anything
is written.

The lock: one live launcher per run folder. `rl` holds an exclusive lock on its run's marker
(`.rl-run`) from its checks until it exits. A second `rl` given the same `output_dir` while the
first runs (another port, a second terminal, a `--clean` typed by mistake) is refused before it
clears or deletes anything. The kernel drops the lock when the process ends, however it ends, so
a crashed run never leaves a stale lock behind and a reused pid never blocks a folder.
Filesystems without locks (some network mounts) run without this guard.

A trainer or orchestrator started alone takes a shared lock on the same marker: components
started alone share a folder with each other (the researcher's workflow), never with a running
`rl`, in either order. `rl`'s own children carry LAUNCHER_ENV and take no lock: their launcher
holds it for them."""

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rlcore.config.base import RUNS_ROOT
from rlcore.errors import ConfigError
from rlcore.files.paths import user_path
from rlcore.files.readback import Damaged
from rlcore.processes import procs
from rlcore.runs import run_json
from rlcore.runs.ownership import (
    RUN_ENTRIES,
    RUN_MARKER,
    WEIGHTS_MARKER,
    check_claimable,
    check_writable,
    claim,
    owns_weights_folder,
    read_marker,
    read_run_id,
    remove_path,
    weights_marker,
)

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


# -- the door --------------------------------------------------------------------------------
KINDS = ("rl", "sft", "eval")
"""What a run folder holds: an RL run, a supervised fine-tuning run, or evaluations."""
EVAL_ENTRIES = (
    "eval.toml",
    "results.jsonl",
    "summary.json",
    "inference.toml",
    "inference.log",
    "server",
    "policy",
)
"""What `evals` writes directly inside its output folder (besides `step_<n>/` when watching)."""
_FOLDERS = (
    "configs",
    "logs",
    "rollouts",
    "weights",
    "checkpoints",
    "transfer",
    "state",
    "slurm",
    "server",
    "policy",
)
"""Entries that are folders written into: a link directly inside one is refused too (a log
appended through it, a checkpoint written through it would land outside the run)."""


@dataclass(frozen=True)
class Entry:
    """An entry point's claim on its run folder."""

    name: str
    """The command as a user types it (`rl`, `rl sft`, `trainer`, ...), named in refusals."""
    kind: str
    """The kind of run it makes and writes into (KINDS)."""
    lock: str
    """`exclusive` (it supervises the run: `rl`, `rl sft`, `evals`), or `join` (a component
    started alone: shared with other components alone, nothing under its launcher)."""
    writes: tuple[str, ...]
    """The entries it writes directly inside the folder; none may be a link."""
    replaces: tuple[str, ...] = ()
    """The entries it deletes and writes again: only when it marked them its own."""
    flag: str = "--output-dir"
    """The flag that picks the folder, named in the fix."""


RL = Entry("rl", "rl", "exclusive", RUN_ENTRIES)
RL_SFT = Entry("rl sft", "sft", "exclusive", RUN_ENTRIES)
SFT = Entry("sft", "sft", "join", RUN_ENTRIES)
TRAINER = Entry("trainer", "rl", "join", RUN_ENTRIES)
ORCHESTRATOR = Entry("orchestrator", "rl", "join", RUN_ENTRIES)
INFERENCE = Entry("inference", "rl", "join", RUN_ENTRIES)
EVALS = Entry("evals", "eval", "exclusive", EVAL_ENTRIES, replaces=("policy",))


def run_kind(root: Path) -> str | None:
    """The kind of the run in `root`: what its marker records; for a marker written before
    runs recorded it, what its files show (None when nothing shows it yet)."""
    kind = read_marker(root).get("kind")
    if kind in KINDS:
        return kind
    if (root / "configs" / "sft.toml").exists():
        return "sft"
    if (root / "eval.toml").exists():
        return "eval"
    made_by_rl = ("configs", "rollouts", "checkpoints", "weights", "run.json")
    return "rl" if any((root / name).exists() for name in made_by_rl) else None


def check_run(root: Path, entry: Entry, key: str = "output_dir") -> None:
    """Every refusal `open_run` gives, writing nothing (before a start, and in dry runs)."""
    run_id = read_run_id(root)
    if run_id is None:
        check_claimable(root, key)  # new or empty; else a ConfigError naming the folder
        return
    kind = run_kind(root)
    if kind is not None and kind != entry.kind:
        made = read_marker(root).get("entry")
        by = f" (made by `{made}`)" if isinstance(made, str) else ""
        raise ConfigError(
            f"{key} {str(root)!r} is an {kind} run{by}, not an {entry.kind} run: "
            f"`{entry.name}` writes only into {entry.kind} runs and never "
            f"mixes two kinds in one folder; nothing was changed. Pick another {entry.flag}, "
            "e.g. outputs/my-run"
        )
    check_writable(root, key)  # a run on a file system mounted read-only since
    if not (entry.lock == "join" and os.environ.get(LAUNCHER_ENV)):
        check_not_held(root, shared=entry.lock != "exclusive", what=key)
    for name in entry.writes + entry.replaces:
        check_no_link(root / name, run_id, key, entry)
    for name in entry.replaces:
        check_own(root / name, run_id, key, entry)


def open_run(root: Path, entry: Entry, key: str = "output_dir") -> str:
    """`check_run`, then claim `root` (a new or empty folder gets the marker, recording
    `entry`'s kind) and hold its lock as `entry` does; the run's id."""
    check_run(root, entry, key)
    run_id = claim(root, key, entry.kind, entry.name)
    hold(root, entry)
    return run_id


def hold(root: Path, entry: Entry) -> None:
    """Hold the run in `root` (marked) for the rest of this process's life, as `entry` does."""
    if entry.lock == "exclusive":
        hold_run(root)
    elif not os.environ.get(LAUNCHER_ENV):
        hold_run(root, shared=True)


def check_no_link(path: Path, run_id: str, key: str, entry: Entry) -> None:
    """A ConfigError when `path` (an entry of the run) is a link, or a folder directly holding
    one: a write through it would land outside the run. `weights` may link to this run's own
    policy folder (`weight_transfer.dir`, trainer.weights.place_weights)."""
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        if path.name == "weights" and owns_weights_folder(target, run_id):
            return
        links = [path]
    elif path.name in _FOLDERS and path.is_dir():
        links = sorted(p for p in path.iterdir() if p.is_symlink())
    else:
        return
    if links:
        shown = ", ".join(f"{p} -> {os.readlink(p)}" for p in links[:3])
        raise ConfigError(
            f"{key} {str(path.parent)!r}: {shown} is a "
            f"symbolic link: `{entry.name}` never writes or deletes through a link out of its "
            f"run; nothing was changed. Remove the link, or pick another {entry.flag}"
        )


def check_own(path: Path, run_id: str, key: str, entry: Entry) -> None:
    """A ConfigError when `path`, which `entry` deletes and writes again, exists and is not
    its own (`mark_own`)."""
    if path.exists() and not owns_weights_folder(path, run_id):
        raise ConfigError(
            f"{key} {str(path.parent)!r}: {path.name}/ was not made by this run's `{entry.name}` "
            f"(no {WEIGHTS_MARKER} marker naming run {run_id}), and `{entry.name}` replaces only "
            f"its own; nothing was changed. Move {path} away, or pick another {entry.flag}"
        )


def mark_own(folder: Path, run_id: str, run_root: Path) -> None:
    """Mark `folder` (made inside or for the run in `run_root`) as the run's own: only then
    may the run delete and replace it (`replace_own`)."""
    weights_marker(folder, run_id, run_root)


def replace_own(folder: Path, run_id: str) -> None:
    """Delete `folder` before it is written again, only if it is this run's own (`mark_own`);
    a ConfigError otherwise (a link, or someone else's folder)."""
    if not folder.exists() and not folder.is_symlink():
        return
    if folder.is_symlink() or not owns_weights_folder(folder, run_id):
        raise ConfigError(
            f"{folder} was not made by this run (no {WEIGHTS_MARKER} marker naming run "
            f"{run_id}): it is never deleted; move it away and start again"
        )
    remove_path(folder)


# -- one thing written where a user names it -----------------------------------------------------
def enclosing_run(path: Path) -> Path | None:
    """The run folder (its marker) that `path` is in or is, if any."""
    return next((p for p in (path, *path.parents) if read_run_id(p) is not None), None)


@contextmanager
def writing_into(path: Path, what: str, fix: str | None = None) -> Iterator[Path | None]:
    """For the block that writes `path` (a file or folder the user named with `what`): never
    through a link; inside a run, under its lock (shared) so never beside a running `rl`,
    `rl sft` or `evals` (a child of the run's launcher, LAUNCHER_ENV, writes under its
    launcher's lock). Yields the enclosing run, if any. `fix` replaces the refusal's advice."""
    if path.is_symlink():
        raise ConfigError(
            f"{what} {str(path)!r} is a symbolic link (to {os.readlink(path)}): nothing is "
            "written through one; nothing was changed. Remove the link, or give another path"
        )
    owner = enclosing_run(path)
    if owner is None or os.environ.get(LAUNCHER_ENV):
        yield owner
        return
    with locked(owner, what, shared=True, fix=fix):
        yield owner


# -- finding a run (read-only) -------------------------------------------------------------------
LEGACY_CONFIGS = ("rl", "trainer", "orchestrator", "inference")


def looks_like_run(folder: Path) -> bool:
    """A folder rl marked as a run, or one an older rl left (run.json or configs/); enough for
    reading it, never for deleting from it."""
    if not folder.is_dir():
        return False
    known = (RUN_MARKER, "run.json", *(f"configs/{c}.toml" for c in LEGACY_CONFIGS))
    return any((folder / name).exists() for name in known)


def is_plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and os.sep not in name and "/" not in name


def run_candidates(name: str, what: str = "RUN") -> list[Path]:
    """The folders a RUN argument may mean, as given (not resolved): a plain name is a run
    under outputs/, else a folder of that name here; anything else is a path."""
    user_path(name, what)  # an empty or unusable path (a name over 255 bytes) names `what`
    if is_plain_name(name):
        return [RUNS_ROOT / name, Path(name)]
    return [Path(name).expanduser()]


def find_run(name: str, what: str = "RUN") -> Path:
    """The run folder `name` means (`run_candidates`), absolute and resolved (rlcore.files.paths);
    taken only if it is a run, else a ConfigError naming `what` and the folders looked at."""
    candidates = run_candidates(name, what)
    for folder in candidates:
        if looks_like_run(folder):
            return user_path(folder, what)
    if len(candidates) == 2:
        found = f"neither {str(candidates[0])!r} nor {str(candidates[1])!r} is a run folder"
    else:
        found = f"{str(candidates[0])!r} is not a run folder"
    prefix = "" if what == "RUN" else f"{what}: "
    raise ConfigError(
        f"{prefix}no run {name!r}: {found}; `rl list` shows the runs under {RUNS_ROOT}/"
    )
