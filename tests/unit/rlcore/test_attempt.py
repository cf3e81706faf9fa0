"""Attempts told apart by identity, never by clocks (rlcore.runs.attempt): the signal files of an
earlier attempt are stale however recent, this attempt's are current however old, on both
weight transports. Stamps of real other processes: tests/integration/test_attempt_writers.py."""

import asyncio
import time

import pytest

from orchestrator.collective import CollectiveReceiver
from orchestrator.weights import FilesystemReceiver
from rlcore.contracts import collective
from rlcore.runs.attempt import ATTEMPT_ENV, AttemptFilter, stamp
from rlcore.runs.rundir import RunDir


def stamp_of(monkeypatch, attempt: str | None) -> dict:
    if attempt is None:
        monkeypatch.delenv(ATTEMPT_ENV, raising=False)
    else:
        monkeypatch.setenv(ATTEMPT_ENV, attempt)
    return stamp()


def test_under_rl_only_the_same_attempt_counts(monkeypatch):
    old = stamp_of(monkeypatch, "attempt-1")
    new = stamp_of(monkeypatch, "attempt-2")
    reader = AttemptFilter("attempt-2")
    assert reader.current(new) and not reader.current(old)
    assert not AttemptFilter("attempt-1").current(new)
    assert not reader.current(stamp_of(monkeypatch, None))  # a component started alone
    assert not reader.current(None) and not reader.current({"attempt": None})


def test_a_reused_pid_is_another_process(monkeypatch):
    mine = stamp_of(monkeypatch, None)
    assert not AttemptFilter(None).current(mine | {"started": mine["started"] + 1.0})


@pytest.mark.parametrize("order", ["trainer first", "orchestrator first"])
def test_collective_offer_of_this_attempt_is_taken_whenever_written(tmp_path, monkeypatch, order):
    """The resume hang: the trainer offered the resume step's policy before the orchestrator
    built its receiver; comparing times called it stale and both waited for 30 minutes."""
    run = RunDir(tmp_path)
    monkeypatch.setenv(ATTEMPT_ENV, "attempt-2")
    if order == "trainer first":
        collective.write_offer(run.transfer, 3, {"id": "g2"}, {"names": []})
        time.sleep(1.2)  # the old check allowed one second of slack
        receiver = CollectiveReceiver(run, trusted_upto=3)
    else:
        receiver = CollectiveReceiver(run, trusted_upto=3)
        collective.write_offer(run.transfer, 3, {"id": "g2"}, {"names": []})
    assert asyncio.run(receiver.wait(3, 3, timeout_s=2)) == 3


def test_collective_offer_of_an_earlier_attempt_is_stale_even_if_newer(tmp_path, monkeypatch):
    run = RunDir(tmp_path)
    monkeypatch.setenv(ATTEMPT_ENV, "attempt-2")
    receiver = CollectiveReceiver(run, trusted_upto=3)
    monkeypatch.setenv(ATTEMPT_ENV, "attempt-1")
    collective.write_offer(run.transfer, 4, {"id": "g1"}, {"names": []})
    assert receiver.newest() is None
    with pytest.raises(Exception, match="offered no policy step 3..4"):
        asyncio.run(receiver.wait(3, 4, timeout_s=0.5))


def test_filesystem_policy_of_an_earlier_attempt_is_stale(tmp_path, monkeypatch):
    run = RunDir(tmp_path)
    for step, attempt in ((2, "attempt-1"), (3, "attempt-1"), (4, "attempt-2")):
        monkeypatch.setenv(ATTEMPT_ENV, attempt)
        run.weight_dir(step).mkdir(parents=True)
        run.mark_weights_stable(step)
    receiver = FilesystemReceiver(run, trusted_upto=2)  # resumed from step 2 in attempt-2
    assert receiver.ready(2)  # the resume point: valid whoever wrote it
    assert not receiver.ready(3)  # written by the abandoned attempt
    assert receiver.ready(4)
    (run.weight_dir(3) / "STABLE").write_text(f"{time.time()}\n")  # the old layout: a time
    assert not receiver.ready(3)


def test_done_names_its_group(tmp_path, monkeypatch):
    monkeypatch.setenv(ATTEMPT_ENV, "attempt-2")
    filter_ = AttemptFilter()
    collective.mark_done(tmp_path, "g1")
    assert collective.is_done(tmp_path, "g1", filter_)
    assert not collective.is_done(tmp_path, "g2", filter_)  # a later trainer start's group
    collective.mark_done(tmp_path, None)  # the orchestrator saw no offer at all
    assert collective.is_done(tmp_path, "g2", filter_)
    assert not collective.is_done(tmp_path, "g2", AttemptFilter("attempt-3"))
