"""How long a job's answers run, remembered from its earlier runs: the estimate's largest unknown.
A run's answers stop at EOS, mostly well short of `max_tokens`, and how short depends on the
model, the environments and the sampling, not on the machine. When a run ends, the launcher
measures its answers turn by turn from its rollout archive (`summarize`, on the policy's tokens
of each archived rollout) and keeps them here under a hash of what they depend on (`job_key`:
the model, the environments with their arguments, the sampling settings, `seq_len`), beside the
machine's calibration. The next estimate of the same job reads them back (`recall`) as data it
did not write: through the one bounded reader, each figure checked, anything else ignored;
without them it takes every answer to reach `max_tokens`, an upper bound, and says so.

The record holds figures only (no names, no arguments: the key is a hash)."""

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from rlcore.forecast.model import TurnAnswers

ANSWERS_VERSION = 1
"""Bumped when what is kept changes: older records are then ignored."""
MAX_TURNS = 64
"""Turns a record may hold (a longer one is damaged)."""
MAX_STEPS_READ = 16
"""Archived steps a finished run's answers are measured on (spread over the run)."""


@dataclass(frozen=True)
class Measured:
    """What an earlier run of the job measured."""

    turns: tuple[TurnAnswers, ...]
    prompt_tokens: float
    """A rollout's prompt, tokens (the first turn's, chat template included)."""


def job_key(model: str, envs: list[dict], sampling: dict, seq_len: int) -> str:
    """A hash of what a job's answer lengths depend on: the model as named, each environment
    (its id, type, arguments and weight), the sampling settings and `seq_len`."""
    facts = {
        "model": model,
        "envs": envs,
        "sampling": sampling,
        "seq_len": seq_len,
        "version": ANSWERS_VERSION,
    }
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def answers_file(key: str) -> Path:
    from rlcore.host.models import cache_dir

    return cache_dir() / "answers" / f"{key}.json"


def mask_turns(mask: list[bool], bound: int = 0) -> tuple[list[int], list[int]]:
    """(the policy's tokens in each answer, the environment's tokens before each later answer)
    from an archived rollout's `token_mask` (true where the policy produced the token). Turns
    are told apart by the environment's tokens between them; where a turn's context was
    re-tokenized the archive has none, and a run of the policy's tokens longer than `bound`
    (`max_tokens`; 0: none) is read as answers of `bound` tokens and the rest."""
    answers: list[int] = []
    added: list[int] = []
    run, policy = 0, True
    for token in mask:
        if bool(token) != policy:
            (answers if policy else added).append(run)
            run, policy = 0, bool(token)
        run += 1
    if run:
        (answers if policy else added).append(run)
    if answers and answers[0] == 0:  # the completion opened with the environment's tokens
        answers.pop(0)
        added.pop(0)
    added = added[: max(len(answers) - 1, 0)]
    if bound > 0 and any(tokens > bound for tokens in answers):
        split: list[int] = []
        gaps: list[int] = []
        for index, tokens in enumerate(answers):
            if index:
                gaps.append(added[index - 1])
            while tokens > bound:
                split.append(bound)
                gaps.append(0)
                tokens -= bound
            split.append(tokens)
        answers, added = split, gaps
    return answers, added


def summarize(steps: list[list[tuple[list[bool], int]]], bound: int = 0) -> dict | None:
    """The record of a run's answers, from each rollout's `token_mask` and prompt tokens in some
    of its steps: the mean prompt, and per turn the share of rollouts that reach it, their
    answers' mean tokens, the longest answer of a step (averaged over the steps) and the
    environment's tokens before it (`mask_turns`, answers at most `bound` tokens); None without
    a rollout that answered."""
    turns: list[dict] = []
    rollouts, prompts = 0, 0
    for rows in steps:
        step_longest: dict[int, int] = {}
        for mask, prompt in rows:
            answers, added = mask_turns(mask, bound)
            if not answers:
                continue
            rollouts += 1
            prompts += prompt
            for index, tokens in enumerate(answers[:MAX_TURNS]):
                if index == len(turns):
                    turns.append({"reached": 0, "tokens": 0, "added": 0, "longest": [], "steps": 0})
                turn = turns[index]
                turn["reached"] += 1
                turn["tokens"] += tokens
                turn["added"] += added[index - 1] if index else 0
                step_longest[index] = max(step_longest.get(index, 0), tokens)
        for index, longest in step_longest.items():
            turns[index]["longest"].append(longest)
    if not rollouts:
        return None
    return {
        "version": ANSWERS_VERSION,
        "rollouts": rollouts,
        "steps": len(steps),
        "prompt": round(prompts / rollouts, 2),
        "turns": [
            {
                "share": round(t["reached"] / rollouts, 4),
                "mean": round(t["tokens"] / t["reached"], 2),
                "longest": round(sum(t["longest"]) / len(t["longest"]), 2),
                "added": round(t["added"] / t["reached"], 2),
            }
            for t in turns
        ],
    }


def from_record(data: object, max_tokens: int, seq_len: int) -> Measured | None:
    """A record read back, or None where anything in it is not what `summarize` writes (a
    figure missing, not finite, negative, a share over 1, an answer over `max_tokens`, a prompt
    or the environment's tokens over `seq_len`, too many turns)."""
    if not isinstance(data, dict) or data.get("version") != ANSWERS_VERSION:
        return None
    prompt = data.get("prompt")
    if not isinstance(prompt, int | float) or isinstance(prompt, bool):
        return None
    if not (math.isfinite(prompt) and 0 < prompt <= seq_len):
        return None
    turns = data.get("turns")
    if not isinstance(turns, list) or not 0 < len(turns) <= MAX_TURNS:
        return None
    found = []
    for turn in turns:
        if not isinstance(turn, dict):
            return None
        values = [turn.get(k) for k in ("share", "mean", "longest", "added")]
        numbers = [float(v) for v in values if isinstance(v, int | float) and v is not True]
        if len(numbers) != 4 or any(v is False for v in values):
            return None
        share, mean, longest, added = numbers
        if not all(math.isfinite(v) and v >= 0 for v in (share, mean, longest, added)):
            return None
        if share > 1 or mean > longest or longest > max_tokens or added > seq_len:
            return None
        found.append(TurnAnswers(share, mean, longest, added))
    return Measured(tuple(found), float(prompt))


def recall(key: str, max_tokens: int, seq_len: int) -> Measured | None:
    """The answers an earlier run of the job `key` measured; None when there is no record or it
    is damaged (read through the bounded reader: a FIFO, a huge, deep or non-UTF-8 file is
    refused)."""
    from rlcore.files.readback import SMALL, Damaged, read_object

    path = answers_file(key)
    try:
        if not path.exists():
            return None
        return from_record(read_object(path, SMALL), max_tokens, seq_len)
    except (OSError, ValueError, Damaged):
        return None


def remember(key: str, record: dict | None) -> None:
    """Keep a run's answers for the next estimate of the same job (the last finished run's
    replace an earlier one's). Best effort: a cache that cannot be written is only an estimate
    that takes answers at their bound next time."""
    if not key or record is None:
        return
    from rlcore.files.atomic import atomic_write_text

    try:
        path = answers_file(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record, indent=1))
    except OSError:
        pass


def words(measured: Measured | None, max_tokens: int, max_turns: int) -> str:
    """The basis line saying which answers the estimate took."""
    if measured is None:
        turns = f", all {max_turns} turns taken" if max_turns > 1 else ""
        return (
            f"answers: none measured yet for this model, environment and sampling: every answer "
            f"taken to reach max_tokens ({max_tokens}){turns}, an upper bound (the range's low "
            "end takes them a fifth as long); a finished run's measured answers are kept for the "
            "next estimate"
        )
    answers = measured.turns
    each = "; ".join(
        f"turn {i + 1}: {t.share:.0%} of rollouts, mean {t.mean:.0f}, longest {t.longest:.0f}"
        + (f", {t.added:.0f} added by the environment" if i else "")
        for i, t in enumerate(answers[:4])
    )
    more = f"; {len(answers) - 4} more turn(s)" if len(answers) > 4 else ""
    return (
        f"answers: as the last finished run of this model, environment and sampling measured "
        f"them (prompt {measured.prompt_tokens:.0f} tokens; answers of max_tokens {max_tokens}: "
        f"{each}{more})"
    )
