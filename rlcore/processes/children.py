"""The one way a launcher starts a process and stops it: `rl`'s components, `rl sft`'s `sft`,
`evals`' own inference server (also under `rl eval`), and the commands they run to the end
(`sft --check-data`, `rl export`'s trainer export, the SLURM tools, nvidia-smi, docker).

A child
- leads a session of its own: a stop reaches it and everything it started (its process group),
  and a Ctrl-C typed at the terminal reaches only the launcher, which decides;
- gets SIGTERM the moment its launcher dies, however it dies (`kill -9` included), through
  Linux's parent-death signal (PR_SET_PDEATHSIG). Linux sends it when the *thread* that started
  the child ends, so children are started from the main thread only. A child that starts
  processes of its own stops them on SIGTERM (inference stops its engine processes:
  inference/server.py, whose forked engine processes also die with it: inference/cpu_fork.py;
  torchrun its ranks); descendants that lead sessions of their own, out of reach of a signal to
  the group, are stopped by `stop_descendants` (the orchestrator's and evals' environments'
  MCP servers: `stop_descendants_on_exit`);
- writes stdout and stderr to its log, appended under a header line, unbuffered;
- is recorded by identity (rlcore.processes.procs) right after the start, for `rl stop` and `rl
status`.

`stop` sends SIGTERM to each child's process group, SIGKILL to the groups after the grace
period, and reaps. `wait_healthy` waits, with a deadline, until inference servers prove they are
the ones this launcher started (rlcore.processes.health), returning early when a child exits.
"""

import atexit
import ctypes
import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from rlcore.processes import procs
from rlcore.processes.health import HEALTH_ROUTE, probe_health
from rlcore.processes.poll import wait_until

PR_SET_PDEATHSIG = 1
HEALTH_INTERVAL_S = 1.0
"""How often `wait_healthy` asks each server that has not answered yet."""
REAP_S = 5.0
"""How long `stop` waits for a process group's leader after its SIGKILL (and
`stop_descendants` for the processes it killed)."""
HEADER = "===== attempt"
"""How the line that `start` writes to a child's log before the child's output begins."""
DESCENDANTS_GRACE_S = 5.0
"""How long a child stopped by SIGTERM gives its descendants (`stop_descendants_on_exit`):
well within the launcher's grace period for the child itself."""
DESCENDANTS_POLL_S = 0.5


@dataclass
class Child:
    """A started process: its name (for messages and run.json), Popen, log and identity."""

    name: str
    proc: subprocess.Popen
    log: Path | None
    identity: dict | None = None
    """Taken right after the start (rlcore.processes.procs): what `rl stop/status` prove the pid
    by."""

    @property
    def pid(self) -> int:
        return self.proc.pid


@functools.cache
def libc_prctl() -> Callable[..., int] | None:
    """libc's prctl, resolved once in the parent (a forked child then only calls it: no
    dlopen between fork and exec); None where there is none (not Linux)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """In a child: `sig` when the thread that started it ends. With `parent` (the launcher's
    pid), `sig` at once if the launcher has already gone, as it may have between the fork and
    this request."""
    prctl = libc_prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)


def popen(command: list[str], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen for a child: its own session, the parent-death signal, from the main
    thread (where alone that signal waits for the launcher's whole life)."""
    assert threading.current_thread() is threading.main_thread(), (
        "children are started from the main thread: Linux sends their parent-death signal when "
        "the starting thread ends"
    )
    libc_prctl()
    hook = functools.partial(die_with_parent, signal.SIGTERM, os.getpid())
    return subprocess.Popen(command, start_new_session=True, preexec_fn=hook, **kwargs)


def start(name: str, command: list[str], log: Path, env: dict[str, str] | None = None) -> Child:
    """Start `command` as child `name`, its output appended to `log` under a header line;
    `env` adds to this process's environment."""
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    with log.open("a") as f:
        f.write(f"\n{HEADER} {time.strftime('%Y-%m-%d %H:%M:%S')} : {' '.join(command)}\n")
        f.flush()
        proc = popen(
            command, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env
        )
    return Child(name, proc, log, identity=procs.identity(proc.pid))


def run(
    command: list[str],
    grace_s: float = 10.0,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """`subprocess.run` for a short child (`timeout`, `check` and `kwargs` as for it:
    capture_output, text, stdout, env): started as every child is, and stopped (`stop`) when
    it outlasts `timeout` (subprocess.TimeoutExpired) or this process is interrupted."""
    capture = kwargs.pop("capture_output", False)
    if capture:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = popen(command, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        stop([Child("command", proc, None)], grace_s)
        raise
    done = subprocess.CompletedProcess(command, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def stop(children: list[Child], grace_s: float) -> None:
    """SIGTERM to every child's process group, SIGKILL to every group after `grace_s` (at
    once when all leaders have exited: a leader may leave members behind), then reap."""
    for child in children:
        signal_group(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        try:
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for child in children:
        signal_group(child.pid, signal.SIGKILL)
        try:
            child.proc.wait(timeout=REAP_S)
        except subprocess.TimeoutExpired:
            pass


def is_resource_tracker(process: psutil.Process) -> bool:
    """multiprocessing's resource tracker: it exits by itself, after cleaning up, once every
    process holding its pipe has gone."""
    return "resource_tracker" in " ".join(process.cmdline())


def stop_descendants(
    grace_s: float,
    spare: Callable[[psutil.Process], bool] = is_resource_tracker,
    say: Callable[[str], None] | None = None,
) -> None:
    """SIGTERM to every process this one started, directly or not, but those `spare` picks
    (default: a resource tracker); SIGKILL (said to `say`) to those still alive after
    `grace_s`, then reap. The descendants are listed again while waiting: one may still be
    starting others. Reaches processes that lead sessions of their own, which a signal to this
    process's group misses."""
    known: dict[int, psutil.Process] = {}

    def all_gone() -> bool:
        for process in psutil.Process().children(recursive=True):
            if process.pid not in known and not _suppressed(spare, process):
                known[process.pid] = process
                _suppressed(psutil.Process.terminate, process)
        alive = [p for p in known.values() if procs.running(p)]
        if alive:  # also this loop's pause: it returns as soon as they have all exited
            psutil.wait_procs(alive, timeout=DESCENDANTS_POLL_S)
        return not alive

    try:
        wait_until(all_gone, grace_s, 0.0, "this process's descendants to exit")
    except TimeoutError:
        alive = [p for p in known.values() if procs.running(p)]
        if say is not None:
            names = ", ".join(
                f"{p.pid} {_suppressed(psutil.Process.name, p) or '?'}" for p in alive
            )
            say(f"killing child processes that ignored SIGTERM: {names}")
        for process in alive:
            _suppressed(psutil.Process.kill, process)
        psutil.wait_procs(alive, timeout=REAP_S)


def stop_descendants_on_exit(grace_s: float = DESCENDANTS_GRACE_S) -> None:
    """From now on this process stops its descendants (`stop_descendants`) when it exits, and
    on SIGTERM before it ends as SIGTERM always did. For a child whose descendants may lead
    sessions of their own, as an MCP client starts each stdio server; the parent-death signal
    that ends it with its launcher is a SIGTERM. A library may take SIGTERM over (verifiers'
    environments turn it into SystemExit, and their cleanup may start a server on the way out):
    then the exit does it."""

    def handler(signum: int, _frame: Any) -> None:
        signal.signal(signum, signal.SIG_DFL)
        stop_descendants(grace_s)
        os.kill(os.getpid(), signum)

    atexit.register(stop_descendants, grace_s)
    signal.signal(signal.SIGTERM, handler)


def _suppressed(action: Callable[[psutil.Process], Any], process: psutil.Process) -> Any:
    """`action(process)`, or None if the process has gone (or cannot be inspected)."""
    try:
        return action(process)
    except psutil.Error:
        return None


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_healthy(
    servers: dict[str, str], nonce: str | None, timeout_s: float, children: Sequence[Child]
) -> None:
    """Until every server (name -> root URL) answers /health and proves `nonce`; returns early
    when any of `children` has exited (the caller reports it). TimeoutError(message, name)
    after `timeout_s`; rlcore.processes.health.ForeignServer as soon as another program answers at a
    server's address; rlcore.processes.poll.Stop on a stop request."""
    waiting = dict(servers)
    last: dict[str, str] = {}

    def ready() -> bool:
        for name, url in list(waiting.items()):
            problem = probe_health(url, nonce=nonce)
            if problem is None:
                del waiting[name]
            else:
                last[name] = problem
        return not waiting or any(c.proc.poll() is not None for c in children)

    try:
        wait_until(ready, timeout_s, HEALTH_INTERVAL_S, "the inference servers")
    except TimeoutError:
        name, url = next(iter(waiting.items()))
        message = (
            f"{name} did not answer {url}{HEALTH_ROUTE} within {timeout_s:.0f} s "
            f"(last: {last.get(name, 'no answer')})"
        )
        raise TimeoutError(message, name) from None
