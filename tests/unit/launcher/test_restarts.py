"""The one restart policy of `rl` and `rl sft` (`with_restarts` in launcher/launch.py), on
scripted attempts: what ends a run, where a restart resumes, the pause before it and the
no-progress rule."""

import pytest

from launcher import launch as restarts
from rlcore.files.disk_full import DISK_FULL_EXIT_CODE
from rlcore.processes import poll


class Run:
    """A run whose latest checkpoint moves as the script says."""

    def __init__(self, checkpoints: list[int | None]):
        self.checkpoints = checkpoints

    def latest_checkpoint(self) -> int | None:
        return self.checkpoints.pop(0)


def run_script(results, checkpoints, max_restarts, monkeypatch):
    """(exit code, the steps attempts started from, the pauses)."""
    started, pauses = [], []
    monkeypatch.setattr(poll, "sleep", pauses.append)
    monkeypatch.setattr(restarts, "install_stop_handlers", lambda: None)  # pytest keeps Ctrl-C
    script = iter(results)

    def attempt(step):
        started.append(step)
        return next(script)

    code = restarts.with_restarts(attempt, None, Run(checkpoints), max_restarts, "rl")
    return code, started, pauses


@pytest.mark.parametrize("final", [(0, False), (DISK_FULL_EXIT_CODE, False), (143, True)])
def test_success_a_full_disk_and_a_stop_are_final(final, monkeypatch):
    code, started, pauses = run_script([final], [], 5, monkeypatch)
    assert code == final[0] and started == [None] and pauses == []


def test_a_failure_restarts_from_the_latest_checkpoint_after_a_pause(monkeypatch, capsys):
    code, started, pauses = run_script([(1, False), (0, False)], [4], 3, monkeypatch)
    assert code == 0 and started == [None, 4] and pauses == [5.0]
    said = capsys.readouterr().out
    assert "rl: restarting in 5 s from checkpoint step 4 (restart 1 of 3)" in said


def test_the_pause_grows_to_its_cap_and_max_restarts_ends_it(monkeypatch):
    failures = [(1, False)] * 9
    code, started, pauses = run_script(failures, list(range(1, 9)), 8, monkeypatch)
    assert code == 1 and started == [None, *range(1, 9)]
    assert pauses == [5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 30.0, 30.0]


def test_two_failures_without_a_new_checkpoint_stop_for_good(monkeypatch, capsys):
    code, started, _ = run_script([(1, False)] * 3, [2, 2], 5, monkeypatch)
    assert code == 1 and started == [None, 2]
    assert "rl: error: failed twice at step 2; not restarting" in capsys.readouterr().err


def test_a_stop_during_the_pause_ends_the_run(monkeypatch):
    def stopped(_seconds):
        raise poll.Stop(2)

    monkeypatch.setattr(poll, "sleep", stopped)
    monkeypatch.setattr(restarts, "install_stop_handlers", lambda: None)
    code = restarts.with_restarts(lambda step: (1, False), None, Run([None]), 3, "rl sft")
    assert code == 130
