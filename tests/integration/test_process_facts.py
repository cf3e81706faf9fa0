"""One rule for whether a process runs (rlcore.processes.procs.running, pid_alive): a zombie, a
child that has exited and is not reaped yet, has ended, for `rl stop`'s wait, the commands that
report a run's launcher and the children a component stops on its way out alike. Real processes: a
`sleep` that runs, and a `true` left unreaped."""

import subprocess

import psutil
import pytest

from launcher.commands.stop import ended
from rlcore.processes import procs
from rlcore.processes.poll import wait_until

pytestmark = pytest.mark.integration


def unreaped_exit() -> subprocess.Popen:
    """A child that has exited and that nobody has waited for: a zombie."""
    child = subprocess.Popen(["true"])

    def exited() -> bool:
        return psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE

    wait_until(exited, 30, 0.05, "`true` to exit")
    return child


def test_a_running_process_runs_and_a_zombie_has_ended():
    sleeper = subprocess.Popen(["sleep", "60"])
    zombie = unreaped_exit()
    try:
        assert procs.running(psutil.Process(sleeper.pid)) and procs.pid_alive(sleeper.pid)
        assert not ended(psutil.Process(sleeper.pid))
        assert not procs.running(psutil.Process(zombie.pid))
        assert not procs.pid_alive(zombie.pid)
        assert ended(psutil.Process(zombie.pid))
    finally:
        sleeper.kill()
        sleeper.wait()
        zombie.wait()
    assert not procs.pid_alive(zombie.pid) and not procs.pid_alive(sleeper.pid)


def test_a_handle_whose_pid_was_reaped_has_ended():
    child = subprocess.Popen(["true"])
    handle = psutil.Process(child.pid)
    child.wait()
    assert not procs.running(handle) and ended(handle)
