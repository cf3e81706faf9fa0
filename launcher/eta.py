"""The run's clock against its estimate, for the supervisor: the time left on the progress line
and in run.json (with the expected finish, for `rl status` and `rl view`), each process's peak
memory sampled as it runs, and at the end the measured totals beside the pre-launch estimate,
so every finished run says how good its estimate was (rlcore/forecast/progress.py)."""

import time
from pathlib import Path

import psutil

from rlcore.files.disk_use import folder_bytes
from rlcore.forecast import contention
from rlcore.forecast.answers import MAX_STEPS_READ, remember, summarize
from rlcore.forecast.progress import accuracy, duration, from_estimate
from rlcore.processes.procs import high_water_bytes
from rlcore.reporting.metrics import is_training_step

MAX_TOKENS_READ = 4_000_000
"""Completion tokens a finished run's answers are measured on at most (a few seconds)."""
MEMORY_SAMPLE_S = 5.0
"""How often each process tree's memory is read (proportional set size: shared pages split)."""
PEAK_COMPONENTS = ("trainer",)
"""Components whose measured peak is their high-water mark (`tree_memory(peak=True)`): the
trainer's peak lasts a part of a step, which a sample every MEMORY_SAMPLE_S can miss (the quick
start's trainer: 2.90 GiB sampled in one run, 3.32 GiB at its high-water mark in the next, 3.45
estimated). Inference's and the orchestrator's are what they hold while they serve, sampled:
the machine's peak comes in a training step, after inference's load (which briefly holds
0.2-0.5 GB more)."""


def tree_memory(pid: int, peak: bool = False) -> int:
    """Bytes a process and its descendants hold (PSS where readable, else RSS); 0 when gone.
    With `peak`, each process's high-water mark instead: what it holds now plus how far its
    resident peak lies above its resident size now (`procs.high_water_bytes`), so that a peak
    between two samples is not missed."""
    total = 0
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
            total += getattr(info, "pss", 0) or info.rss
        except psutil.AccessDenied:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        except psutil.Error:
            continue
        total += high_water_bytes(proc.pid) if peak else 0
    return total


def archived_answers(root: Path, bound: int = 0) -> dict | None:
    """The run's answers (rlcore.forecast.answers.summarize) from the policy's tokens of up to
    MAX_STEPS_READ of its archived steps, spread over the run, within MAX_TOKENS_READ tokens
    (the steps after the one that reaches it are left), answers at most `bound` tokens
    (`max_tokens`); None without an archive, or where it cannot be read (only an estimate is
    missed: nothing is kept)."""
    from rlcore.contracts.samples_store import SAMPLES_DIR, list_steps, read_step, step_file

    folder = root / SAMPLES_DIR
    try:
        steps = list_steps(folder)
        picked = steps[:: max(-(-len(steps) // MAX_STEPS_READ), 1)]
        rows, numbers, tokens = [], [], 0
        for step in picked:
            table = read_step(step_file(folder, step), ["token_mask", "num_prompt_tokens"])
            masks = table.column("token_mask").to_pylist()
            prompts = table.column("num_prompt_tokens").to_pylist()
            rows.append(
                [
                    ([bool(t) for t in mask or []], int(prompt or 0))
                    for mask, prompt in zip(masks, prompts, strict=True)
                ]
            )
            numbers.append(step)
            tokens += sum(len(mask) for mask, _ in rows[-1])
            if tokens >= MAX_TOKENS_READ:
                break
        return summarize(rows, bound, numbers)
    except Exception:  # noqa: BLE001  (a damaged archive costs the next estimate, not the run)
        return None


class RunClock:
    """One attempt's progress against the plan's estimate (None: no estimate, measured only)."""

    def __init__(self, forecast, max_steps: int, components: list[str]):
        self.estimate = forecast.record() if forecast is not None else None
        self.answers_key = forecast.answers_key if forecast is not None else ""
        self.answers_bound = forecast.answers_bound if forecast is not None else 0
        self.answers_seq_len = forecast.answers_seq_len if forecast is not None else 0
        self.contention_key = forecast.contention_key if forecast is not None else ""
        self.started = time.monotonic()
        self.progress = from_estimate(self.estimate, max_steps, start=self.started)
        self.first_step_at: float | None = None
        self.peaks: dict[str, int] = {}
        self.components = components
        self.last_sample = 0.0
        self.finished_at: float | None = None

    def record(self, record: dict) -> None:
        """A metrics.jsonl record: the trainer's (`step` = optimizer steps done) and the
        orchestrator's training batches (`step` = the batch's index) count."""
        step = record.get("step")
        if not isinstance(step, int):
            return
        if record.get("component") in ("trainer", "sft") and step > 0:
            self.step_done(step)
        elif is_training_step(record) and step >= 0:
            self.progress.batch_done(step + 1, time.monotonic())

    def step_done(self, done: int) -> None:
        now = time.monotonic()
        if self.first_step_at is None:
            self.first_step_at = now
        self.progress.step_done(done, now)

    def left_s(self) -> float | None:
        if self.finished_at is not None:
            return 0.0
        return self.progress.left_s(time.monotonic())

    def suffix(self) -> str:
        """` | left ~4 min 10 s` for the progress line ('' without a figure)."""
        left = self.left_s()
        return "" if left is None else f" | left ~{duration(left)}"

    def sample_memory(self, pids: dict[str, int]) -> None:
        """Each component's memory now, kept at its peak (every MEMORY_SAMPLE_S)."""
        now = time.monotonic()
        if now - self.last_sample < MEMORY_SAMPLE_S:
            return
        self.last_sample = now
        for name, pid in pids.items():
            key = "inference" if name.startswith("inference") else name
            held = tree_memory(pid, peak=key in PEAK_COMPONENTS)
            self.peaks[key] = max(self.peaks.get(key, 0), held)

    def finish(self, root: Path) -> dict:
        """The measured totals at the end of a run, and their ratio to the estimate."""
        self.finished_at = time.monotonic()
        wall = self.finished_at - self.started
        seen = sorted(self.progress.seen)
        step = self.progress.steady_s()  # the last step (a final validation, checkpoint) aside
        if step is None and len(seen) >= 2:
            step = (self.progress.seen[seen[-1]] - self.progress.seen[seen[0]]) / (
                seen[-1] - seen[0]
            )
        measured = {
            "wall_s": round(wall, 1),
            "step_s": round(step, 3) if step is not None else None,
            "start_s": round(self.first_step_at - self.started, 1) if self.first_step_at else None,
            "peak_memory_bytes": dict(self.peaks),
            "disk_bytes": folder_bytes(root),
        }
        self.measured = measured
        if self.answers_key and self.progress.seen:  # for the next estimate of this job
            found = archived_answers(root, self.answers_bound)
            remember(self.answers_key, found, self.answers_bound, self.answers_seq_len)
        if self.contention_key:  # this machine's async steps, for its next estimate
            figure = contention.measure(self.estimate, self.progress.steady_s())
            contention.remember(self.contention_key, figure)
        return measured

    def against_estimate(self) -> str | None:
        """One line: the estimate against what the run measured (None without an estimate)."""
        measured = getattr(self, "measured", None)
        if not self.estimate or measured is None:
            return None
        ratios = accuracy(self.estimate, measured)
        words = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items())
        return (
            f"estimated {duration(self.estimate['wall_s'])}, took "
            f"{duration(measured['wall_s'])} (measured / estimated: {words})"
        )

    def state(self) -> dict:
        """What run.json keeps: the estimate, the time left with the expected finish (wall
        clock, for `rl status` and `rl view`) and, once finished, the measured totals."""
        left = self.left_s()
        state: dict = {"estimate": self.estimate}
        state["progress"] = {
            "steps_done": max(self.progress.seen, default=0),
            "max_steps": self.progress.max_steps,
            "time_left_s": round(left, 1) if left is not None else None,
            "expected_finish": round(time.time() + left, 1) if left is not None else None,
        }
        measured = getattr(self, "measured", None)
        if measured is not None:
            state["measured"] = measured
            if self.estimate:
                state["estimate_accuracy"] = accuracy(self.estimate, measured)
        return state
