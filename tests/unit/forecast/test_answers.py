"""A job's answers remembered from its finished runs (rlcore/forecast/answers.py): measured turn
by turn from the archive's token masks, pooled with the earlier runs', kept under a hash of what
they depend on, read back as data (a damaged record is no record), and said in the estimate's
basis."""

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.eta import archived_answers
from rlcore.contracts.samples_store import SAMPLES_DIR, write_step
from rlcore.forecast import answers
from rlcore.forecast.model import TurnAnswers
from rlcore.host.models import CACHE_ENV

T, F = True, False


@pytest.mark.parametrize(
    "mask, turns, added",
    [
        ([T, T, T], [3], []),
        ([T, T, F, F, F, T], [2, 1], [3]),
        ([T, F, T, F, F], [1, 1], [1]),  # the environment's last reply is no turn's
        ([F, F, T, T], [2], []),  # a completion that opens with the environment's tokens
        ([], [], []),
    ],
)
def test_a_rollouts_turns_are_the_runs_of_the_policys_tokens(mask, turns, added):
    assert answers.mask_turns(mask) == (turns, added)


def test_a_run_longer_than_the_bound_is_two_turns_the_archive_did_not_tell_apart():
    """A turn whose context the server re-tokenized has no environment tokens in the archive:
    its answer follows the previous one unseparated."""
    assert answers.mask_turns([T] * 24, bound=16) == ([16, 8], [0])
    assert answers.mask_turns([T] * 3 + [F] * 2 + [T] * 20, bound=16) == ([3, 16, 4], [2, 0])
    assert answers.mask_turns([T] * 24) == ([24], [])


def test_the_summary_by_hand():
    # step 1: answers 4 and 2 (then 1 after 3 environment tokens); step 2: 6, and an errored
    # rollout without tokens, which is no rollout
    steps = [
        [([T] * 4, 40), ([T, T, F, F, F, T], 44)],
        [([T] * 6, 42), ([], 0)],
    ]
    assert answers.summarize(steps) == {
        "version": answers.ANSWERS_VERSION,
        "runs": 1,
        "rollouts": 3,
        "steps": 2,
        "prompt": 42.0,  # (40 + 44 + 42) / 3
        "turns": [
            # 3 of 3 reach turn 1: mean (4 + 2 + 6) / 3; longest of each step (4, 6) averaged
            {"share": 1.0, "mean": 4.0, "longest": 5.0, "added": 0.0},
            {"share": 0.3333, "mean": 1.0, "longest": 1.0, "added": 3.0},
        ],
        # step 0 (bucket 0): 4 and 2 + 1 policy tokens; step 1 (bucket 1): 6
        "by_step": [[0, 2, 3.5], [1, 1, 6.0]],
        # each step's longest rollout, all turns: step 0's 4 (of 4 and 3), step 1's 6
        "longest_by_step": [[0, 1, 4.0], [1, 1, 6.0]],
    }
    assert answers.summarize([[([], 0)]]) is None


def test_a_record_is_kept_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    key = answers.job_key("m", [{"id": "env", "args": {}}], {"max_tokens": 16}, 256)
    assert answers.recall(key, 16, 256) is None
    answers.remember(key, answers.summarize([[([T] * 4, 40), ([T, T, F, T], 44)]]), 16, 256)
    found = answers.recall(key, max_tokens=16, seq_len=256)
    assert found == answers.Measured(
        (TurnAnswers(1.0, 3.0, 4.0, 0.0), TurnAnswers(0.5, 1.0, 1.0, 1.0)),
        42.0,
        by_step=((0, 2.0, 3.5),),
        longest_by_step=((0, 1.0, 4.0),),
    )
    assert answers.recall(key, max_tokens=3, seq_len=256) is None  # longer than the bound


def test_the_key_changes_with_the_model_environment_and_sampling():
    base = ("m", [{"id": "env", "args": {"max_turns": 2}}], {"max_tokens": 16}, 256)
    key = answers.job_key(*base)
    assert answers.job_key(*base) == key
    assert answers.job_key("other", *base[1:]) != key
    assert answers.job_key("m", [{"id": "env", "args": {"max_turns": 3}}], *base[2:]) != key
    assert answers.job_key("m", base[1], {"max_tokens": 32}, 256) != key
    assert answers.job_key(*base[:3], 512) != key


GOOD = {
    "version": answers.ANSWERS_VERSION,
    "prompt": 40,
    "turns": [{"share": 1, "mean": 3, "longest": 4, "added": 0}],
}


@pytest.mark.parametrize(
    "damage",
    [
        {"version": 0},
        {"prompt": "40"},
        {"prompt": 0},
        {"prompt": 1e9},
        {"turns": []},
        {"turns": [{"share": 1, "mean": 3, "longest": 4}]},
        {"turns": [{"share": 1.5, "mean": 3, "longest": 4, "added": 0}]},
        {"turns": [{"share": 1, "mean": 5, "longest": 4, "added": 0}]},
        {"turns": [{"share": 1, "mean": 3, "longest": 99, "added": 0}]},
        {"turns": [{"share": 1, "mean": -1, "longest": 4, "added": 0}]},
        {"turns": [{"share": True, "mean": 3, "longest": 4, "added": 0}]},
        {"turns": [{"share": 1, "mean": 3, "longest": 4, "added": 0}] * 65},
    ],
)
def test_a_damaged_record_is_no_record(damage):
    assert answers.from_record(GOOD, 16, 256) is not None
    assert answers.from_record({**GOOD, **damage}, 16, 256) is None


@pytest.mark.parametrize("damage", ["fifo", "deep", "bytes", "huge"])
def test_a_damaged_file_is_refused_by_the_bounded_reader(tmp_path, monkeypatch, damage):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    path = answers.answers_file("abc")
    path.parent.mkdir(parents=True)
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "deep":
        path.write_text("[" * 100_000)
    elif damage == "bytes":
        path.write_bytes(b"\xff\xfe{\x00")
    else:
        path.write_text(json.dumps({**GOOD, "pad": "x" * 200_000}))
    assert answers.recall("abc", 16, 256) is None


def archive_row(step: int, member: int, mask: list[bool], prompt: int) -> dict:
    return {
        "step": step,
        "policy_step": 0,
        "env": "env",
        "group": 0,
        "member": member,
        "example_id": 0,
        "prompt": "[]",
        "completion": "[]",
        "reward": 0.0,
        "reward_parts": "{}",
        "advantage": None,
        "kept": True,
        "num_prompt_tokens": prompt,
        "num_completion_tokens": len(mask),
        "is_truncated": False,
        "error": None,
        "token_text": None,
        "token_logprob": [0.0] * len(mask),
        "token_mask": mask,
    }


def test_a_finished_runs_archive_gives_its_answers(tmp_path):
    folder = tmp_path / SAMPLES_DIR
    write_step(folder, 0, 0, [archive_row(0, 0, [T] * 4, 40), archive_row(0, 1, [T, F, T], 44)])
    write_step(folder, 1, 0, [archive_row(1, 0, [T] * 6, 42)])
    assert archived_answers(tmp_path) == answers.summarize(
        [[([T] * 4, 40), ([T, F, T], 44)], [([T] * 6, 42)]]
    )
    assert archived_answers(tmp_path / "none") is None
    (folder / "step_2.parquet").write_bytes(b"not parquet")
    assert archived_answers(tmp_path) is None  # the next estimate takes the bound


def test_the_basis_says_which_answers_were_taken():
    bound = answers.words(None, 256, 2)
    assert "every answer taken to reach its bound (256 tokens), all 2 turns taken" in bound
    assert "upper bound" in bound
    measured = answers.Measured((TurnAnswers(1.0, 41.4, 250.0), TurnAnswers(0.5, 9, 12, 14)), 44)
    assert answers.words(measured, 256, 2) == (
        "answers: as the last finished run of this model, environment and sampling measured "
        "them (prompt 44 tokens; answers of at most 256 tokens: turn 1: 100% of rollouts, mean 41, "
        "longest 250; turn 2: 50% of rollouts, mean 9, longest 12, 14 added by the environment)"
    )


def test_a_large_archive_is_measured_within_a_token_bound(tmp_path, monkeypatch):
    import launcher.eta

    folder = tmp_path / SAMPLES_DIR
    write_step(folder, 0, 0, [archive_row(0, 0, [T] * 4, 40)])
    write_step(folder, 1, 0, [archive_row(1, 0, [T] * 6, 42)])
    monkeypatch.setattr(launcher.eta, "MAX_TOKENS_READ", 4)
    assert archived_answers(tmp_path) == answers.summarize([[([T] * 4, 40)]])


def test_a_run_that_just_ended_is_no_other_programs_load(monkeypatch):
    """The 1-minute load average still counts a run that ended a minute ago; the estimate
    stretches CPU times by the threads runnable now when they are fewer."""
    from rlcore.forecast import calibrate, report

    monkeypatch.setattr(calibrate, "RUNNABLE_INTERVAL_S", 0.0)
    assert calibrate.runnable_now() >= 0  # this machine's /proc/stat, the caller excepted
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    monkeypatch.setattr(calibrate, "runnable_now", lambda: 0.0)
    assert report.shared(None) == (1.0, [])
    monkeypatch.setattr(calibrate, "runnable_now", lambda: 3.0)
    slowdown, words = report.shared(None)
    assert words and "(load average)" in words[0] and "1.0 threads" in words[0]
    monkeypatch.setattr(calibrate, "runnable_now", lambda: None)  # no /proc/stat
    assert report.shared(None)[0] == slowdown


def test_a_second_run_is_pooled_with_the_first_by_hand(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    first = answers.summarize([[([T] * 4, 40), ([T, T, F, T], 44)]])  # 2 rollouts, 1 step
    answers.remember("k", first, 16, 256)
    answers.remember("k", answers.summarize([[([T] * 8, 50)]]), 16, 256)  # 1 rollout, 1 step
    kept = json.loads(answers.answers_file("k").read_text())
    assert kept == {
        "version": answers.ANSWERS_VERSION,
        "runs": 2,
        "rollouts": 3,
        "steps": 2,
        "prompt": 44.67,  # (42 x 2 + 50) / 3
        "turns": [
            # answers by the rollouts that reached the turn: (3 x 2 + 8) / 3; longest by steps
            {"share": 1.0, "mean": 4.67, "longest": 6.0, "added": 0.0},
            # the second run's rollout did not reach turn 2: 1 of 3 rollouts did
            {"share": 0.3333, "mean": 1.0, "longest": 1.0, "added": 1.0},
        ],
        "by_step": [[0, 3, 5.0]],  # (3.5 x 2 + 8) / 3 policy tokens a rollout
        "longest_by_step": [[0, 2, 6.0]],  # the steps' longest rollouts, 4 and 8, by steps
    }
    found = answers.recall("k", 16, 256)
    assert found is not None and found.runs == 2
    assert "as the last 2 finished runs of this model" in answers.words(found, 16, 2)


def test_the_earlier_runs_count_at_most_three_times_the_new_one(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    many = {**GOOD, "runs": 40, "rollouts": 1000, "steps": 100}  # mean 3
    answers.answers_file("k").parent.mkdir(parents=True)
    answers.answers_file("k").write_text(json.dumps(many))
    answers.remember("k", answers.summarize([[([T] * 7, 40)]]), 16, 256)  # 1 rollout of 7
    kept = json.loads(answers.answers_file("k").read_text())
    assert kept["runs"] == 41 and kept["rollouts"] == 4.0 and kept["steps"] == 1.3
    assert kept["turns"][0]["mean"] == 4.0  # (3 x 3 + 7) / 4, not (3 x 1000 + 7) / 1001


@pytest.mark.parametrize(
    "earlier",
    [
        {**GOOD, "turns": [{"share": 1, "mean": 99, "longest": 99, "added": 0}]},  # over 16
        {**GOOD, "rollouts": 0, "steps": 1},
        {**GOOD, "rollouts": float("nan"), "steps": 1},
        {**GOOD, "rollouts": 4},  # no steps
        {**GOOD, "runs": 0, "rollouts": 4, "steps": 1},
        {**GOOD, "runs": True, "rollouts": 4, "steps": 1},
        [1, 2],
    ],
)
def test_a_damaged_earlier_record_is_replaced_by_the_new_runs(tmp_path, monkeypatch, earlier):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    answers.answers_file("k").parent.mkdir(parents=True)
    answers.answers_file("k").write_text(json.dumps(earlier))
    new = answers.summarize([[([T] * 7, 40)]])
    answers.remember("k", new, 16, 256)
    assert json.loads(answers.answers_file("k").read_text()) == new


masks = st.lists(st.booleans(), min_size=1, max_size=40).filter(any)
runs = st.lists(st.lists(st.tuples(masks, st.integers(1, 200)), min_size=1, max_size=4), max_size=3)


@settings(max_examples=60, deadline=None)
@given(st.lists(runs.filter(len), min_size=2, max_size=4))
def test_pooled_runs_read_back_within_what_each_run_measured(tmp_path_factory, kept_runs):
    """Over generated runs: whatever was pooled reads back as a record, each turn's mean answer
    and each step bucket's tokens lie between the runs' own, and scaled to any run's steps the
    answers stay within their bound."""
    import rlcore.host.models

    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(folder))
        assert rlcore.host.models.cache_dir() == folder
        records = [answers.summarize(steps, 16) for steps in kept_runs]
        for record in records:
            answers.remember("k", record, 16, 256)
        found = answers.recall("k", 16, 256)
    assert found is not None and found.runs == len(records)
    for index, turn in enumerate(found.turns):
        means = [r["turns"][index]["mean"] for r in records if len(r["turns"]) > index]
        assert min(means) - 0.01 <= turn.mean <= max(means) + 0.01
        assert turn.mean <= turn.longest <= 16
    for name in ("by_step", "longest_by_step"):  # each step bucket likewise
        for index, _, tokens in getattr(found, name):
            each = [t for r in records for b, _, t in r[name] if b == index]
            assert min(each) - 0.01 <= tokens <= max(each) + 0.01
    low, high = answers.STEP_SCALE_BOUNDS
    for steps in (1, 2, 3, 100):
        scaled = answers.for_steps(found, steps, 16)
        assert low <= scaled.scale <= high and low <= scaled.longest_scale <= high
        assert all(t.mean <= t.longest <= 16 for t in scaled.turns)


def test_a_summary_whose_steps_differ_in_size_reads_back():
    """A step's longest answer averaged over steps can fall under the mean over rollouts (1
    and 2 over two steps, mean 5/3): the summary keeps the longest at least the mean."""
    record = answers.summarize([[([T], 1)], [([T, T], 1), ([T, T], 1)]])
    assert record is not None and record["turns"][0]["longest"] == record["turns"][0]["mean"]
    assert answers.from_record(record, 16, 256) is not None


@pytest.mark.parametrize(
    "step, index", [(0, 0), (1, 1), (2, 1), (3, 2), (6, 2), (7, 3), (14, 3), (15, 4), (-1, 0)]
)
def test_steps_fall_in_buckets_doubling_in_size(step, index):
    assert answers.bucket(step) == index
    assert answers.bucket(10**30) == answers.MAX_BUCKETS - 1


def test_a_short_run_takes_the_answers_of_the_earlier_runs_first_steps_by_hand():
    """A 16-step run whose answers went from 60 tokens to 10: a 4-step run takes the first
    steps' (buckets 0-2: steps 0-6, of which it reaches 0-3); a run as long as it, the mean."""
    curve = ((0, 32.0, 60.0), (1, 64.0, 60.0), (2, 128.0, 40.0), (3, 256.0, 10.0))
    measured = answers.Measured((TurnAnswers(1.0, 25.0, 80.0),), 44.0, by_step=curve)
    overall = (32 * 60 + 64 * 60 + 128 * 40 + 256 * 10) / 480
    early = (32 * 60 + 64 * 60 + 128 * 0.25 * 40) / (32 + 64 + 32)  # bucket 2: 1 step of 4
    assert answers.step_scale(curve, 4) == pytest.approx(early / overall)
    assert answers.step_scale(curve, 15) == pytest.approx(1.0)
    assert answers.step_scale(curve, 1000) == pytest.approx(1.0)  # past what was measured
    short = answers.for_steps(measured, 4, bound=64)
    scale = early / overall
    assert short.turns[0].mean == pytest.approx(25.0 * scale)
    assert short.turns[0].longest == 64  # 80 x scale (no longest curve), at most the bound
    assert short.scale == pytest.approx(scale) and short.steps == 4
    assert short.longest_scale == pytest.approx(scale)
    assert f"x{scale:.2f} of their mean and x{scale:.2f} of their longest: their first 4" in (
        answers.words(short, 64, 1)
    )
    plain = answers.Measured((TurnAnswers(1.0, 25.0, 80.0),), 44.0)  # an older record
    assert answers.for_steps(plain, 4, 100).turns == plain.turns
    assert "of their mean" not in answers.words(answers.for_steps(plain, 4, 100), 100, 1)


def test_the_longest_answers_scale_by_their_own_curve_by_hand():
    """The 256-token job's case: early steps each had an answer cut at the bound, later ones
    ended near 100, so a 4-step run's longest rises while its mean falls."""
    means = ((0, 32.0, 40.0), (1, 64.0, 40.0), (2, 128.0, 50.0))
    longest = ((0, 1.0, 256.0), (1, 2.0, 256.0), (2, 4.0, 100.0))
    measured = answers.Measured(
        (TurnAnswers(1.0, 46.0, 160.0),), 44.0, by_step=means, longest_by_step=longest
    )
    overall = (256 + 2 * 256 + 4 * 100) / 7
    early = (256 + 2 * 256 + 1 * 100) / 4  # bucket 2: 1 step of 4
    mean_scale = (32 * 40 + 64 * 40 + 32 * 50) / 128 / ((32 * 40 + 64 * 40 + 128 * 50) / 224)
    short = answers.for_steps(measured, 4, bound=256)
    assert short.longest_scale == pytest.approx(early / overall)
    assert short.scale == pytest.approx(mean_scale)
    assert short.turns[0].longest == pytest.approx(160 * early / overall)
    assert short.turns[0].mean == pytest.approx(46 * mean_scale)
    assert answers.for_steps(measured, 4, bound=200).turns[0].longest == 200


def test_the_step_scale_is_bounded():
    curve = ((0, 1.0, 1000.0), (5, 1000.0, 1.0))
    assert answers.step_scale(curve, 1) == answers.STEP_SCALE_BOUNDS[1]
    curve = ((0, 1.0, 0.0), (5, 1000.0, 50.0))
    assert answers.step_scale(curve, 1) == answers.STEP_SCALE_BOUNDS[0]


@pytest.mark.parametrize(
    "by_step",
    [
        "no",
        [[0, 1]],
        [[0, 1, 2], [0, 1, 2]],  # a bucket twice
        [[-1, 1, 2]],
        [[40, 1, 2]],
        [[0.5, 1, 2]],
        [[True, 1, 2]],
        [[0, 0, 2]],  # no rollouts
        [[0, 1, -2]],
        [[0, 1, 1e400]],  # read back as infinity
        [[0, 1, 16 * 64 + 1]],  # over the bound of every turn
        [[0, True, 2]],
        [[0, 1, "2"]],
        [[i, 1, 2] for i in range(41)],
    ],
)
def test_a_damaged_step_curve_is_a_damaged_record(by_step):
    assert answers.from_record({**GOOD, "by_step": by_step}, 16, 256) is None
    assert answers.from_record({**GOOD, "longest_by_step": by_step}, 16, 256) is None
    assert answers.from_record({**GOOD, "by_step": [[0, 1, 2]]}, 16, 256) is not None
    assert answers.from_record({**GOOD, "longest_by_step": [[0, 1, 2]]}, 16, 256) is not None


def test_the_archive_gives_each_step_its_bucket(tmp_path):
    """A run's archived steps 0, 1 and 5 land in buckets 0, 1 and 2."""
    folder = tmp_path / SAMPLES_DIR
    for step, length in ((0, 8), (1, 6), (5, 2)):
        write_step(folder, step, 0, [archive_row(step, 0, [T] * length, 40)])
    found = archived_answers(tmp_path)
    assert found is not None
    assert [b for b, _, _ in found["by_step"]] == [0, 1, 2]
    assert [t for _, _, t in found["by_step"]] == [8.0, 6.0, 2.0]
    assert found["longest_by_step"] == [[0, 1, 8.0], [1, 1, 6.0], [2, 1, 2.0]]
