"""Which process a recorded pid is: identity records, and the one proof that a pid still names
the process that was recorded.

A pid alone names a process only while that process lives: afterwards the kernel hands the
number to any new process. So every process the launcher starts or is (`rl` itself, each
component, the `sft` child) is recorded in run.json (under IDENTITIES) as an identity: its pid,
its host, its start time (`psutil.Process.create_time()`, seconds since the epoch) and a
fingerprint of its command line (a hash, so that a secret passed on the command line is never
written). `verify` proves that a record still names that very process, and anything that acts
on a recorded pid (`rl stop` signals it; `rl status` and `rl list` report it as the run's) acts
only on what `verify` returned, never on the bare number.

The launcher's record is proved one step further: it must hold the run's lock (the exclusive
`flock` on the run's marker, rlcore.runs.runguard), so a launcher that is alive but no longer runs
this folder (the folder was deleted and claimed again) is not taken for the run's.

A record from another host cannot be checked here; a run.json without records (written by an
older rl) is unverifiable, and nothing is done to the pids it names.
"""

import fcntl
import hashlib
import os
import socket
from datetime import datetime
from pathlib import Path
from typing import Any, TypeGuard

import psutil

from rlcore.secrets import redact_command

IDENTITIES = "identities"
"""The run.json key: process name ('launcher' for rl itself, or a component) -> its identity."""
LAUNCHER = "launcher"
START_TOLERANCE_S = 0.01
"""How far two readings of one process's start time may differ: the kernel keeps it in clock
ticks (1/100 s), and psutil turns it into seconds with the boot time."""
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "pid": int,
    "host": str,
    "create_time": (int, float),
    "cmdline_sha256": str,
}

MAX_PID = 2**22
"""Linux's largest pid (`/proc/sys/kernel/pid_max` cannot be set above it)."""


def is_pid(value: object) -> TypeGuard[int]:
    """A pid as read back from a file: a positive integer a process can have."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_PID


def fingerprint(cmdline: list[str]) -> str:
    """A short hash of a command line (its arguments joined by NUL)."""
    joined = "\0".join(cmdline).encode(errors="surrogateescape")
    return hashlib.sha256(joined).hexdigest()[:16]


def identity(pid: int | None = None) -> dict[str, Any] | None:
    """The identity record of `pid` (default: this process); None when it has already gone."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            started, cmdline = proc.create_time(), proc.cmdline()
    except psutil.Error:
        return None
    return {
        "pid": proc.pid,
        "host": socket.gethostname(),
        "create_time": started,
        "cmdline_sha256": fingerprint(cmdline),
    }


def started(pid: int) -> float | None:
    """When `pid` started, in seconds since the epoch (as `identity` records it); None when
    there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def same_start(a: float | None, b: object) -> bool:
    """Whether two readings of a start time (`started`, or a recorded one) are one process's."""
    return isinstance(a, float) and isinstance(b, (int, float)) and abs(a - b) <= START_TOLERANCE_S


def running(process: psutil.Process) -> bool:
    """Whether `process` still runs: not gone, its pid not taken by another process since, and
    not a zombie. A zombie has ended (it exited and only waits for its parent to read its exit
    status): it runs nothing and holds no lock, so whoever waits for a process to end (`rl
    stop`, a component's shutdown) is done, and nothing counts it as a live run or child. One
    that may not be inspected (another user's) counts as running."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.AccessDenied:
        return True
    except psutil.Error:
        return False


def pid_alive(pid: object) -> bool:
    """Whether `pid` (as read back from a file: anything) names a running process, by the rule
    of `running` (a zombie has ended)."""
    if not is_pid(pid):
        return False
    try:
        process = psutil.Process(pid)
    except psutil.AccessDenied:
        return True
    except psutil.Error:
        return False
    return running(process)


def is_stopped(pid: int) -> bool:
    """Whether `pid` is stopped (SIGSTOP, or held by a tracer); False when it has gone."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def runnable_threads() -> int | None:
    """Threads runnable on this machine now, the caller's included: /proc/stat's
    `procs_running` (what psutil does not give); None where it cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as stat:
            for line in stat:
                if line.startswith("procs_running "):
                    value = line.split()[1]
                    return int(value) if value.isdigit() else None
    except OSError:
        return None
    return None


def high_water_bytes(pid: int) -> int:
    """How far a process's resident peak (the kernel's VmHWM) lies above its resident size now
    (VmRSS), bytes (what psutil does not give); 0 where /proc does not say."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            text = status.read(1 << 16)
    except OSError:
        return 0
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS") and value.strip().endswith("kB"):
            digits = value.strip()[:-2].strip()
            fields[name] = int(digits) * 1024 if digits.isdigit() else 0
    return max(fields.get("VmHWM", 0) - fields.get("VmRSS", 0), 0)


def available_memory() -> int | None:
    """The memory this machine can give new work without swapping, in bytes (the kernel's
    MemAvailable); None where it cannot be read."""
    try:
        return psutil.virtual_memory().available
    except (OSError, psutil.Error):
        return None


def own_mappings() -> list[tuple[str, str, str]]:
    """This process's memory mappings, each (address range `start-end` in hex, permissions such
    as `r-xp`, the mapped file's path or a pseudo-name)."""
    return [(m.addr, m.perms, m.path) for m in psutil.Process().memory_maps(grouped=False)]


def is_record(record: object) -> TypeGuard[dict[str, Any]]:
    """Whether `record` (as read from run.json: anything) is a complete identity record."""
    if not isinstance(record, dict):
        return False
    for key, kinds in _FIELDS.items():
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, kinds):
            return False
    return record["pid"] > 0


def verify(record: object, what: str, lock: Path | None = None) -> psutil.Process | str:
    """The live process `record` names, proved to be it: alive (not a zombie), started when
    the record says (within START_TOLERANCE_S) and running the recorded command line; with
    `lock` (a run's marker file, `.rl-run`), also holding that run's exclusive lock. Otherwise the
    reason, one clause that names the pid and says what `what` (e.g. "this run's launcher") is
    not."""
    if not is_record(record):
        return f"no identity of {what} is recorded (run.json written by an older rl?)"
    pid, host = record["pid"], record["host"]
    here = socket.gethostname()
    if host != here:
        return f"pid {pid} runs on host {host}, not here ({here}): it cannot be checked from here"
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            started, status = proc.create_time(), proc.status()
            cmdline = [] if status == psutil.STATUS_ZOMBIE else proc.cmdline()
    except psutil.NoSuchProcess:
        return f"pid {pid} is not running"
    except psutil.AccessDenied:
        return f"pid {pid} cannot be inspected (another user's): not proved to be {what}"
    if status == psutil.STATUS_ZOMBIE:
        return f"pid {pid} has exited (a zombie its parent has not reaped yet)"
    if abs(started - record["create_time"]) > START_TOLERANCE_S:
        return (
            f"pid {pid} is not {what}: it started at {when(started)} but the run recorded "
            f"{when(record['create_time'])} (the pid was reused)"
        )
    if fingerprint(cmdline) != record["cmdline_sha256"]:
        return (
            f"pid {pid} is not {what}: its command line (`{short(cmdline)}`) is not the one the "
            "run recorded"
        )
    if lock is not None:
        reason = lock_reason(proc, lock)
        if reason is not None:
            return f"pid {pid} is not {what}: {reason}"
    return proc


def lock_reason(proc: psutil.Process, marker: Path) -> str | None:
    """Why `proc` does not hold the run whose marker is `marker` exclusively; None when it
    does, or when the filesystem has no locks (nothing then can be proved by them)."""
    mode = lock_mode(marker)
    if mode == "unsupported":
        return None
    if mode is None:
        return f"nobody holds the run's lock ({marker})"
    if mode == "missing":
        return f"the folder has no run marker ({marker})"
    if mode == "shared":
        return f"the run's lock ({marker}) is held shared, by components started alone"
    try:
        holds = has_open(proc, marker)
    except psutil.AccessDenied:
        return f"its open files cannot be read: it is not proved to hold the run's lock ({marker})"
    except psutil.NoSuchProcess:
        return "it has exited"
    return None if holds else f"it does not hold the run's lock ({marker}); another process does"


def lock_mode(marker: Path) -> str | None:
    """How the `flock` on `marker` is held now: "exclusive", "shared" or None (free); "missing"
    when there is no such file, "unsupported" on a filesystem without locks. Probed by taking
    the lock for an instant without waiting (a shared probe first, which conflicts only with
    an exclusive lock)."""
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unsupported"
    try:
        for operation, held in ((fcntl.LOCK_SH, "exclusive"), (fcntl.LOCK_EX, "shared")):
            try:
                fcntl.flock(fd, operation | fcntl.LOCK_NB)
            except BlockingIOError:
                return held
            except OSError:
                return "unsupported"
        return None
    finally:
        os.close(fd)  # and with it the probe's lock


def has_open(proc: psutil.Process, path: Path) -> bool:
    """Whether `proc` has the file `path` open now (psutil.AccessDenied for another user's)."""
    target = os.path.realpath(path)
    return any(f.path == target for f in proc.open_files())


def openers(path: Path) -> list[psutil.Process]:
    """The processes that have the file `path` open now, by pid; other users' processes whose
    open files cannot be read are left out."""
    found = []
    for proc in psutil.process_iter():
        try:
            if has_open(proc, path):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def command_of(proc: psutil.Process) -> str:
    """`proc`'s command line on one line, shortened, in backquotes; or why it cannot be read."""
    try:
        cmdline = proc.cmdline()
    except psutil.NoSuchProcess:
        return "a process that has exited"
    except psutil.AccessDenied:
        return "a process not visible here"
    return f"`{short(cmdline)}`" if cmdline else "no command line"


def short(cmdline: list[str], limit: int = 100) -> str:
    text = " ".join(" ".join(cmdline).split())  # one line, always
    text = redact_command(text)  # `--wandb-api-key KEY`, `?token=...`: never quoted
    return text[:limit] + ("..." if len(text) > limit else "")


def when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).isoformat(sep=" ", timespec="milliseconds")
