"""Stalled components, named within minutes, and never while they work or wait on one that works.

`rl` watches every component (launcher.supervisor builds a `View` of each and calls
`find_stall`):

  stopped     a process in state T (SIGSTOP, a debugger) for `STOPPED_AFTER_S`;
  deadlock    components waiting for each other in a circle (rlcore.runs.waits), none of them
              working, each wait older than `DEADLOCK_AFTER_S`: every one's stacks go to its log;
  stuck       the root of a chain of waits that has neither worked nor made progress for its
              limit.

Working is measured, not guessed: a component whose processes (children included, psutil) used
more than `CPU_WORKING` of a core over the last `CPU_SAMPLE_S` works. Each component records the
waits it is in and the peers they are on (rlcore.runs.waits, several at once); following them leads
from any waiter to a root, a component that waits on nobody. A component that works, or waits on
one that works (through any chain), is never blamed: slow is not stalled. A root that does not
work is stuck once it has made no progress for its limit: `stall_timeout_s` when set, else
`AUTO_FACTOR` times the longest gap between its metrics records so far (at least
`AUTO_FLOOR_S`; `AUTO_STARTUP_S` before its first), so a large model on a slow machine gets as
long as its own steps take. The trainer and the orchestrator progress by their metrics records;
an inference server by answering /health, but while a peer waits on it (completions, a weight
update) only its own work counts.

A stalled component is asked for the stacks of all its threads (SIGUSR1, written to its log by
faulthandler), and `rl` names the wait it is in: the innermost frame of this project's code.
"""

import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from rlcore.files.readback import LOG_TAIL, Damaged, decode, read_from
from rlcore.processes import procs
from rlcore.reporting.logs import STACK_DUMP_SIGNAL
from rlcore.runs import waits

PROJECT_DIRS = ("trainer", "orchestrator", "inference", "rlcore", "launcher")
WAIT_HELPERS = ("rlcore/processes/poll.py",)
"""Frames passed over when naming where a process waits: the one poll loop, which every wait
goes through; its caller says what is waited for."""
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
DUMP_WAIT_S = 3.0
STOPPED_AFTER_S = 20.0
DEADLOCK_AFTER_S = 40.0
AUTO_STARTUP_S = 900.0
AUTO_FLOOR_S = 180.0
AUTO_FACTOR = 5.0
CPU_SAMPLE_S = 5.0
"""How often each component's CPU time is read: the window a verdict of working covers."""
MIN_LIMIT_S = 2 * CPU_SAMPLE_S
"""The shortest limit: the last sample then lies wholly inside the time a root has been idle."""
CPU_WORKING = 0.05
"""Share of one core above which a component works. Measured idle on 2 cores: a trainer
polling for its batch 0.002, an orchestrator awaiting completions 0.000, an idle vLLM server
(engine included) 0.012-0.018."""


@dataclass
class Clock:
    """One component's progress and work, by the launcher's monotonic clock only."""

    last_progress: float = field(default_factory=time.monotonic)
    """Its last record (metrics line, /health answer), work, or wait on a peer: what it owes
    progress since."""
    last_work: float = field(default_factory=time.monotonic)
    """Its last metrics record or sample in which it worked (a /health answer is no work)."""
    last_record: float = 0.0
    longest_gap_s: float = 0.0
    """Between its metrics records: its step time, which an automatic limit follows."""
    progressed: bool = False
    working: bool | None = None
    """The last sample's verdict (None: not sampled over a whole window yet)."""
    cpu_s: dict[int, float] | None = None
    """CPU seconds of each of its processes at the last sample."""
    cpu_sampled: float = 0.0
    stopped_since: float | None = None

    def record(self, now: float) -> None:
        """A new metrics record from the component."""
        if self.progressed:
            self.longest_gap_s = max(self.longest_gap_s, now - self.last_record)
        self.progressed, self.last_record = True, now
        self.last_progress = self.last_work = now

    def alive(self, now: float) -> None:
        """An answer to /health: progress, but no work and no step (the limit keeps its
        startup value)."""
        self.last_progress = now

    def waiting(self, now: float) -> None:
        """It waits on a peer now: it owes nothing itself while it does."""
        self.last_progress = now

    def start(self, now: float) -> None:
        """Everything may progress from now on (inference is up)."""
        self.last_progress = self.last_work = now

    def limit_s(self, fixed_s: float | None) -> float:
        """At least MIN_LIMIT_S: a verdict of idle needs a whole CPU sample inside the idle
        time."""
        if fixed_s is not None:
            return max(MIN_LIMIT_S, fixed_s)
        if not self.progressed:
            return AUTO_STARTUP_S
        return max(AUTO_FLOOR_S, AUTO_FACTOR * self.longest_gap_s)

    def sample_cpu(self, pid: int, now: float) -> None:
        """Every CPU_SAMPLE_S: did the processes of `pid`'s tree use more than CPU_WORKING of
        a core since the last sample? Working restarts both clocks."""
        if self.cpu_s is not None and now - self.cpu_sampled < CPU_SAMPLE_S:
            return
        used = tree_cpu_s(pid)
        if self.cpu_s is not None:
            # a process new since the last sample counts whole; one that has gone, not at all
            spent = sum(max(0.0, cpu - self.cpu_s.get(p, 0.0)) for p, cpu in used.items())
            self.working = spent > CPU_WORKING * (now - self.cpu_sampled)
            if self.working:
                self.last_progress = self.last_work = now
        self.cpu_s, self.cpu_sampled = used, now


def tree_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of `pid` and each of its descendants, by pid."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    used = {}
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        used[process.pid] = times.user + times.system
    return used


# -- the waits, as rl sees them ----------------------------------------------------------------


@dataclass
class Wait:
    waiter: str
    what: str
    peers: list[str]
    """The components it waits on (several for a wait on every inference server); empty when
    the peer is none of the run's live components."""
    seconds: float
    """How long rl has seen it open."""


class WaitTimes:
    """The open waits of each component (rlcore.runs.waits), timed by the launcher's clock."""

    def __init__(self, run_root: Path, attempt: str, servers: list[str]):
        """`servers`: the run's inference servers' names, in index order."""
        self.run_root, self.attempt, self.servers = run_root, attempt, servers
        self.first_seen: dict[tuple, float] = {}

    def current(self, component: str, now: float, live: set[str]) -> list[Wait]:
        """The waits `component` is in now; peers outside `live` (gone, or never started by
        rl) are left out of each wait's peers."""
        record = waits.read(self.run_root, component)
        if not record or record.get("attempt") != self.attempt:
            return []
        found = []
        for wait in waits.open_waits(record):
            key = (component, record.get("pid"), wait.get("id"))
            seconds = now - self.first_seen.setdefault(key, now)
            peers = [p for p in self.peers(wait["peer"], wait.get("server")) if p in live]
            found.append(Wait(component, wait["waiting_for"], peers, seconds))
        return found

    def peers(self, peer: str, server: int | None) -> list[str]:
        if peer != "inference":
            return [peer]
        if server is None:
            return list(self.servers)
        return [waits.server_name(server)]


# -- who is to blame ---------------------------------------------------------------------------


@dataclass
class View:
    """One live component as the watchdog sees it at one check."""

    name: str
    working: bool
    idle_s: float
    """Since its last progress or work."""
    work_idle_s: float
    """Since its last work (an inference server answering /health does no work)."""
    limit_s: float
    limit_from: str = "its own step times"
    """Where the limit comes from, for the message."""
    waits: list[Wait] = field(default_factory=list)
    owes_progress: bool = True
    """False for an inference server: it owes work only while someone waits on it (or answers
    no /health)."""
    observable: bool = True
    """Its processes run here, where their CPU time can be read (not through srun on another
    node): a circle of waits is judged only between such components."""


@dataclass
class Stall:
    name: str
    message: str
    """What is wrong, without the stack location (the supervisor adds it)."""
    circle: list[str] = field(default_factory=list)
    """The components of a deadlock (each one's stacks are dumped), else empty."""


def find_stall(views: dict[str, View]) -> Stall | None:
    """The component to blame now, if any: a deadlock first, then the stuck root of a chain of
    waits that has gone longest past its limit."""
    alive = spared(views)
    deadlock = find_deadlock(views, alive)
    if deadlock is not None:
        return deadlock
    stuck = []
    for view in views.values():
        if view.name in alive or any(w.peers for w in view.waits):
            continue  # works, waits on one that works, or waits: never blamed itself
        if view.owes_progress or view.idle_s > view.limit_s:
            over_s = view.idle_s
        else:  # an inference server owes work only while it is waited on
            waited_s = [w.seconds for v in views.values() for w in v.waits if view.name in w.peers]
            over_s = min(max(waited_s, default=0.0), view.work_idle_s)
        if over_s > view.limit_s:
            stuck.append((over_s - view.limit_s, view.name))
    if not stuck:
        return None
    _, name = max(stuck)
    return Stall(name, stuck_message(views[name], waiting_on(name, views)))


def spared(views: dict[str, View]) -> set[str]:
    """The components that work, or wait on one (a wait on a component that is not live is on
    nothing rl can judge: it spares its waiter too, whose own timeout applies)."""
    alive = {v.name for v in views.values() if v.working}
    alive |= {v.name for v in views.values() for w in v.waits if not w.peers}
    grew = True
    while grew:
        grew = False
        for view in views.values():
            if view.name not in alive and any(set(w.peers) & alive for w in view.waits):
                alive.add(view.name)
                grew = True
    return alive


FIRST_NAMED = {"trainer": 0, "orchestrator": 1}
"""Who a deadlock is reported under first."""


def find_deadlock(views: dict[str, View], alive: set[str]) -> Stall | None:
    """A circle of components that each wait on the next for DEADLOCK_AFTER_S, none working."""
    old = {
        name: {p for w in view.waits if w.seconds >= DEADLOCK_AFTER_S for p in w.peers}
        for name, view in views.items()
        if name not in alive and view.observable
    }
    for start in sorted(old, key=lambda name: (FIRST_NAMED.get(name, len(FIRST_NAMED)), name)):
        path = circle_from(start, old)
        if path is not None:
            return Stall(path[0], deadlock_message(path, views), circle=path)
    return None


def circle_from(start: str, edges: dict[str, set[str]]) -> list[str] | None:
    """A path start -> ... -> start along `edges`, if there is one."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for peer in sorted(edges.get(node, ())):
            if peer == start:
                return path
            if peer in edges and peer not in seen:
                seen.add(peer)
                stack.append((peer, [*path, peer]))
    return None


def deadlock_message(circle: list[str], views: dict[str, View]) -> str:
    parts = []
    for name, peer in zip(circle, [*circle[1:], circle[0]], strict=True):
        wait = max((w for w in views[name].waits if peer in w.peers), key=lambda w: w.seconds)
        parts.append(f"{the(name)} for {wait.what} ({wait.seconds:.0f} s)")
    if len(circle) == 2:
        who = f"{the(circle[0])} and {the(circle[1])} are waiting for each other"
    else:
        who = f"{', '.join(map(the, circle))} are waiting for each other in a circle"
    return f"{who}: " + ", ".join(parts)


def the(name: str) -> str:
    """`the trainer`, `the orchestrator`; an inference server by its name."""
    return name if name.startswith("inference") else f"the {name}"


def waiting_on(root: str, views: dict[str, View]) -> list[tuple[Wait, str]]:
    """Every wait that leads to `root` (directly or through other waiters), with the peer it
    is on, nearest first."""
    found, reached, frontier = [], {root}, [root]
    while frontier:
        peer = frontier.pop(0)
        for view in views.values():
            for wait in view.waits:
                if peer in wait.peers and (wait, peer) not in found:
                    found.append((wait, peer))
                    if view.name not in reached:
                        reached.add(view.name)
                        frontier.append(view.name)
    return found


def stuck_message(view: View, waiters: list[tuple[Wait, str]]) -> str:
    name, limit = view.name, f"limit {view.limit_s:.0f} s from {view.limit_from}"
    if view.owes_progress:
        lacking = f"has not made progress for {view.idle_s:.0f} s ({limit})"
    elif view.idle_s > view.limit_s:
        lacking = f"has not answered /health for {view.idle_s:.0f} s ({limit})"
    else:
        lacking = f"has done no work for {view.work_idle_s:.0f} s ({limit})"
    message = f"{name} {lacking} and uses no CPU"
    if waiters:
        message += "; " + "; ".join(
            f"{the(w.waiter)} waits for {w.what} from {the(peer)} ({w.seconds:.0f} s)"
            for w, peer in waiters
        )
    return message


# -- stacks ------------------------------------------------------------------------------------


def dump_stacks(pid: int, log: Path | None) -> str:
    """Signal `pid` to write its stacks into `log` (continuing it first if it is stopped); the
    wait it is in, as text. A process started without a log is not signalled."""
    if log is None:
        return "(it has no log to write its stacks into)"
    size = log.stat().st_size if log.exists() else 0
    try:
        os.kill(pid, STACK_DUMP_SIGNAL)
        if procs.is_stopped(pid):
            os.kill(pid, signal.SIGCONT)  # a stopped process handles the signal once continued
    except ProcessLookupError:
        return "(the process is gone)"
    time.sleep(DUMP_WAIT_S)
    try:
        dump = decode(read_from(log, size, LOG_TAIL))  # bounded: the log is read back as data
    except (FileNotFoundError, Damaged):
        dump = ""
    return innermost_project_frame(dump) or "(no stack was written: see the log)"


def innermost_project_frame(dump: str) -> str | None:
    """`file:line in func` of the innermost frame of this project's code in the main thread
    (faulthandler prints it first, most recent call first), the poll loop's own passed over."""
    main = dump.split("Current thread", 1)[-1] if "Current thread" in dump else dump
    main = re.split(r"\nThread 0x", main, maxsplit=1)[0]
    for match in FRAME.finditer(main):
        parts = Path(match["file"]).parts
        for i, part in enumerate(parts[:-1]):
            if part in PROJECT_DIRS and ".venv" not in parts and "site-packages" not in parts:
                where = "/".join(parts[i:])
                if where in WAIT_HELPERS:
                    break
                return f"{where}:{match['line']} in {match['func']}"
    return None
