"""A run's pace read back from metrics.jsonl counts the orchestrator's training batches only:
an in-run eval record (logged at step n before batch n is written) is no batch, in the time
left read back (`rl status`, `rl view`) and in the launcher's live clock alike."""

import pytest

from launcher.eta import RunClock
from rlcore.forecast.progress import from_records

ESTIMATE = {"step_s": 10.0, "end_s": 0.0}


def batch(step: int, when: float) -> dict:
    return {"component": "orchestrator", "step": step, "time": when, "reward": 0.5}


def evaluation(step: int, when: float) -> dict:
    return {"component": "orchestrator", "step": step, "time": when, "eval/add/reward": 0.25}


def records_with_evals() -> list[dict]:
    """Batches 0-3 written at 100, 110, 120, 130 s, each after the eval of its step at 95, 105, 115,
    125 s, and a fifth eval (step 4) at 135 s with no batch after it."""
    found = []
    for step in range(4):
        found += [evaluation(step, 95.0 + 10 * step), batch(step, 100.0 + 10 * step)]
    return [*found, evaluation(4, 135.0)]


def test_an_eval_record_is_no_batch_in_the_progress_read_back():
    progress = from_records(ESTIMATE, records_with_evals(), max_steps=10)
    assert progress.batches == {1: 100.0, 2: 110.0, 3: 120.0, 4: 130.0}
    assert progress.intervals() == [10.0, 10.0, 10.0]


def test_an_eval_record_is_no_batch_in_the_launchers_clock():
    clock = RunClock(None, max_steps=10, components=["trainer", "orchestrator"])
    for record in records_with_evals():
        clock.record(record)
    assert sorted(clock.progress.batches) == [1, 2, 3, 4]


def test_a_batch_whose_reward_is_damaged_is_no_batch():
    damaged = {"component": "orchestrator", "step": 0, "time": 100.0, "reward": "0.5"}
    assert from_records(ESTIMATE, [damaged], max_steps=10).batches == {}


def test_the_batches_before_a_trained_policy_are_read_back_as_the_live_clock_takes_them():
    """run.json's estimate says how many batches need no trained policy; a forged figure counts
    as unknown (every batch then counts), never as an error."""
    records = [batch(step, 100.0 + 10 * step) for step in range(4)]
    estimate = {**ESTIMATE, "untrained_batches": 2}
    assert from_records(estimate, records, max_steps=10).intervals() == [10.0, 10.0]
    for forged in ("2", True, -1, 10**9, 2.5):
        progress = from_records({**ESTIMATE, "untrained_batches": forged}, records, max_steps=10)
        assert progress.untrained_batches == 0


def test_the_launchers_clock_takes_the_same_batches_from_its_estimate():
    from known_speeds import FLAT, SMALL

    from rlcore.forecast import model
    from rlcore.forecast.model import Job

    forecast = model.estimate(Job(max_steps=10, rollouts=4, trainer_peak=1.0), SMALL, FLAT)
    assert forecast.untrained_batches == 2  # async_level 1
    clock = RunClock(forecast, max_steps=10, components=["trainer", "orchestrator"])
    assert clock.progress.untrained_batches == 2
    record = forecast.record()
    assert clock.progress.estimated_start_s == pytest.approx(record["start_s"] - record["warmup_s"])
    assert record["untrained_batches"] == 2
    # the time left at the start is the estimate's own wall time
    assert clock.progress.left_s(clock.started) == pytest.approx(record["wall_s"], abs=0.2)


def test_a_lora_runs_time_left_at_the_start_is_its_estimated_wall():
    """A LoRA run's first steps are the base policy's (no adapter yet), shorter than the rest:
    the clock takes the estimate's steps on average and its own warm-up, not its later step."""
    estimate = {"step_s": 15.0, "start_s": 25.0, "end_s": 2.0, "wall_s": 67.0, "warmup_s": 5.0}
    progress = from_records(estimate, [], max_steps=4)
    assert progress.estimated_step_s == pytest.approx((67.0 - 25.0 - 2.0) / 4)
    assert progress.left_s(0.0) == pytest.approx(4 * 10.0 + 5.0 + 2.0)  # the start is not known
    from rlcore.forecast.progress import from_estimate

    assert from_estimate(estimate, 4, start=100.0).left_s(100.0) == pytest.approx(67.0)


@pytest.mark.parametrize(
    ("times", "step_s"),
    [
        ((10.0, 14.0, 18.0, 22.2, 26.0, 36.0), 4.0),  # the median, the last (validation) aside
        ((10.0, 14.5), 4.5),  # one interval: it, whatever it holds
    ],
)
def test_a_finished_runs_measured_step_leaves_out_the_last_which_holds_the_final_work(
    tmp_path, times, step_s
):
    clock = RunClock(None, max_steps=len(times), components=["sft"])
    for done, at in enumerate(times, start=1):
        clock.progress.step_done(done, clock.started + at)
    assert clock.finish(tmp_path)["step_s"] == pytest.approx(step_s)
