"""One attempt's processes, from their start to their stop: started all at once, watched until
the run ends, then stopped.

Consumes: an AttemptSpec, which launch.py makes from the plan once the attempt's configs are
written (each process's command, environment and log, each inference server's address). Produces:
logs/<component>.log, run.json and the live view on stdout. Waits for: inference /health, then any
child to exit. Unblocked by: a child exit, a signal (SIGINT/SIGTERM/SIGHUP), or a stall
(launcher.stall)."""

import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from launcher.eta import RunClock
from launcher.exits import exit_message, oom_kills
from launcher.stall import (
    STOPPED_AFTER_S,
    Clock,
    Stall,
    View,
    WaitTimes,
    dump_stacks,
    find_stall,
)
from rlcore.errors import USER_ERROR_EXIT_CODE
from rlcore.files.disk_full import DISK_FULL_EXIT_CODE, stopped_text
from rlcore.files.readback import LOG_TAIL, Damaged, decode, read_tail
from rlcore.forecast.model import Forecast
from rlcore.forecast.report import keep_measurement
from rlcore.processes import children, poll, procs
from rlcore.processes.health import ForeignServer, port_holder, probe_health
from rlcore.processes.poll import Stop, check_stop, ignore_stop_signals
from rlcore.reporting.metrics import (
    is_training_step,
    read_all_records,
    read_records,
    record_step_line,
    reward_curve,
)
from rlcore.runs.rundir import RunDir, record_state

STALLED = -1000
"""poll()'s code for a component stopped for making no progress."""
HEALTH_PROBE_S = 5.0
"""How often a started inference server's /health is asked (its progress signal)."""


@dataclass(frozen=True)
class ProcessSpec:
    """One process of an attempt, as the supervisor starts and watches it."""

    name: str
    command: list[str]
    env: dict[str, str]
    """What it gets in its environment beyond the launcher's own."""
    log: Path
    url: str | None = None
    """An inference server's address (its /health: ready, then alive); None for the others."""
    port: int | None = None
    """The port an inference server listens on (its holder is named if the server dies)."""
    observable: bool = True
    """Whether its own CPU time can be sampled here (False: started through a wrapper, srun)."""


@dataclass
class AttemptSpec:
    """What one attempt starts, how it is watched and what run.json keeps of it. launch.py
    makes it from the plan: the supervisor reads no plan."""

    run: RunDir
    attempt: str
    """The attempt's id (rlcore.runs.attempt): the waits recorded under it are this attempt's."""
    processes: list[ProcessSpec]
    """In start order: the inference servers, the orchestrator, the trainer."""
    server_nonce: str
    """What this attempt's inference servers prove on /health (rlcore.processes.health)."""
    max_steps: int
    startup_timeout_s: float
    """How long the inference servers have to answer /health."""
    stall_timeout_s: float | None
    """A fixed limit for a stuck component (None: its own step times set it, launcher.stall)."""
    shutdown_grace_s: float
    forecast: Forecast | None = None
    """The run's estimate, against which the time left is said (launcher.eta)."""
    record: dict = field(default_factory=dict)
    """What run.json keeps of the plan beside every state (launcher.plan.run_record)."""

    @property
    def servers(self) -> list[str]:
        """The inference servers' names, in index order."""
        return [p.name for p in self.processes if p.url is not None]


@dataclass
class Child(children.Child):
    """A component (rlcore.processes.children: own session, parent-death signal, log, identity) and
    its progress clock."""

    clock: Clock = field(default_factory=Clock)


class Supervisor:
    """One attempt's processes, as its AttemptSpec names them: started, watched, stopped, and
    run.json written at each change of state."""

    def __init__(self, spec: AttemptSpec):
        self.spec = spec
        self.run = spec.run
        self.processes = {p.name: p for p in spec.processes}
        self.children: dict[str, Child] = {}
        self.last_step_line = ""
        self.stall_message = ""
        self.stopping = False
        self.last_health_probe = 0.0
        self.waits = WaitTimes(self.run.root, spec.attempt, spec.servers)
        self.identity = procs.identity()
        self.clock = RunClock(spec.forecast, spec.max_steps, list(self.processes))
        # Progress comes from metrics.jsonl; records of earlier attempts are not shown again.
        self.metrics_offset = self.run.metrics.stat().st_size if self.run.metrics.exists() else 0

    # -- the attempt ---------------------------------------------------------------------------
    def supervise(self) -> tuple[int, bool]:
        """Start every process, watch them until the run ends, stop them: (exit code, whether a
        signal stopped the attempt). A signal only requests the stop (rlcore.processes.poll),
        which every wait here looks for."""
        try:
            return self.start_and_watch(), False
        except Stop as stop:
            ignore_stop_signals("rl")
            name = signal.Signals(stop.signum).name
            print(f"rl: got {name}, stopping all components", flush=True)
            self.stop_all(self.spec.shutdown_grace_s)
            self.write_state("stopped", signal=stop.signum)
            return stop.exit_code, True

    def start_and_watch(self) -> int:
        oom_kills_before = oom_kills()
        # All at once: the trainer loads its model and the orchestrator its environments while
        # inference starts (the orchestrator waits for /health itself).
        for name in self.processes:
            check_stop()
            self.start(name)  # run.json says "starting"
        print("rl: started inference, orchestrator and trainer; waiting for inference", flush=True)
        try:
            self.wait_healthy(self.spec.startup_timeout_s)
        except TimeoutError as err:
            return self.fail(err.args[1], 1, err.args[0])
        except ForeignServer as err:
            return self.fail("inference", USER_ERROR_EXIT_CODE, str(err))
        if all(c.proc.poll() is None for c in self.inference):
            print("rl: inference is healthy", flush=True)
            keep_measurement(self.spec.forecast)  # the run has started: cache its measurement
            self.write_state("running")  # "running": inference serves
        name, code = poll.wait_until(self.poll, math.inf, 0.5, "the run to end")
        if name == "done":
            return self.finish()
        if code == STALLED:
            return self.fail(name, 1, self.stall_message)
        return self.fail(name, code, self.why_ended(name, code, (oom_kills_before, oom_kills())))

    def why_ended(self, name: str, code: int, oom: tuple[int | None, int | None]) -> str:
        """Why process `name` ended the run with `code` (launcher.exits; a full disk said as
        such; an inference server's port taken by another process named)."""
        message = exit_message(name, code, oom)
        if code == DISK_FULL_EXIT_CODE:
            message = stopped_text(name, self.run.root, self.run.log_file(name))
        if name in self.spec.servers:
            message += self.port_taken(name)
        return message

    def port_taken(self, name: str) -> str:
        """For an inference server that ended: '; its port N is held by ...' when another
        process listens on the port it was to serve on (it died on bind), else ''."""
        port = self.processes[name].port
        holder = port_holder(port) if port is not None else None
        return f"; its port {port} is held by {holder}" if holder else ""

    def finish(self) -> int:
        """Every process done: stopped, the measured totals recorded beside the estimate, and
        the run's reward curve said."""
        ignore_stop_signals("rl")
        self.stop_all(self.spec.shutdown_grace_s)
        self.clock.finish(self.run.root)  # measured totals beside the estimate
        self.write_state("finished")
        print(f"rl: run finished: {self.last_step_line}", flush=True)
        if (against := self.clock.against_estimate()) is not None:
            print(f"rl: {against}", flush=True)
        records = read_all_records(self.run.metrics, self.run.root)
        for line in reward_curve(records).splitlines():
            print(f"rl: {line}", flush=True)
        print(f"rl: curves as a PNG: rl plot {self.run.root}", flush=True)
        return 0

    def fail(self, name: str, code: int, message: str) -> int:
        """Process `name` failed the run: every other one stopped, the message and its log's
        last lines said, run.json's state "failed"; the launcher's exit code."""
        ignore_stop_signals("rl")
        self.stop_all(self.spec.shutdown_grace_s)
        log = self.run.log_file(name)
        print(f"rl: error: {message}; stopped the other components.", file=sys.stderr)
        print(f"rl: last lines of {log}:\n{tail(log)}", file=sys.stderr, flush=True)
        self.write_state("failed", failed_component=name, exit_code=code)  # a full disk: last
        return code if code > 0 else 1

    # -- start -------------------------------------------------------------------------------
    def start(self, name: str) -> Child:
        process = self.processes[name]
        started = children.start(name, process.command, process.log, process.env)
        child = Child(**vars(started))
        self.children[name] = child
        self.write_state("starting")
        return child

    @property
    def inference(self) -> list[Child]:
        """The inference servers started so far."""
        return [self.children[n] for n in self.spec.servers if n in self.children]

    def url(self, name: str) -> str:
        url = self.processes[name].url
        assert url is not None, f"{name} is no inference server"
        return url

    def wait_healthy(self, timeout_s: float) -> None:
        """Until every inference server answers /health as this attempt's own (or any component
        exits: the supervision loop reports it); TimeoutError(message, name) after
        `timeout_s`, ForeignServer when another program answers on a server's port. Then every
        component's stall clock starts: nothing could progress without inference."""
        servers = {c.name: self.url(c.name) for c in self.inference}
        watched = list(self.children.values())
        children.wait_healthy(servers, self.spec.server_nonce, timeout_s, watched)
        for child in self.children.values():
            child.clock.start(time.monotonic())

    def healthy(self, name: str) -> bool:
        """Whether server `name` answers /health now, as this attempt's own."""
        try:
            return probe_health(self.url(name), nonce=self.spec.server_nonce) is None
        except ForeignServer:
            return False

    # -- watch -------------------------------------------------------------------------------
    def poll(self) -> tuple[str, int] | None:
        """One supervision tick: (component, code) of a finished run or failure, else None."""
        self.update_view()
        live = {c.name: c.proc.pid for c in self.children.values() if c.proc.poll() is None}
        self.clock.sample_memory(live)
        for child in self.children.values():
            code = child.proc.poll()
            if code is None:
                continue
            if child in self.inference or code != 0:
                return child.name, code  # inference exiting at all (even 0) ends the run
        done = [c for c in self.children.values() if c not in self.inference]
        if done and all(c.proc.poll() == 0 for c in done):
            return "done", 0
        stalled = self.check_stalls()
        if stalled is not None:
            self.stall_message = stalled[1]
            return stalled[0], STALLED
        return None

    def update_view(self) -> None:
        records, self.metrics_offset = read_records(self.run.metrics, self.metrics_offset)
        for record in records:
            child = self.children.get(record.get("component", ""))
            if child is not None:
                child.clock.record(time.monotonic())
            self.clock.record(record)  # the trainer's steps: the time left
            if is_training_step(record):
                self.show_step(record_step_line(record), int(record["step"]))

    def show_step(self, line: str, step: int) -> None:
        total = self.spec.max_steps
        done = min(step + 1, total)
        width = 20
        bar = "#" * (width * done // total) + "-" * (width - width * done // total)
        print(f"[{bar}] {done}/{total} | {line.strip()}{self.clock.suffix()}", flush=True)
        self.last_step_line = line.strip()

    def probe_inference(self) -> None:
        """Inference's progress: its /health answering (asked every HEALTH_PROBE_S)."""
        now = time.monotonic()
        if now - self.last_health_probe < HEALTH_PROBE_S:
            return
        self.last_health_probe = now
        for child in self.inference:
            if self.healthy(child.name):
                child.clock.alive(time.monotonic())

    def check_stalls(self) -> tuple[str, str] | None:
        """(component, message) for a stopped component, components waiting on each other in
        a circle, or the stuck root of a chain of waits (launcher.stall); None while every
        component works, waits on one that works, or is within its limit. The blamed
        components' stacks are then in their logs."""
        self.probe_inference()
        now = time.monotonic()
        for child in self.children.values():
            stopped = procs.is_stopped(child.proc.pid)
            since = (child.clock.stopped_since or now) if stopped else None
            child.clock.stopped_since = since
            if since is not None and now - since >= STOPPED_AFTER_S:
                where = dump_stacks(child.proc.pid, child.log)
                return child.name, (
                    f"{child.name} is stopped (SIGSTOP or a debugger: process state T) and has "
                    f"not run for {now - since:.0f} s; it was in {where}; "
                    f"the stacks of all its threads are at the end of {child.log}"
                )
        stall = find_stall(self.views(now))
        return None if stall is None else (stall.name, self.describe_stall(stall))

    def views(self, now: float) -> dict[str, View]:
        """Each live component's work (its CPU time, sampled), progress, limit and waits."""
        fixed = self.spec.stall_timeout_s
        live = {c.name for c in self.children.values() if c.proc.poll() is None}
        views = {}
        for child in self.children.values():
            if child.name not in live:
                continue
            clock = child.clock
            clock.sample_cpu(child.proc.pid, now)
            waits = self.waits.current(child.name, now, live)
            if waits:
                clock.waiting(now)
            views[child.name] = View(
                child.name,
                working=clock.working is not False,  # unknown yet: spared
                idle_s=now - clock.last_progress,
                work_idle_s=now - clock.last_work,
                limit_s=clock.limit_s(fixed),
                limit_from="stall_timeout_s" if fixed is not None else "its own step times",
                waits=waits,
                owes_progress=child not in self.inference,
                observable=self.processes[child.name].observable,
            )
        return views

    def describe_stall(self, stall: Stall) -> str:
        """The stall's message with where each blamed component is (its stacks dumped)."""
        if stall.circle:
            places = []
            for name in stall.circle:
                child = self.children[name]
                places.append(f"{name} in {dump_stacks(child.proc.pid, child.log)} ({child.log})")
            where = ", ".join(places)
            return f"{stall.message}; {where} (the stacks of all threads are there)"
        child = self.children[stall.name]
        where = dump_stacks(child.proc.pid, child.log)
        return (
            f"{stall.message}; it is waiting in {where}; the stacks of all its threads are at "
            f"the end of {child.log}"
        )

    # -- stop --------------------------------------------------------------------------------
    def stop_all(self, grace_s: float) -> None:
        """SIGTERM every process group, SIGKILL whatever is left after the grace period."""
        self.stopping = True
        children.stop(list(self.children.values()), grace_s)

    def write_state(self, status: str, **extra: object) -> None:
        state = {
            "launcher_pid": os.getpid(),
            "attempt": self.spec.attempt,
            "pids": {c.name: c.proc.pid for c in self.children.values()},
            procs.IDENTITIES: {
                procs.LAUNCHER: self.identity,
                **{c.name: c.identity for c in self.children.values() if c.identity},
            },
            **self.spec.record,  # the GPU map, the servers' addresses, the machine's choices
            **self.clock.state(),  # estimate, time left, and at the end the measured totals
            **extra,
        }
        record_state(self.run, status, **state)


def tail(path: Path, num_lines: int = 30) -> str:
    """The last `num_lines` lines of a log, from its last LOG_TAIL bytes read back bounded
    (rlcore.files.readback: a FIFO or a device there is said, never waited on)."""
    try:
        data, _ = read_tail(path, LOG_TAIL)
    except FileNotFoundError:
        return "(no log)"
    except Damaged as err:
        return f"({err})"
    return "\n".join(decode(data).splitlines()[-num_lines:])
