"""How long a job's answers run, remembered from its earlier runs: the estimate's largest unknown.
A run's answers stop at EOS, mostly well short of `max_tokens`, and how short depends on the
model, the environments and the sampling, not on the machine. When a run ends, the launcher
measures its answers turn by turn from its rollout archive (`summarize`, on the policy's tokens
of each archived rollout) and keeps them here under a hash of what they depend on (`job_key`:
the model, the environments with their arguments, the sampling settings, `seq_len`), beside the
machine's calibration, pooled with what the earlier runs kept (`pool`: two runs of one job can
draw answers a third apart, as the policy learns one way or another). The next estimate of the
same job reads them back (`recall`) as data it did not write: through the one bounded reader,
each figure checked, anything else ignored; without them it takes every answer to reach
`max_tokens`, an upper bound, and says so. The record also keeps how long the answers ran at
each point of the runs (`by_step`, in buckets of steps doubling in size), so that a run shorter
than the earlier ones takes the answers of their first steps (`step_scale`): a policy that
learns to answer shorter makes a long run's mean unlike a short run's. Its step's longest answer
is kept the same way (`longest_by_step`): a generation step lasts until that answer ends, and
early on it is mostly one cut at its bound (the 256-token job: an answer ran to the 212 tokens
`seq_len` leaves after its prompt in 43 of its 12 runs' first four steps, 48, and in 1 of the
last 8 steps of its 16-step run).

The record holds figures only (no names, no arguments: the key is a hash)."""

import hashlib
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from rlcore.forecast.model import TurnAnswers

ANSWERS_VERSION = 1
"""Bumped when what is kept changes: older records are then ignored."""
MAX_TURNS = 64
"""Turns a record may hold (a longer one is damaged)."""
MAX_STEPS_READ = 16
"""Archived steps a finished run's answers are measured on (spread over the run)."""
HISTORY_WEIGHT = 3.0
"""When a run's answers are pooled with the earlier runs', those count at most this many times
the new run's rollouts: the record is then a moving average in which each run counts about a
quarter, so a job whose answers changed (a new version of an environment under the same name)
is followed within a few runs."""
MAX_RUNS = 1000
"""The run count a record may hold."""
MAX_BUCKETS = 40
"""Step buckets a record may hold (`bucket`)."""
STEP_SCALE_BOUNDS = (0.25, 4.0)
"""How far `step_scale` may move the answers from the record's mean."""
NO_TURN = {"share": 0.0, "mean": 0.0, "longest": 0.0, "added": 0.0}


@dataclass(frozen=True)
class Measured:
    """What an earlier run of the job measured."""

    turns: tuple[TurnAnswers, ...]
    prompt_tokens: float
    """A rollout's prompt, tokens (the first turn's, chat template included)."""
    runs: int = 1
    """The finished runs pooled in it."""
    by_step: tuple[tuple[int, float, float], ...] = ()
    """(step bucket, rollouts, the policy's tokens a rollout, all turns together): how the
    answers ran at each point of the earlier runs (`bucket`); empty in an older record."""
    longest_by_step: tuple[tuple[int, float, float], ...] = ()
    """(step bucket, steps, the policy's tokens of a step's longest rollout, averaged over its
    steps); empty in an older record (the longest then scales as the mean does)."""
    scale: float = 1.0
    """The `step_scale` the turns' answers were scaled by (`for_steps`)."""
    longest_scale: float = 1.0
    """The scale of the turns' longest answers (`step_scale` of `longest_by_step`)."""
    steps: int = 0
    """The run's steps they were scaled to (0: not scaled)."""


def for_steps(measured: Measured, max_steps: int, bound: int) -> Measured:
    """`measured` with each turn's answers scaled to a run of `max_steps` steps (`step_scale`:
    the mean by `by_step`, the longest by `longest_by_step`, or as the mean where the record has
    none), at most `bound` tokens (the longest at least the mean)."""
    scale = step_scale(measured.by_step, max_steps)
    longest = step_scale(measured.longest_by_step, max_steps) if measured.longest_by_step else scale
    turns = tuple(
        replace(
            t,
            mean=min(t.mean * scale, bound),
            longest=min(max(t.longest * longest, t.mean * scale), bound),
        )
        for t in measured.turns
    )
    return replace(measured, turns=turns, scale=scale, longest_scale=longest, steps=max_steps)


def bucket(step: int) -> int:
    """The bucket of a (0-based) step: 0 holds step 0, 1 steps 1-2, 2 steps 3-6, 3 steps 7-14,
    and so on, doubling: a run's first steps apart, its later ones together."""
    return min((max(step, 0) + 1).bit_length() - 1, MAX_BUCKETS - 1)


def step_scale(curve: tuple[tuple[int, float, float], ...], max_steps: int) -> float:
    """How long the answers of a run's first `max_steps` steps ran in the earlier runs against
    all their steps, by a curve of (bucket, weight, tokens) (`Measured.by_step` or
    `longest_by_step`; 1.0 without): a policy that learns to answer shorter or longer makes a
    short run's answers unlike a long run's. Each bucket counts by its weight (rollouts or
    steps) and the share of its steps the run reaches; bounded by STEP_SCALE_BOUNDS."""
    if not curve or max_steps <= 0:
        return 1.0
    overall = mean_of([(tokens, rollouts) for _, rollouts, tokens in curve])
    early = []
    for index, rollouts, tokens in curve:
        low, high = 2**index - 1, 2 ** (index + 1) - 2
        reached = max(min(high, max_steps - 1) - low + 1, 0) / (high - low + 1)
        early.append((tokens, rollouts * reached))
    if overall <= 0 or sum(w for _, w in early) <= 0:
        return 1.0
    low, high = STEP_SCALE_BOUNDS
    return min(max(mean_of(early) / overall, low), high)


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


def summarize(
    steps: list[list[tuple[list[bool], int]]], bound: int = 0, numbers: list[int] | None = None
) -> dict | None:
    """The record of a run's answers, from each rollout's `token_mask` and prompt tokens in some
    of its steps (`numbers`: each one's step, 0-based; by default 0, 1, ...): the mean prompt,
    per turn the share of rollouts that reach it, their answers' mean tokens, the longest answer
    of a step (averaged over the steps) and the environment's tokens before it (`mask_turns`,
    answers at most `bound` tokens), and per step bucket the policy's tokens a rollout
    (`by_step`); None without a rollout that answered."""
    turns: list[dict] = []
    rollouts, prompts = 0, 0
    buckets: dict[int, list[int]] = {}  # bucket -> [rollouts, the policy's tokens]
    longest_rollouts: dict[int, list[int]] = {}  # bucket -> [steps, their longest rollouts]
    numbers = list(range(len(steps))) if numbers is None else numbers
    for rows, number in zip(steps, numbers, strict=True):
        step_longest: dict[int, int] = {}
        longest_rollout = 0
        for mask, prompt in rows:
            answers, added = mask_turns(mask, bound)
            if not answers:
                continue
            rollouts += 1
            prompts += prompt
            counts = buckets.setdefault(bucket(number), [0, 0])
            counts[0] += 1
            counts[1] += sum(answers[:MAX_TURNS])
            longest_rollout = max(longest_rollout, sum(answers[:MAX_TURNS]))
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
        if step_longest:
            each = longest_rollouts.setdefault(bucket(number), [0, 0])
            each[0] += 1
            each[1] += longest_rollout
    if not rollouts:
        return None
    return {
        "version": ANSWERS_VERSION,
        "runs": 1,
        "rollouts": rollouts,
        "steps": len(steps),
        "prompt": round(prompts / rollouts, 2),
        "turns": [
            {
                "share": round(t["reached"] / rollouts, 4),
                "mean": round(mean_tokens(t), 2),
                # a step's longest, averaged over steps, is at least the mean over rollouts
                "longest": round(max(sum(t["longest"]) / len(t["longest"]), mean_tokens(t)), 2),
                "added": round(t["added"] / t["reached"], 2),
            }
            for t in turns
        ],
        "by_step": [[b, n, round(tokens / n, 2)] for b, (n, tokens) in sorted(buckets.items())],
        "longest_by_step": [
            [b, n, round(tokens / n, 2)] for b, (n, tokens) in sorted(longest_rollouts.items())
        ],
    }


def mean_tokens(turn: dict) -> float:
    """A summarized turn's mean answer, tokens."""
    return turn["tokens"] / turn["reached"]


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
    runs = data.get("runs", 1)
    if not isinstance(runs, int) or isinstance(runs, bool) or not 0 < runs <= MAX_RUNS:
        return None
    by_step = read_by_step(data.get("by_step", []), max_tokens * MAX_TURNS)
    longest_by_step = read_by_step(data.get("longest_by_step", []), max_tokens * MAX_TURNS)
    if by_step is None or longest_by_step is None:
        return None
    return Measured(tuple(found), float(prompt), runs, by_step, longest_by_step)


def read_by_step(entries: object, most: float) -> tuple[tuple[int, float, float], ...] | None:
    """A record's `by_step` or `longest_by_step` read back, or None where it is not what
    `summarize` writes (a bucket out of range or twice, its weight not positive, tokens a
    rollout over `most`)."""
    if not isinstance(entries, list) or len(entries) > MAX_BUCKETS:
        return None
    found: dict[int, tuple[int, float, float]] = {}
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != 3:
            return None
        index, rollouts, tokens = entry
        if not isinstance(index, int) or isinstance(index, bool) or index in found:
            return None
        if not 0 <= index < MAX_BUCKETS:
            return None
        numbers = [v for v in (rollouts, tokens) if isinstance(v, int | float)]
        if len(numbers) != 2 or any(isinstance(v, bool) for v in numbers):
            return None
        if not all(math.isfinite(v) for v in numbers) or rollouts <= 0 or not 0 <= tokens <= most:
            return None
        found[index] = (index, float(rollouts), float(tokens))
    return tuple(found[i] for i in sorted(found))


def weight(data: dict, name: str) -> float | None:
    """A record's `rollouts` or `steps` (what its figures are averages over), None where it is
    not a finite positive number."""
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def mean_of(pairs: list[tuple[float, float]]) -> float:
    """The weighted mean of (value, weight) pairs; 0 without any weight."""
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else 0.0


def pool(earlier: Measured, weights: tuple[float, float], new: dict) -> dict:
    """A new run's record (`summarize`'s) pooled with the earlier runs' (`earlier`, averaged over
    `weights`, its rollouts and steps): each figure a mean weighted by what it is an average
    over (the share and the prompt by rollouts, an answer's tokens by the rollouts that reached
    its turn, the longest by steps, a step bucket's tokens by its rollouts), the earlier runs
    counted at most HISTORY_WEIGHT times the new one's rollouts. A turn one side lacks is one
    its rollouts did not reach."""
    rollouts, steps = float(new["rollouts"]), float(new["steps"])
    scale = min(1.0, HISTORY_WEIGHT * rollouts / weights[0])
    old_rollouts, old_steps = weights[0] * scale, weights[1] * scale
    old_turns, new_turns = list(earlier.turns), new["turns"]
    turns = []
    for index in range(max(len(old_turns), len(new_turns))):
        a = old_turns[index] if index < len(old_turns) else TurnAnswers(0.0, 0.0, 0.0)
        b = new_turns[index] if index < len(new_turns) else NO_TURN
        reached = (a.share * old_rollouts, b["share"] * rollouts)
        mean = mean_of([(a.mean, reached[0]), (b["mean"], reached[1])])
        longest = mean_of(
            [(a.longest, old_steps * (a.share > 0)), (b["longest"], steps * (b["share"] > 0))]
        )
        turns.append(
            {
                "share": round(sum(reached) / (old_rollouts + rollouts), 4),
                "mean": round(mean, 2),
                "longest": round(max(longest, mean), 2),
                "added": round(mean_of([(a.added, reached[0]), (b["added"], reached[1])]), 2),
            }
        )
    prompt = mean_of([(earlier.prompt_tokens, old_rollouts), (new["prompt"], rollouts)])
    return {
        "version": ANSWERS_VERSION,
        "runs": min(earlier.runs + 1, MAX_RUNS),
        "rollouts": round(old_rollouts + rollouts, 2),
        "steps": round(old_steps + steps, 2),
        "prompt": round(prompt, 2),
        "turns": turns[:MAX_TURNS],
        "by_step": pool_curve(earlier.by_step, new.get("by_step", []), scale),
        "longest_by_step": pool_curve(
            earlier.longest_by_step, new.get("longest_by_step", []), scale
        ),
    }


def pool_curve(earlier: tuple[tuple[int, float, float], ...], new: list, scale: float) -> list:
    """Two curves of (bucket, weight, tokens) pooled bucket by bucket, the earlier runs'
    weights times `scale` (`pool`'s history cap)."""
    pooled: dict[int, list[tuple[float, float]]] = {}
    for index, count, tokens in earlier:
        pooled.setdefault(index, []).append((tokens, count * scale))
    for index, count, tokens in new:
        pooled.setdefault(index, []).append((tokens, count))
    return [
        [index, round(sum(w for _, w in pairs), 2), round(mean_of(pairs), 2)]
        for index, pairs in sorted(pooled.items())
        if round(sum(w for _, w in pairs), 2) > 0
    ]


def recall(key: str, max_tokens: int, seq_len: int) -> Measured | None:
    """The answers an earlier run of the job `key` measured; None when there is no record or it
    is damaged (read through the bounded reader: a FIFO, a huge, deep or non-UTF-8 file is
    refused)."""
    found = read_record(key)
    return from_record(found, max_tokens, seq_len) if found is not None else None


def read_record(key: str) -> dict | None:
    """The record kept under `key` as read (not yet checked), or None: no file, or one the
    bounded reader refuses (a FIFO, a huge, deep or non-UTF-8 file)."""
    from rlcore.files.readback import read_kept

    return read_kept(answers_file(key))


def remember(key: str, record: dict | None, max_tokens: int, seq_len: int) -> None:
    """Keep a run's answers for the next estimate of the same job, pooled with those the earlier
    runs kept (`pool`; a damaged or missing record is replaced by the new run's alone). Best
    effort: a cache that cannot be written is only an estimate that takes answers at their
    bound next time."""
    if not key or record is None:
        return
    from rlcore.files.atomic import atomic_write_text

    earlier = read_record(key)
    if earlier is not None:
        measured = from_record(earlier, max_tokens, seq_len)
        rollouts, steps = weight(earlier, "rollouts"), weight(earlier, "steps")
        if measured is not None and rollouts and steps:
            record = pool(measured, (rollouts, steps), record)
    try:
        path = answers_file(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record, indent=1))
    except OSError:
        pass


def words(measured: Measured | None, bound: int, max_turns: int) -> str:
    """The basis line saying which answers the estimate took, each at most `bound` tokens
    (`max_tokens`, or the room `seq_len` leaves after the prompt where that is less)."""
    if measured is None:
        turns = f", all {max_turns} turns taken" if max_turns > 1 else ""
        return (
            f"answers: none measured yet for this model, environment and sampling: every answer "
            f"taken to reach its bound ({bound} tokens){turns}, an upper bound (the range's low "
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
    runs = "finished run" if measured.runs == 1 else f"{measured.runs} finished runs"
    scaled = ""
    if abs(measured.scale - 1) >= 0.005 or abs(measured.longest_scale - 1) >= 0.005:
        scaled = (
            f"; x{measured.scale:.2f} of their mean and x{measured.longest_scale:.2f} of their "
            f"longest: their first {measured.steps} steps' answers"
        )
    return (
        f"answers: as the last {runs} of this model, environment and sampling measured "
        f"them (prompt {measured.prompt_tokens:.0f} tokens; answers of at most {bound} tokens: "
        f"{each}{more}{scaled})"
    )
