"""Attempt stamps written by real other processes (rlcore.runs.attempt): a dead writer no reader saw
alive is stale, one a reader saw alive stays current after it exits."""

import json
import os
import subprocess
import sys

import pytest

from rlcore.processes.procs import started
from rlcore.runs.attempt import ATTEMPT_ENV, AttemptFilter, alive, stamp

pytestmark = pytest.mark.integration


def stamp_of(monkeypatch, attempt: str | None) -> dict:
    if attempt is None:
        monkeypatch.delenv(ATTEMPT_ENV, raising=False)
    else:
        monkeypatch.setenv(ATTEMPT_ENV, attempt)
    return stamp()


def exited_writer_stamp(attempt: str | None) -> dict:
    """A stamp written by a process that has exited since."""
    env = {k: v for k, v in os.environ.items() if k != ATTEMPT_ENV}
    if attempt is not None:
        env[ATTEMPT_ENV] = attempt
    code = "import json; from rlcore.runs.attempt import stamp; print(json.dumps(stamp()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_started_alone_a_live_or_seen_writer_counts_a_dead_unseen_one_not(monkeypatch):
    reader = AttemptFilter(None)
    assert reader.current(stamp_of(monkeypatch, None))  # this very process: alive
    assert alive(stamp()) is True
    dead = exited_writer_stamp(None)
    assert alive(dead) is False and not reader.current(dead)
    assert not reader.current(exited_writer_stamp("attempt-1"))  # an rl attempt's leftover
    elsewhere = dead | {"host": "another-node"}
    assert alive(elsewhere) is None and reader.current(elsewhere)


def test_a_writer_seen_alive_stays_current_after_it_exits():
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        its_start = started(writer.pid)
        assert its_start is not None
        its_stamp = {
            "attempt": None,
            "host": stamp()["host"],
            "pid": writer.pid,
            "started": its_start,
        }
        reader = AttemptFilter(None)
        assert reader.current(its_stamp)
    finally:
        writer.kill()
        writer.wait()
    assert alive(its_stamp) is False
    assert reader.current(its_stamp)  # e.g. the trainer's last policy once it has finished
    assert not AttemptFilter(None).current(its_stamp)  # a reader that never saw it alive
