"""The one way a launcher starts a process and stops it: `rl`'s components, `rl sft`'s `sft`,
`evals`' own inference server (also under `rl eval`), and the short commands they run to the
end (`sft --check-data`, `rl export`).

A child
- leads a session of its own: a stop reaches it and everything it started (its process group),
  and a Ctrl-C typed at the terminal reaches only the launcher, which decides;
- gets SIGTERM the moment its launcher dies, however it dies (`kill -9` included), through
  Linux's parent-death signal (PR_SET_PDEATHSIG). Linux sends it when the *thread* that started
  the child ends, so children are started from the main thread only. A child that starts
  processes of its own stops them on SIGTERM (inference stops its engine processes:
  inference/server.py, whose forked engine processes also die with it: inference/cpu_fork.py);
- writes stdout and stderr to its log, appended under a header line, unbuffered;
- is recorded by identity (rlcore.procs) right after the start, for `rl stop` and `rl status`.

`stop` sends SIGTERM to each child's process group, SIGKILL to the groups after the grace
period, and reaps. `wait_healthy` waits, with a deadline, until inference servers prove they are
the ones this launcher started (rlcore.health), returning early when a child exits.
"""

import ctypes
import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore import procs
from rlcore.health import probe_health
from rlcore.poll import wait_until
from rlcore.protocol import HEALTH_ROUTE

PR_SET_PDEATHSIG = 1
HEALTH_INTERVAL_S = 1.0
"""How often `wait_healthy` asks each server that has not answered yet."""
REAP_S = 5.0
HEADER = "===== attempt"
"""How the line that `start` writes to a child's log before the child's output begins."""
"""How long `stop` waits for a process group's leader after its SIGKILL."""


@dataclass
class Child:
    """A started process: its name (for messages and run.json), Popen, log and identity."""

    name: str
    proc: subprocess.Popen
    log: Path | None
    identity: dict | None = None
    """Taken right after the start (rlcore.procs): what `rl stop/status` prove the pid by."""

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
        proc = popen(command, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                     env=full_env)  # fmt: skip
    return Child(name, proc, log, identity=procs.identity(proc.pid))


def run(command: list[str], grace_s: float = 10.0, **kwargs: Any) -> subprocess.CompletedProcess:
    """`subprocess.run` for a short child (`kwargs` as for it: capture_output, text, stdout):
    started as every child is, and stopped (`stop`) if this process is interrupted."""
    capture = kwargs.pop("capture_output", False)
    if capture:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = popen(command, **kwargs)
    try:
        out, err = proc.communicate()
    except BaseException:
        stop([Child("command", proc, None)], grace_s)
        raise
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


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


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_healthy(
    servers: dict[str, str], nonce: str | None, timeout_s: float, children: list[Child]
) -> None:
    """Until every server (name -> root URL) answers /health and proves `nonce`; returns early
    when any of `children` has exited (the caller reports it). TimeoutError(message, name)
    after `timeout_s`; rlcore.health.ForeignServer as soon as another program answers at a
    server's address; rlcore.poll.Stop on a stop request."""
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
