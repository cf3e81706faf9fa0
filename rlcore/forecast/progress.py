"""The time left while a run goes: the pre-launch step time corrected by the steps measured so
far, and what run.json keeps of estimate and outcome, so every finished run says how good its
estimate was. Pure: the caller gives the clock's readings."""

import math
import statistics
import time
from dataclasses import dataclass, field, replace

from rlcore.reporting.metrics import is_training_step

RECENT_STEPS = 8
"""Measured intervals per stream the pace is taken from (the latest ones: the first step's
warm-up and an earlier load fade out)."""


@dataclass(frozen=True)
class PacePolicy:
    """How the measured intervals and the pre-launch step time make the pace (chosen on recorded
    runs by benchmarks/eta_replay.py, which replays others against it)."""

    trainer_from: int = 1
    """The trainer's first completed step an interval may start at (1: its first step's end;
    the first step's own warm-up lies before it)."""
    batches_waiting: bool = True
    """Count the orchestrator's intervals only between batches that waited for a trained policy
    (from batch `untrained_batches` on): the earlier ones are generated back to back from the
    base policy, faster than any step."""
    estimate_weight: float = 1.0
    """How many measured intervals the pre-launch step time counts as, until `median_from`."""
    median_from: int = 2
    """From this many measured intervals on, the pace is their median alone."""
    warmup_steps: float = 1.0
    """Steps of the pace added for the trainer's first step's warm-up until that step is seen."""
    first_batch_ends_start: bool = True
    """Once the first batch is written, the start and the warm-up (its generation) are over:
    until the trainer's first step, the steps are counted from that batch, however long the
    start took (in a resumed run, from the step that batch is for)."""


PACE = PacePolicy()


@dataclass
class Progress:
    """Steps seen with the time each was seen (seconds on one clock): the trainer's optimizer
    steps, which end the run, and the orchestrator's batches, which show the pace earlier."""

    max_steps: int
    estimated_step_s: float | None
    estimated_end_s: float = 0.0
    """After the last step: the final checkpoint and the shutdown."""
    start: float = 0.0
    seen: dict[int, float] = field(default_factory=dict)
    """The trainer's completed steps (1-based count) and when each was seen."""
    batches: dict[int, float] = field(default_factory=dict)
    """The orchestrator's written batches (1-based count) and when each was seen."""
    untrained_batches: int = 0
    """Batches the orchestrator writes before the first needs a trained policy (an async run's
    `async_level + 1`; 0 where unknown)."""
    estimated_start_s: float = 0.0
    """Before the first step: the processes' start (imports, engines, loading) from `start`."""
    estimated_warmup_s: float | None = None
    """The first step's warm-up as the estimate has it (None: a step of the pace)."""
    estimated_compile_s: float = 0.0
    """A compiled trainer's compile in its first step, as the estimate has it (0: eager)."""
    policy: PacePolicy = PACE

    def step_done(self, done: int, now: float) -> None:
        self.seen.setdefault(done, now)

    def batch_done(self, done: int, now: float) -> None:
        self.batches.setdefault(done, now)

    def intervals(self) -> list[float]:
        """Seconds per step between consecutive records of each stream (the trainer's from step
        `policy.trainer_from` on, the orchestrator's from the first batch that waited for a
        trained policy), the latest RECENT_STEPS of each."""
        first_batch = max(self.untrained_batches, 1) if self.policy.batches_waiting else 1
        found = []
        for times, first in ((self.seen, self.policy.trainer_from), (self.batches, first_batch)):
            done = [n for n in sorted(times) if n >= first][-(RECENT_STEPS + 1) :]
            for a, b in zip(done, done[1:], strict=False):
                found.append((times[b] - times[a]) / (b - a))
        return found

    def steady_s(self) -> float | None:
        """A finished run's steady step: the median of its intervals but the last step's (it
        only trains: its batch was generated during the step before); None with fewer than
        two."""
        last = max(self.seen, default=0)
        seen = {n: t for n, t in self.seen.items() if n < last or last < self.max_steps}
        found = replace(self, seen=seen).intervals()
        return statistics.median(found) if len(found) >= 2 else None

    def pace_s(self) -> float | None:
        """Seconds per step: the measured intervals' median once there are `median_from`, before
        that their mean with the estimate counted `estimate_weight` times; the estimate alone
        before any."""
        measured, estimate = self.intervals(), self.estimated_step_s
        if not measured:
            return estimate
        weight = self.policy.estimate_weight
        if len(measured) >= self.policy.median_from or estimate is None or weight <= 0:
            return statistics.median(measured)
        return (sum(measured) + weight * estimate) / (len(measured) + weight)

    def left_s(self, now: float) -> float | None:
        """Seconds until the run ends (the trainer's steps left, then the end; before its first
        step, counted from the first batch, or before that batch what is left of the start and
        the first step's warm-up), with a compiled trainer's compile until its first step;
        None without any figure."""
        done = max(self.seen, default=0)
        since_last = now - self.seen[done] if done else 0.0
        if done >= self.max_steps:
            return max(self.estimated_end_s - since_last, 0.0)
        pace = self.pace_s()
        if pace is None:
            return None
        if not done and self.batches and self.policy.first_batch_ends_start:
            first = min(min(self.batches), self.max_steps)  # a resumed run's: its next step's
            since_first = now - self.batches[min(self.batches)]
            steps = self.max_steps - first + 1
            left = steps * pace + self.estimated_compile_s - since_first
            return max(left, 0.0) + self.estimated_end_s
        left = max((self.max_steps - done) * pace - since_last, 0.0) + self.estimated_end_s
        if not done:
            left += self.estimated_compile_s
            warmup = pace
            if self.estimated_warmup_s is not None and self.estimated_step_s:
                warmup = self.estimated_warmup_s * pace / self.estimated_step_s
            left += self.policy.warmup_steps * warmup
            left += max(self.estimated_start_s - (now - self.start), 0.0)
        return left


def duration(seconds: float | None) -> str:
    """`1 h 05 min`, `4 min 10 s`, `42 s`; `?` for None."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(int(round(seconds)), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def accuracy(estimate: dict, measured: dict) -> dict[str, float]:
    """measured / estimated for the figures both hold (wall time, step time, each process's
    peak memory, disk): 1.0 is a perfect estimate."""
    pairs = {
        "wall": (estimate.get("wall_s"), measured.get("wall_s")),
        "step": (estimate.get("step_s"), measured.get("step_s")),
        "disk": (sum((estimate.get("disk_bytes") or {}).values()), measured.get("disk_bytes")),
    }
    for name, value in (estimate.get("memory_bytes") or {}).items():
        pairs[f"memory {name}"] = (value, (measured.get("peak_memory_bytes") or {}).get(name))
    ratios = {}
    for name, (est, got) in pairs.items():
        if isinstance(est, int | float) and isinstance(got, int | float) and est > 0:
            ratios[name] = round(got / est, 3)
    return ratios


def number(value: object, low: float = 0.0) -> float | None:
    """A finite number of at least `low` read back, else None (damaged counts as absent)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= low else None


def from_estimate(estimate: object, max_steps: int, start: float = 0.0) -> Progress:
    """The progress of a run of `max_steps` against its estimate (run.json's `estimate`, the
    record of `rlcore.forecast.model.Forecast`), before any step: the estimate's own steps on
    average (its wall less its start, compile and end: a LoRA run's first steps are the base
    policy's, shorter), its warm-up, compile, start and end, so that the time left at the
    start is its wall time. Damaged fields count as absent."""
    estimate = estimate if isinstance(estimate, dict) else {}
    step_s = number(estimate.get("step_s"))
    wall, start_s = number(estimate.get("wall_s")), number(estimate.get("start_s"))
    end_s, warmup = number(estimate.get("end_s")), number(estimate.get("warmup_s"))
    untrained = estimate.get("untrained_batches")
    compile_s = number(estimate.get("compile_s")) or 0.0
    if step_s and wall is not None and start_s is not None and end_s is not None:
        steps = (wall - start_s - end_s - compile_s) / max(max_steps, 1)
        step_s = steps if steps > 0 else step_s
    return Progress(
        max_steps,
        step_s or None,
        end_s or 0.0,
        start=start,
        untrained_batches=untrained
        if isinstance(untrained, int) and not isinstance(untrained, bool) and 0 <= untrained < 64
        else 0,
        estimated_start_s=max((start_s or 0.0) - (warmup or 0.0), 0.0),
        estimated_warmup_s=warmup,
        estimated_compile_s=compile_s,
    )


def from_records(estimate: object, records: list, max_steps: int) -> Progress:
    """A run's progress read back (run.json's `estimate`, metrics.jsonl's records): each trainer
    step at the wall-clock `time` its record carries. Damaged fields count as absent."""
    progress = from_estimate(estimate, max_steps)
    progress.estimated_start_s = 0.0  # its start is not on the records' clock
    for record in records:
        step, when = record.get("step"), record.get("time")
        if not isinstance(step, int) or not isinstance(when, int | float):
            continue
        if not math.isfinite(when):
            continue
        if record.get("component") in ("trainer", "sft") and step > 0:
            progress.step_done(step, float(when))
        elif is_training_step(record) and step >= 0:
            progress.batch_done(step + 1, float(when))
    return progress


def status_line(state: dict, records: list, now: float) -> str | None:
    """`rl status`'s and `rl view`'s words on time: the time left with the expected finish
    while it runs, estimate against actual once finished; None without an estimate or steps."""
    estimate = state.get("estimate")
    measured, ratios = state.get("measured"), state.get("estimate_accuracy")
    if isinstance(measured, dict) and isinstance(estimate, dict):
        wall, actual = estimate.get("wall_s"), measured.get("wall_s")
        if isinstance(wall, int | float) and isinstance(actual, int | float):
            ratio = f" ({actual / wall:.2f}x)" if wall > 0 else ""
            rest = ""
            if isinstance(ratios, dict):
                rest = "; " + ", ".join(
                    f"{k} {v:.2f}x"
                    for k, v in ratios.items()
                    if k != "wall" and isinstance(v, int | float)
                )
            return f"estimated {duration(wall)}, took {duration(actual)}{ratio}{rest}"
    progress = state.get("progress")
    progress_state = progress if isinstance(progress, dict) else {}
    max_steps = progress_state.get("max_steps")
    if not isinstance(max_steps, int) or max_steps <= 0:
        return None
    left = from_records(estimate, records, max_steps).left_s(now)
    if left is None:
        return None
    try:
        finish = time.strftime("%H:%M:%S", time.localtime(now + left))
    except (OverflowError, ValueError, OSError):  # a forged estimate: centuries away
        return f"~{duration(left)}"
    return f"~{duration(left)} (expected to finish at {finish})"
