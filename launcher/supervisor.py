"""Starting the three processes and watching them until the run ends.

Consumes: a Plan whose resolved configs are already written. Produces: logs/<component>.log,
run.json and the live view on stdout. Waits for: inference /health, then any child to exit.
Unblocked by: a child exit, a signal (SIGINT/SIGTERM/SIGHUP), or a stall (launcher.stall)."""

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from launcher.eta import RunClock
from launcher.plan import Plan, numeric_choices, replica_config
from launcher.stall import (
    STOPPED_AFTER_S,
    Clock,
    Stall,
    View,
    WaitTimes,
    dump_stacks,
    find_stall,
)
from rlcore.files.readback import LOG_TAIL, Damaged, decode, read_tail
from rlcore.processes import children, procs
from rlcore.processes.health import ForeignServer, probe_health, server_url
from rlcore.reporting.metrics import is_training_step, read_records, record_step_line
from rlcore.runs.rundir import record_state

STALLED = -1000
"""poll()'s code for a component stopped for making no progress."""
HEALTH_PROBE_S = 5.0
"""How often a started inference server's /health is asked (its progress signal)."""


@dataclass
class Child(children.Child):
    """A component (rlcore.processes.children: own session, parent-death signal, log, identity) and
    its progress clock."""

    clock: Clock = field(default_factory=Clock)


class Supervisor:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.run = plan.run
        self.children: dict[str, Child] = {}
        self.last_step_line = ""
        self.stall_message = ""
        self.stopping = False
        self.last_health_probe = 0.0
        self.waits = WaitTimes(self.run.root, plan.attempt, plan.inference_names)
        self.identity = procs.identity()
        self.clock = RunClock(plan.forecast, plan.config.orchestrator.max_steps, plan.components)
        # Progress comes from metrics.jsonl; records of earlier attempts are not shown again.
        self.metrics_offset = self.run.metrics.stat().st_size if self.run.metrics.exists() else 0

    # -- start -------------------------------------------------------------------------------
    def start(self, name: str) -> Child:
        started = children.start(
            name, self.plan.command(name), self.run.log_file(name), self.plan.env(name)
        )
        child = Child(**vars(started))
        self.children[name] = child
        self.write_state("starting")
        return child

    @property
    def inference(self) -> list[Child]:
        """The inference servers started so far."""
        return [self.children[n] for n in self.plan.inference_names if n in self.children]

    def url(self, name: str) -> str:
        if name in self.plan.urls:
            return self.plan.urls[name]
        server = replica_config(self.plan.config, name).server
        return server_url(server.host, server.port)

    def port(self, name: str) -> int:
        """The port server `name` listens on (chosen free or given: launcher.prepare)."""
        return replica_config(self.plan.config, name).server.port

    def wait_healthy(self, timeout_s: float) -> None:
        """Until every inference server answers /health as this attempt's own (or any component
        exits: the supervision loop reports it); TimeoutError(message, name) after
        `timeout_s`, ForeignServer when another program answers on a server's port. Then every
        component's stall clock starts: nothing could progress without inference."""
        servers = {c.name: self.url(c.name) for c in self.inference}
        watched = list(self.children.values())
        children.wait_healthy(servers, self.plan.server_nonce, timeout_s, watched)
        for child in self.children.values():
            child.clock.start(time.monotonic())

    def healthy(self, name: str) -> bool:
        """Whether server `name` answers /health now, as this attempt's own."""
        try:
            return probe_health(self.url(name), nonce=self.plan.server_nonce) is None
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
        total = self.plan.config.orchestrator.max_steps
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
        fixed = self.plan.config.stall_timeout_s
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
                observable=not self.plan.wrappers.get(child.name),
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
            "attempt": self.plan.attempt,
            "pids": {c.name: c.proc.pid for c in self.children.values()},
            procs.IDENTITIES: {
                procs.LAUNCHER: self.identity,
                **{c.name: c.identity for c in self.children.values() if c.identity},
            },
            "gpu_map": self.plan.gpu_map,
            "inference_url": self.url("inference"),
            "inference_urls": [self.url(n) for n in self.plan.inference_names],
            "inference_ports": {n: self.port(n) for n in self.plan.inference_names},
            "machine": self.plan.machine.record() if self.plan.machine else None,
            "numeric_choices": numeric_choices(self.plan),
            "speed_choices": self.plan.speed.record() if self.plan.speed else None,
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
