"""Which attempt of a run wrote a signal file, decided by identity, never by clocks.

An attempt is one start of a run's processes. `rl` hands every process it starts the same id in
`RL_ATTEMPT_ID` (a new one per attempt, restarts included), and each file one process writes for
another (a policy's STABLE, a collective offer, the orchestrator's `done`) carries a `stamp`:
that id plus who wrote it (host, pid and the pid's start time, rlcore.processes.procs, so a reused
pid is another process). The reader then asks `AttemptFilter.current(stamp)`:

  under rl       the stamp's attempt is the reader's (an earlier attempt's file is stale
                 however recently it was written);
  started alone  no attempt id: the writer is a process this reader has seen alive (still
                 alive now, or seen alive before it exited), or runs on another host, where
                 liveness cannot be checked.
"""

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

from rlcore.processes import procs

ATTEMPT_ENV = "RL_ATTEMPT_ID"


def new_attempt_id() -> str:
    return uuid.uuid4().hex[:12]


def attempt_id() -> str | None:
    """This process's attempt (None: started alone, not by rl)."""
    return os.environ.get(ATTEMPT_ENV) or None


def stamp() -> dict[str, Any]:
    """Who writes now: the attempt and the writing process."""
    pid = os.getpid()
    return {
        "attempt": attempt_id(),
        "host": socket.gethostname(),
        "pid": pid,
        "started": procs.started(pid),
    }


def writer(stamp_: dict[str, Any]) -> tuple:
    return stamp_.get("host"), stamp_.get("pid"), stamp_.get("started")


def alive(stamp_: dict[str, Any]) -> bool | None:
    """Whether the stamp's writer runs now (None: on another host, unknown)."""
    if stamp_.get("host") != socket.gethostname() or not isinstance(stamp_.get("pid"), int):
        return None
    return procs.same_start(procs.started(stamp_["pid"]), stamp_.get("started"))


@dataclass
class AttemptFilter:
    """Tells this attempt's signal files from an earlier attempt's (see the module docstring)."""

    attempt: str | None = field(default_factory=attempt_id)
    seen: set = field(default_factory=set)
    """Writers seen alive by this reader (started alone): their files stay current after they
    exit, e.g. the trainer's last policy once training ended."""

    def current(self, stamp_: dict[str, Any] | None) -> bool:
        if not isinstance(stamp_, dict):
            return False
        if self.attempt is not None or stamp_.get("attempt") is not None:
            return stamp_.get("attempt") == self.attempt
        if writer(stamp_) in self.seen:
            return True
        if alive(stamp_) is False:
            return False
        self.seen.add(writer(stamp_))
        return True
