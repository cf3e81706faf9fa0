"""`metrics.jsonl`, the written contract through which processes report progress: one JSON
object per line with `component`, `step`, `time` and that component's metrics. The
orchestrator's training records carry `reward`, `time/step_s`, `num_tokens` and `num_samples`;
`rl`'s live view, `rl status` and plots read them, never console text."""

import json
from pathlib import Path
from typing import Any


def read_records(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete records after byte `offset`, and the offset after the last complete line (a
    line still being written is left for the next call)."""
    if not path.exists():
        return [], offset
    with path.open("rb") as f:
        f.seek(offset)
        chunk = f.read()
    end = chunk.rfind(b"\n") + 1
    records = []
    for line in chunk[:end].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line torn by a killed writer
        if isinstance(record, dict):
            records.append(record)
    return records, offset + end


def is_training_step(record: dict[str, Any]) -> bool:
    """An orchestrator record of a written training batch (not an eval)."""
    return record.get("component") == "orchestrator" and "reward" in record


def step_line(
    step: int, time_s: float, reward: float, num_tokens: int, num_samples: int,
    num_errors: int = 0,
) -> str:  # fmt: skip
    """The one console line per training step; failed rollouts are named when there are any."""
    throughput = num_tokens / time_s if time_s > 0 else 0.0
    seq_len = num_tokens / num_samples if num_samples else 0.0
    errors = f" | Errors: {num_errors} rollouts" if num_errors else ""
    return (
        f"Step {step} | Time: {time_s:.2f}s | Reward: {reward:.4f} | "
        f"Throughput: {throughput:.1f} tokens/s | Seq. Length: {seq_len:.1f} tokens/sample"
        f"{errors}"
    )


def record_step_line(record: dict[str, Any]) -> str:
    """`step_line` of an orchestrator training record."""
    return step_line(
        int(record["step"]),
        float(record.get("time/step_s", 0.0)),
        float(record["reward"]),
        int(record.get("num_tokens", 0)),
        int(record.get("num_samples", 0)),
        int(record.get("num_errors", 0)),
    )


SPARK = "▁▂▃▄▅▆▇█"


def reward_curve(records: list[dict[str, Any]], window: int = 5) -> str:
    """Two lines about a run's training reward: a sparkline over the steps (0 to 1, one
    character per step, averaged into at most 60 buckets) and first/last-window means."""
    steps = {int(r["step"]): float(r["reward"]) for r in records if is_training_step(r)}
    if not steps:
        return "no training steps recorded"
    rewards = [steps[s] for s in sorted(steps)]
    size = max(1, -(-len(rewards) // 60))
    buckets = [rewards[i : i + size] for i in range(0, len(rewards), size)]
    levels = [min(max(sum(b) / len(b), 0.0), 1.0) for b in buckets]
    line = "".join(SPARK[round(v * (len(SPARK) - 1))] for v in levels)
    first = sum(rewards[:window]) / len(rewards[:window])
    last = sum(rewards[-window:]) / len(rewards[-window:])
    return (
        f"reward by step {min(steps)}..{max(steps)}: {line}\n"
        f"mean reward of the first {window} steps {first:.3f}, of the last {window} {last:.3f}"
    )
