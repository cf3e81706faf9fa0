"""rlcore.processes.children with real processes: a child and what it starts go when its launcher is
killed with SIGKILL; a stop reaches the whole process group and ends with SIGKILL after the
grace period; children are started from the main thread only."""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from rlcore.processes import children
from tests.integration.helpers import MARK_ENV, REPO, gone_within, kill_marked, marked

pytestmark = pytest.mark.integration

LAUNCHER = """
import sys, time
from pathlib import Path
from rlcore.processes import children

log = Path(sys.argv[1])
child = children.start("sleeper", [sys.executable, "-c", sys.argv[2]], log)
while "\\nstarted\\n" not in log.read_text():
    time.sleep(0.05)
print(child.pid, flush=True)
sys.stdin.read()  # until the test kills this launcher
"""
# A child that starts a grandchild in its own group and ignores SIGTERM for a while.
STUBBORN = """
import signal, subprocess, sys, time
subprocess.Popen(["sleep", "60"])
signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM: ignored", flush=True))
print("started", flush=True)
time.sleep(60)
"""
SLEEPER = "import time; print('started', flush=True); time.sleep(60)"
# A child that stops its descendants on exit and starts two that lead sessions of their own
# (as an MCP client starts its stdio servers), out of reach of a signal to its group; with
# `library`, a library then takes SIGTERM over and turns it into SystemExit (as verifiers'
# environments do).
SWEEPING = """
import signal, subprocess, sys, time
from rlcore.processes import children
children.stop_descendants_on_exit()
if sys.argv[1] == "library":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
for _ in range(2):
    subprocess.Popen(["sleep", "60"], start_new_session=True)
print("started", flush=True)
time.sleep(60)
"""


def test_a_child_goes_with_its_launcher_killed_with_sigkill(tmp_path):
    mark = uuid.uuid4().hex
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "child.log"), SLEEPER],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, MARK_ENV: mark},
    )
    try:
        pid = int(launcher.stdout.readline())
        assert os.getsid(pid) == pid  # a session (and process group) of its own
        assert pid in marked(mark)
        launcher.kill()
        launcher.wait()
        gone_within(mark, 5)
        text = (tmp_path / "child.log").read_text()
        assert text.startswith(f"\n{children.HEADER} ") and "\nstarted\n" in text
    finally:
        kill_marked(mark)


@pytest.mark.parametrize("sigterm", ["own", "library"])
def test_descendants_in_sessions_of_their_own_go_with_the_launcher(tmp_path, sigterm):
    """kill -9 of the launcher: its child gets SIGTERM and stops the grandchildren that a
    signal to its group would miss (mutant: without stop_descendants_on_exit both sleeps
    live on)."""
    mark = uuid.uuid4().hex
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            LAUNCHER,
            str(tmp_path / "child.log"),
            SWEEPING.replace("sys.argv[1]", repr(sigterm)),
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, MARK_ENV: mark},
    )
    try:
        int(launcher.stdout.readline())
        assert len(marked(mark)) == 4  # launcher, child, two sleeps
        launcher.kill()
        launcher.wait()
        gone_within(mark, 10)
    finally:
        kill_marked(mark)


def test_stop_reaches_the_whole_group_and_kills_after_the_grace_period(tmp_path):
    mark = uuid.uuid4().hex
    log = tmp_path / "stubborn.log"
    child = children.start("stubborn", [sys.executable, "-c", STUBBORN], log, {MARK_ENV: mark})
    try:
        wait_s = 0.0
        while "\nstarted\n" not in log.read_text() and wait_s < 30:  # not the header's
            time.sleep(0.1)
            wait_s += 0.1
        assert len(marked(mark)) == 2  # the child and its `sleep`
        started = time.monotonic()
        children.stop([child], grace_s=1.0)
        took_s = time.monotonic() - started
        assert child.proc.returncode == -signal.SIGKILL
        assert 1.0 <= took_s < 1.0 + children.REAP_S
        gone_within(mark, 2)
        assert "\nSIGTERM: ignored\n" in log.read_text()
    finally:
        kill_marked(mark)


def test_children_are_started_from_the_main_thread_only(tmp_path):
    errors = []

    def start() -> None:
        try:
            children.start("x", ["true"], tmp_path / "x.log")
        except AssertionError as err:
            errors.append(str(err))

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    assert errors and "parent-death signal" in errors[0]


def test_wait_healthy_returns_when_a_child_exits_and_names_the_server_at_the_deadline(tmp_path):
    short = children.start("short", ["true"], tmp_path / "short.log")
    started = time.monotonic()
    children.wait_healthy({"inference": "http://127.0.0.1:9"}, "n", 60, [short])
    assert time.monotonic() - started < 10 and short.proc.returncode == 0
    long = children.start("long", ["sleep", "60"], tmp_path / "long.log")
    try:
        with pytest.raises(TimeoutError) as timed_out:
            children.wait_healthy({"inference": "http://127.0.0.1:9"}, "n", 1.5, [long])
        message, name = timed_out.value.args
        assert name == "inference"
        assert message.startswith("inference did not answer http://127.0.0.1:9/health within")
    finally:
        children.stop([long], 1)


def test_run_stops_a_command_that_outlasts_its_timeout(tmp_path):
    """The group goes too (mutant: no stop on TimeoutExpired leaves both sleeps running)."""
    mark = uuid.uuid4().hex
    command = ["sh", "-c", "sleep 60 & sleep 60"]
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            children.run(command, grace_s=1.0, timeout=0.5, env={**os.environ, MARK_ENV: mark})
        gone_within(mark, 3)
        done = children.run(["sh", "-c", "echo hi; exit 3"], capture_output=True, text=True)
        assert (done.returncode, done.stdout) == (3, "hi\n")
        with pytest.raises(subprocess.CalledProcessError):
            children.run(["false"], check=True)
    finally:
        kill_marked(mark)
