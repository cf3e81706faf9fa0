"""Stalled components, named within minutes and never while they move.

`rl` watches each component for four things (launcher.supervisor calls `StallWatch.check`):

  stopped        a process in state T (SIGSTOP, a debugger) for `STOPPED_AFTER_S`;
  deadlock       the trainer and the orchestrator each waiting for the other (rlcore.waits)
                 for `DEADLOCK_AFTER_S`: both sides' stacks go to their logs;
  no progress    a trainer or orchestrator that is not waiting on a peer, writes no metrics
                 record and uses almost no CPU for its limit: `stall_timeout_s` when set, else
                 `AUTO_FACTOR` times the longest gap between its records so far (at least
                 `AUTO_FLOOR_S`; `AUTO_STARTUP_S` before its first record), so a large model
                 on a slow machine gets as long as its own steps take;
  no health      an inference server whose /health has not answered for that limit.

A stalled component is asked for the stacks of all its threads (SIGUSR1, written to its log by
faulthandler), and `rl` names the wait it is in: the innermost frame of this project's code.
"""

import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlcore import waits
from rlcore.logs import STACK_DUMP_SIGNAL

PROJECT_DIRS = ("trainer", "orchestrator", "inference", "rlcore", "launcher")
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
DUMP_WAIT_S = 3.0
STOPPED_AFTER_S = 20.0
DEADLOCK_AFTER_S = 40.0
AUTO_STARTUP_S = 900.0
AUTO_FLOOR_S = 180.0
AUTO_FACTOR = 5.0
CPU_SAMPLE_S = 10.0
CPU_MOVING = 0.05
"""Share of one core over `CPU_SAMPLE_S` above which a component counts as moving."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Clock:
    """One component's progress clock (times from the launcher's monotonic clock only)."""

    last_progress: float = field(default_factory=time.monotonic)
    longest_gap_s: float = 0.0
    progressed: bool = False
    cpu_s: float = 0.0
    cpu_sampled: float = 0.0
    stopped_since: float | None = None

    def record(self, now: float) -> None:
        """A new metrics record (or a /health answer) from the component."""
        if self.progressed:
            self.longest_gap_s = max(self.longest_gap_s, now - self.last_progress)
        self.progressed, self.last_progress = True, now

    def limit_s(self, fixed_s: float | None) -> float:
        if fixed_s is not None:
            return fixed_s
        if not self.progressed:
            return AUTO_STARTUP_S
        return max(AUTO_FLOOR_S, AUTO_FACTOR * self.longest_gap_s)

    def sample_cpu(self, session: int, now: float) -> None:
        """A component whose processes used more than CPU_MOVING of a core since the last
        sample is moving: its clock restarts (slow is not stalled)."""
        if now - self.cpu_sampled < CPU_SAMPLE_S:
            return
        used = session_cpu_s(session)
        if self.cpu_sampled and used - self.cpu_s > CPU_MOVING * (now - self.cpu_sampled):
            self.last_progress = now
        self.cpu_s, self.cpu_sampled = used, now


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, UnicodeDecodeError):
        return None
    return text.rsplit(")", 1)[-1].split()


def is_stopped(pid: int) -> bool:
    fields = proc_stat(pid)
    return fields is not None and fields[0] in ("T", "t")


def session_cpu_s(session: int) -> float:
    """CPU seconds (user + system) of every live process in `session`."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = proc_stat(int(entry.name))
        if fields is not None and len(fields) > 12 and fields[3] == str(session):
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


class WaitTimes:
    """How long each recorded wait (rlcore.waits) has lasted, by the launcher's clock."""

    def __init__(self, run_root: Path, attempt: str):
        self.run_root, self.attempt = run_root, attempt
        self.first_seen: dict[tuple, float] = {}

    def current(self, component: str, now: float) -> tuple[dict, float] | None:
        """(record, seconds) of the wait `component` is in now, if any."""
        record = waits.read(self.run_root, component)
        if not record or not record.get("waiting_for") or record.get("attempt") != self.attempt:
            return None
        key = (component, record.get("pid"), record.get("seq"))
        return record, now - self.first_seen.setdefault(key, now)

    def deadlock(self, now: float) -> str | None:
        """A description of the trainer and orchestrator waiting on each other for
        DEADLOCK_AFTER_S, else None."""
        trainer, orchestrator = self.current("trainer", now), self.current("orchestrator", now)
        if trainer is None or orchestrator is None:
            return None
        if trainer[0]["peer"] != "orchestrator" or orchestrator[0]["peer"] != "trainer":
            return None
        if min(trainer[1], orchestrator[1]) < DEADLOCK_AFTER_S:
            return None
        return (
            f"the trainer and the orchestrator are waiting for each other: the trainer for "
            f"{trainer[0]['waiting_for']} ({trainer[1]:.0f} s), the orchestrator for "
            f"{orchestrator[0]['waiting_for']} ({orchestrator[1]:.0f} s)"
        )


def dump_stacks(pid: int, log: Path) -> str:
    """Signal `pid` to write its stacks into `log` (continuing it first if it is stopped); the
    wait it is in, as text."""
    size = log.stat().st_size if log.exists() else 0
    try:
        os.kill(pid, STACK_DUMP_SIGNAL)
        if is_stopped(pid):
            os.kill(pid, signal.SIGCONT)  # a stopped process handles the signal once continued
    except ProcessLookupError:
        return "(the process is gone)"
    time.sleep(DUMP_WAIT_S)
    with log.open("rb") as f:
        f.seek(size)
        dump = f.read().decode(errors="replace")
    return innermost_project_frame(dump) or "(no stack was written: see the log)"


def innermost_project_frame(dump: str) -> str | None:
    """`file:line in func` of the innermost frame of this project's code in the main thread
    (faulthandler prints it first, most recent call first)."""
    main = dump.split("Current thread", 1)[-1] if "Current thread" in dump else dump
    main = re.split(r"\nThread 0x", main, maxsplit=1)[0]
    for match in FRAME.finditer(main):
        parts = Path(match["file"]).parts
        for i, part in enumerate(parts[:-1]):
            if part in PROJECT_DIRS and ".venv" not in parts and "site-packages" not in parts:
                where = "/".join(parts[i:])
                return f"{where}:{match['line']} in {match['func']}"
    return None
