"""rlcore.processes.procs' process facts on real processes (the one reader of them: no module parses
/proc by hand): a start time that tells a reused pid, the stopped state the watchdog spares,
the machine's available memory and this process's library mappings."""

import os
import signal
import subprocess
import sys

import psutil
import pytest

from rlcore.processes import heap, procs
from rlcore.processes.poll import wait_until

pytestmark = pytest.mark.integration


def test_start_time_and_stopped_state_of_a_real_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = procs.started(child.pid)
        assert procs.same_start(started, psutil.Process(child.pid).create_time())
        assert not procs.same_start(started, started + 1.0)  # another process on that pid
        assert procs.same_start(procs.started(os.getpid()), procs.identity()["create_time"])
        assert not procs.is_stopped(child.pid)
        os.kill(child.pid, signal.SIGSTOP)
        wait_until(lambda: procs.is_stopped(child.pid), 10, 0.05, "the child to stop")
        os.kill(child.pid, signal.SIGCONT)
        wait_until(lambda: not procs.is_stopped(child.pid), 10, 0.05, "the child to go on")
    finally:
        child.kill()
        child.wait()
    assert procs.started(child.pid) is None and not procs.is_stopped(child.pid)


def test_available_memory_and_own_library_mappings():
    available = procs.available_memory()
    assert available is not None and 0 < available <= psutil.virtual_memory().total
    mappings = procs.own_mappings()
    assert any("x" in perms and heap.is_library(path) for _, perms, path in mappings), mappings
    assert heap.library_ranges(mappings)  # the interpreter's own libraries at least
