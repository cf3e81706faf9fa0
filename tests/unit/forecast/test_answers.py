"""A job's answers remembered from its last finished run (rlcore/forecast/answers.py): measured
turn by turn from the archive's token masks, kept under a hash of what they depend on, read
back as data (a damaged record is no record), and said in the estimate's basis."""

import json
import os

import pytest

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
        "rollouts": 3,
        "steps": 2,
        "prompt": 42.0,  # (40 + 44 + 42) / 3
        "turns": [
            # 3 of 3 reach turn 1: mean (4 + 2 + 6) / 3; longest of each step (4, 6) averaged
            {"share": 1.0, "mean": 4.0, "longest": 5.0, "added": 0.0},
            {"share": 0.3333, "mean": 1.0, "longest": 1.0, "added": 3.0},
        ],
    }
    assert answers.summarize([[([], 0)]]) is None


def test_a_record_is_kept_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    key = answers.job_key("m", [{"id": "env", "args": {}}], {"max_tokens": 16}, 256)
    assert answers.recall(key, 16, 256) is None
    answers.remember(key, answers.summarize([[([T] * 4, 40), ([T, T, F, T], 44)]]))
    found = answers.recall(key, max_tokens=16, seq_len=256)
    assert found == answers.Measured(
        (TurnAnswers(1.0, 3.0, 4.0, 0.0), TurnAnswers(0.5, 1.0, 1.0, 1.0)), 42.0
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
    assert "every answer taken to reach max_tokens (256), all 2 turns taken" in bound
    assert "upper bound" in bound
    measured = answers.Measured((TurnAnswers(1.0, 41.4, 250.0), TurnAnswers(0.5, 9, 12, 14)), 44)
    assert answers.words(measured, 256, 2) == (
        "answers: as the last finished run of this model, environment and sampling measured "
        "them (prompt 44 tokens; answers of max_tokens 256: turn 1: 100% of rollouts, mean 41, "
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
