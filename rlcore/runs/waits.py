"""What a component is waiting for, recorded in the run folder for `rl` to read.

A component calls `setup(run_root, name)` once (the trainer on its first rank only), then wraps
each wait on another process in `waiting(what, peer)`. Any number of waits may be open at once,
entered by threads or by asyncio tasks (the orchestrator's rollouts each await inference's
completions): there is no "current wait", only the set of open ones. While they last,
`<run>/state/<name>.json` lists them:

    {component, pid, attempt, waits: [{id, waiting_for, peer, server, detail}, ...]}

`peer` is a component (`trainer`, `orchestrator`, `inference`); `server` picks one inference
server by its index in the run (`inference`, `inference-1`, ...: `server_name`), None meaning
every one of them. Waits for the same thing from the same peer share one entry while any of
them lasts, so a batch's hundreds of concurrent requests are one wait, written when the first
starts and the last ends. Every new entry gets a new `id`, so the reader tells one long wait
from many short ones without comparing clocks: `rl` times each (component, pid, id) with its
own clock (launcher.stall). Without `setup` (a test, a tool) the calls do nothing.

Light module: the standard library only.
"""

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcore.files.atomic import atomic_write_text
from rlcore.files.readback import STATE, Damaged, read_object
from rlcore.runs.attempt import attempt_id

STATE_DIR = "state"
COMPONENT_ENV = "RL_COMPONENT"
"""The name `rl` started a process under (`inference-1` for the second inference server); a
process started alone takes its role's name."""


def state_file(run_root: Path, component: str) -> Path:
    return Path(run_root) / STATE_DIR / f"{component}.json"


def server_name(index: int) -> str:
    """The component name of the run's inference server `index`: `inference`, `inference-1`,
    `inference-2`, ... (the order of `orchestrator.client.base_url`)."""
    return "inference" if index == 0 else f"inference-{index}"


def component_name(role: str) -> str:
    """This process's component name: the one `rl` gave it, else its role."""
    return os.environ.get(COMPONENT_ENV) or role


@dataclass
class _Entry:
    id: int
    waiting_for: str
    peer: str
    server: int | None
    detail: str | None
    count: int = 0


@dataclass
class Board:
    """This process's open waits and the file they are written to."""

    file: Path
    component: str
    next_id: int = 1
    entries: dict[tuple, _Entry] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, what: str, peer: str, server: int | None, detail: str | None) -> tuple:
        key = (what, peer, server, detail)
        with self.lock:
            entry = self.entries.get(key)
            if entry is None:
                entry = self.entries[key] = _Entry(self.next_id, what, peer, server, detail)
                self.next_id += 1
                self.write()
            entry.count += 1
        return key

    def leave(self, key: tuple) -> None:
        with self.lock:
            entry = self.entries[key]
            entry.count -= 1
            if entry.count == 0:
                del self.entries[key]
                self.write()

    def write(self) -> None:
        """The record, under the lock (the temporary file's name is per process)."""
        waits = [
            {
                "id": e.id,
                "waiting_for": e.waiting_for,
                "peer": e.peer,
                "server": e.server,
                "detail": e.detail,
            }
            for e in self.entries.values()
        ]
        record = {
            "component": self.component,
            "pid": os.getpid(),
            "attempt": attempt_id(),
            "waits": waits,
        }
        try:
            atomic_write_text(self.file, json.dumps(record), sync=False)
        except OSError:
            pass  # the record helps rl name a hang; it must never cause one


_board: Board | None = None
"""Set by `setup`; one per process (the waits in it are many)."""


def setup(run_root: Path, component: str) -> None:
    global _board
    _board = Board(state_file(run_root, component), component)
    _board.write()


@contextmanager
def waiting(
    what: str, peer: str, detail: str | None = None, server: int | None = None
) -> Iterator[None]:
    """Record that this component waits for `what` from `peer` (a component role; `server`:
    which inference server, None for all) while the block runs."""
    board = _board
    if board is None:
        yield
        return
    key = board.enter(what, peer, server, detail)
    try:
        yield
    finally:
        board.leave(key)


def read(run_root: Path, component: str) -> dict[str, Any] | None:
    """A component's record read back bounded (rlcore.files.readback); None when there is none or it
    is not one (a FIFO, a huge or deeply nested file, not an object)."""
    try:
        return read_object(state_file(run_root, component), STATE, Path(run_root))
    except (FileNotFoundError, Damaged):
        return None


def peer_words(wait: dict[str, Any]) -> str:
    """Whom a recorded wait is on, for messages: `the trainer`, `inference-1`, `inference`."""
    peer, server = wait.get("peer"), wait.get("server")
    if peer == "inference":
        return server_name(server) if isinstance(server, int) else "inference"
    return f"the {peer}"


def open_waits(record: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The waits a record lists (none for a missing or malformed one)."""
    waits = (record or {}).get("waits")
    if not isinstance(waits, list):
        return []
    return [w for w in waits if isinstance(w, dict) and w.get("waiting_for") and w.get("peer")]
