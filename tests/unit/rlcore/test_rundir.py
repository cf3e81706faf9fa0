"""The run-directory lifecycle every process shares: resume resolution, refusing a used
directory, dropping stale outputs, the checkpoint rule and markers."""

import pytest

from rlcore.errors import ConfigError
from rlcore.runs.rundir import MANIFEST, RunDir, is_checkpoint_step, steps_in


def make_steps(folder, steps):
    for step in steps:
        (folder / f"step_{step}").mkdir(parents=True)


def complete(run: RunDir, step: int) -> None:
    for part in ("trainer", "orchestrator"):
        run.part_dir(step, part).mkdir(parents=True, exist_ok=True)
        run.mark_part_done(step, part)


def test_checkpoint_rule():
    assert [s for s in range(1, 8) if is_checkpoint_step(s, 3, 7, True)] == [3, 6, 7]
    assert [s for s in range(1, 8) if is_checkpoint_step(s, None, 7, True)] == [7]
    assert not is_checkpoint_step(7, 1, 7, False)


def test_manifest_only_when_every_part_is_done(tmp_path):
    run = RunDir(tmp_path)
    run.part_dir(2, "trainer").mkdir(parents=True)
    assert not run.mark_part_done(2, "trainer")
    assert not (run.checkpoint_dir(2) / MANIFEST).exists() and run.latest_checkpoint() is None
    run.part_dir(2, "orchestrator").mkdir(parents=True)
    assert run.mark_part_done(2, "orchestrator")
    assert run.latest_checkpoint() == 2
    # a trainer-only run (fake data) completes with its own part
    run.part_dir(3, "trainer").mkdir(parents=True)
    assert run.mark_part_done(3, "trainer", parts=("trainer",))
    assert run.complete_checkpoints() == [2, 3]


def test_fresh_start_refuses_a_directory_with_checkpoints(tmp_path):
    run = RunDir(tmp_path)
    run.claim()
    complete(run, 4)
    with pytest.raises(ConfigError, match=r"holds checkpoints \(steps \[4\]\).*--ckpt.resume-step"):
        run.check_attempt(None)
    assert run.check_attempt(-1) == 4 and run.check_attempt(4) == 4
    with pytest.raises(ConfigError, match=r"no complete checkpoint for step 3.*complete: \[4\]"):
        run.check_attempt(3)


def test_a_folder_that_is_not_a_run_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "user.txt").write_text("mine\n")
    with pytest.raises(ConfigError, match=r"not empty and is not a run .*found: user.txt"):
        RunDir(tmp_path).prepare_attempt(None, produces=("rollouts",))
    assert [p.name for p in tmp_path.iterdir()] == ["user.txt"]


def test_resume_latest_with_no_checkpoint_is_a_fresh_start(tmp_path):
    assert RunDir(tmp_path).check_attempt(-1) is None
    assert RunDir(tmp_path).check_attempt(0) is None


def test_each_process_drops_only_what_it_produces(tmp_path):
    run = RunDir(tmp_path)
    run.claim()
    complete(run, 2)
    make_steps(run.rollouts, [0, 1, 2, 3])
    make_steps(run.weights, [0, 1, 2, 3])
    assert run.prepare_attempt(-1, produces=("rollouts",)) == 2
    assert steps_in(run.rollouts) == [0, 1] and steps_in(run.weights) == [0, 1, 2, 3]
    run.drop_stale(2, produces=("weights",))
    assert steps_in(run.weights) == [0, 1, 2]
    assert run.complete_checkpoints() == [2]  # checkpoints are never touched


def test_atomic_write_sets_mode_before_the_file_appears(tmp_path):
    from rlcore.runs.rundir import atomic_write_text

    target = tmp_path / "a" / "token"
    atomic_write_text(target, "secret\n", mode=0o600)
    assert target.read_text() == "secret\n" and (target.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["token"]


def test_metrics_records_are_read_incrementally_and_torn_lines_wait(tmp_path):
    from rlcore.reporting.metrics import is_training_step, read_records, record_step_line

    run = RunDir(tmp_path)
    run.append_metrics("trainer", 1, {"loss": 0.5})
    run.append_metrics("orchestrator", 0, {"reward": 0.25, "num_tokens": 100, "num_samples": 4})
    with run.metrics.open("a") as f:
        f.write('{"component": "orchestrator", "step": 1, "rew')  # still being written
    records, offset = read_records(run.metrics)
    assert [r["component"] for r in records] == ["trainer", "orchestrator"]
    assert [is_training_step(r) for r in records] == [False, True]
    assert record_step_line(records[1]).startswith("Step 0 | Time: 0.00s | Reward: 0.2500")
    with run.metrics.open("a") as f:
        f.write('ard": 0.5}\n')
    more, _ = read_records(run.metrics, offset)
    assert [r["step"] for r in more] == [1]


def test_reward_curve_summarizes_training_steps(tmp_path):
    from rlcore.reporting.metrics import read_records, reward_curve

    run = RunDir(tmp_path)
    for step, reward in enumerate([0.0, 0.0, 0.5, 1.0, 1.0, 1.0]):
        run.append_metrics("orchestrator", step, {"reward": reward})
        run.append_metrics("trainer", step + 1, {"loss": 0.1})
    text = reward_curve(read_records(run.metrics)[0], window=2)
    assert text.splitlines()[0] == "reward by step 0..5: ▁▁▅███"
    assert text.splitlines()[1].endswith("first 2 steps 0.000, of the last 2 1.000")


def test_an_in_run_eval_record_is_no_training_step(tmp_path):
    """The orchestrator logs an in-run eval as its own record (`eval/<env>/reward`, no
    `reward`): the progress line and the reward curve skip it; counted as a step, the
    supervisor's step line would fail on it."""
    from rlcore.reporting.metrics import (
        is_training_step,
        read_records,
        record_step_line,
        reward_curve,
    )

    run = RunDir(tmp_path)
    run.append_metrics("orchestrator", 0, {"reward": 0.5, "num_tokens": 10, "num_samples": 2})
    run.append_metrics(
        "orchestrator",
        0,
        {"eval/policy_step": 0, "eval/add/reward": 0.75, "eval/add/num_rollouts": 8},
    )
    run.append_metrics("orchestrator", 1, {"reward": 1.0, "num_tokens": 10, "num_samples": 2})
    records, _ = read_records(run.metrics)
    assert [is_training_step(r) for r in records] == [True, False, True]
    lines = [record_step_line(r) for r in records if is_training_step(r)]
    assert [line.split(" | ")[2] for line in lines] == ["Reward: 0.5000", "Reward: 1.0000"]
    assert reward_curve(records).startswith("reward by step 0..1: ")
