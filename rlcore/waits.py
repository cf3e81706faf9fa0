"""What a component is waiting for, recorded in the run folder for `rl` to read.

A component calls `setup(run_root, name)` once (the trainer on its first rank only), then wraps
each wait on another process in `waiting(what, peer)`. While the wait lasts,
`<run>/state/<name>.json` says {component, waiting_for, peer, detail, seq, pid, attempt};
when it ends, `waiting_for` is null. `seq` grows with every wait, so the reader tells one long
wait from many short ones without comparing clocks: `rl` times each (component, seq) with its
own clock (launcher.stall). Without `setup` (a test, a tool) the calls do nothing.

Light module: the standard library only.
"""

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlcore.attempt import attempt_id
from rlcore.files import atomic_write_text

STATE_DIR = "state"
_board: dict[str, Any] = {}


def state_file(run_root: Path, component: str) -> Path:
    return Path(run_root) / STATE_DIR / f"{component}.json"


def setup(run_root: Path, component: str) -> None:
    _board.update(file=state_file(run_root, component), component=component, seq=0)
    _write(None, None, None)


def _write(what: str | None, peer: str | None, detail: str | None) -> None:
    if "file" not in _board:
        return
    record = {"component": _board["component"], "waiting_for": what, "peer": peer,
              "detail": detail, "seq": _board["seq"], "pid": os.getpid(),
              "attempt": attempt_id()}  # fmt: skip
    try:
        _board["file"].parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(_board["file"], json.dumps(record))
    except OSError:
        pass  # the record helps rl name a hang; it must never cause one


@contextmanager
def waiting(what: str, peer: str, detail: str | None = None) -> Iterator[None]:
    """Record that this component waits for `what` from `peer` (a component name) meanwhile."""
    _board["seq"] = _board.get("seq", 0) + 1
    _write(what, peer, detail)
    try:
        yield
    finally:
        _write(None, None, None)


def read(run_root: Path, component: str) -> dict[str, Any] | None:
    try:
        record = json.loads(state_file(run_root, component).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
