"""The stall watch (launcher.stall): a limit that follows the run's own pace, waits recorded by
the components and read by rl, and the trainer and orchestrator waiting on each other."""

import os
from contextlib import ExitStack

import pytest

from launcher import stall
from launcher.stall import Clock, WaitTimes
from rlcore import waits
from rlcore.attempt import ATTEMPT_ENV


def test_the_limit_follows_the_longest_gap_between_records():
    clock = Clock(last_progress=0.0)
    assert clock.limit_s(None) == stall.AUTO_STARTUP_S  # nothing measured yet
    clock.record(500.0)  # the first record: startup, not a step
    assert clock.longest_gap_s == 0 and clock.limit_s(None) == stall.AUTO_FLOOR_S
    clock.record(510.0)
    clock.record(610.0)  # a slow step: 100 s
    clock.record(620.0)
    assert clock.longest_gap_s == 100.0
    assert clock.limit_s(None) == stall.AUTO_FACTOR * 100.0
    assert clock.limit_s(42.0) == 42.0  # stall_timeout_s set: a fixed limit


def test_a_component_using_cpu_is_moving(monkeypatch):
    used = iter([10.0, 10.0, 40.0])
    monkeypatch.setattr(stall, "session_cpu_s", lambda session: next(used))
    clock = Clock(last_progress=0.0)
    clock.sample_cpu(1, now=100.0)  # the first sample only sets the baseline
    assert clock.last_progress == 0.0
    clock.sample_cpu(1, now=105.0)  # too soon: not sampled
    clock.sample_cpu(1, now=120.0)  # idle for 20 s
    assert clock.last_progress == 0.0
    clock.sample_cpu(1, now=140.0)  # 30 CPU seconds in 20 s
    assert clock.last_progress == 140.0


def test_session_cpu_counts_this_process():
    spent = sum(range(2_000_000))  # some CPU time of our own
    assert spent and stall.session_cpu_s(os.getsid(0)) > 0


HELD = ExitStack()
"""Waits entered by a test stay open until it ends (a dropped one would close itself)."""


def record_wait(run_root, component, what, peer, monkeypatch, attempt="a1"):
    monkeypatch.setenv(ATTEMPT_ENV, attempt)
    waits.setup(run_root, component)
    return HELD.enter_context(waits.waiting(what, peer))


@pytest.fixture(autouse=True)
def fresh_board(monkeypatch):
    monkeypatch.setattr(waits, "_board", {})
    yield
    HELD.close()


def test_waits_are_recorded_and_cleared(tmp_path, monkeypatch):
    record_wait(tmp_path, "trainer", "batch 3", "orchestrator", monkeypatch)
    record = waits.read(tmp_path, "trainer")
    assert record["waiting_for"] == "batch 3" and record["peer"] == "orchestrator"
    assert record["attempt"] == "a1" and record["pid"] == os.getpid()
    HELD.close()
    assert waits.read(tmp_path, "trainer")["waiting_for"] is None
    assert WaitTimes(tmp_path, "a1").current("trainer", 0.0) is None


def test_a_wait_is_timed_by_its_sequence_number(tmp_path, monkeypatch):
    record_wait(tmp_path, "orchestrator", "policy step 2", "trainer", monkeypatch)
    times = WaitTimes(tmp_path, "a1")
    assert times.current("orchestrator", 100.0)[1] == 0.0
    assert times.current("orchestrator", 130.0)[1] == 30.0
    HELD.enter_context(waits.waiting("policy step 3", "trainer"))  # a new wait: its own clock
    assert times.current("orchestrator", 140.0)[1] == 0.0
    assert WaitTimes(tmp_path, "a2").current("orchestrator", 140.0) is None  # another attempt


def test_waiting_on_each_other_is_a_deadlock_after_a_while(tmp_path, monkeypatch):
    record_wait(tmp_path, "trainer", "a request for policy step 3", "orchestrator", monkeypatch)
    monkeypatch.setattr(waits, "_board", {})
    record_wait(tmp_path, "orchestrator", "policy step 3", "trainer", monkeypatch)
    times = WaitTimes(tmp_path, "a1")
    assert times.deadlock(0.0) is None
    assert times.deadlock(stall.DEADLOCK_AFTER_S - 1) is None
    found = times.deadlock(stall.DEADLOCK_AFTER_S)
    assert "waiting for each other" in found and "policy step 3" in found


def test_waiting_on_inference_is_no_deadlock(tmp_path, monkeypatch):
    record_wait(tmp_path, "trainer", "batch 0", "orchestrator", monkeypatch)
    monkeypatch.setattr(waits, "_board", {})
    record_wait(tmp_path, "orchestrator", "inference to answer /health", "inference", monkeypatch)
    times = WaitTimes(tmp_path, "a1")
    times.deadlock(0.0)
    assert times.deadlock(1000.0) is None


def test_without_setup_waiting_writes_nothing(tmp_path):
    with waits.waiting("batch 0", "orchestrator"):
        pass
    assert not (tmp_path / waits.STATE_DIR).exists()
