"""Stalled components: no progress (no new metrics.jsonl record) for `stall_timeout_s`. `rl`
asks the component for the stacks of all its threads (SIGUSR1, written to its log by
faulthandler) and names the wait it is in: the innermost frame of this project's code."""

import os
import re
import time
from pathlib import Path

from rlcore.logs import STACK_DUMP_SIGNAL

PROJECT_DIRS = ("trainer", "orchestrator", "inference", "rlcore", "launcher")
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
DUMP_WAIT_S = 3.0


def dump_stacks(pid: int, log: Path) -> str:
    """Signal `pid` to write its stacks into `log`; the wait it is in, as text."""
    size = log.stat().st_size if log.exists() else 0
    try:
        os.kill(pid, STACK_DUMP_SIGNAL)
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
