"""`metrics.jsonl`, the written contract through which processes report progress: one JSON
object per line with `component`, `step`, `time` and that component's metrics. The
orchestrator's training records carry `reward`, `time/step_s`, `num_tokens` and `num_samples`;
`rl`'s live view, `rl status` and plots read them, never console text."""

import math
from pathlib import Path
from typing import Any

from rlcore.files.readback import (
    METRICS,
    METRICS_TAIL,
    Bound,
    Damaged,
    parse_json,
    read_from,
    read_tail,
)


def read_records(
    path: Path, offset: int = 0, root: Path | None = None, bound: Bound = METRICS_TAIL
) -> tuple[list[dict[str, Any]], int]:
    """Complete records after byte `offset`, and the offset after the last complete line (a
    line still being written is left for the next call). At most `bound.max_bytes` are read
    per call (rlcore.files.readback: a FIFO, a device or a link out of `root` reads as no records);
    a line longer than that is skipped whole, so a file without line breaks is never read
    whole nor read again. Only well-formed records are returned (`is_record`)."""
    try:
        chunk = read_from(path, offset, bound, root)
    except (FileNotFoundError, Damaged):
        return [], offset
    end = chunk.rfind(b"\n") + 1
    if end == 0 and len(chunk) >= bound.max_bytes:
        return [], offset + len(chunk)  # part of one over-long line: dropped
    return parse_records(chunk[:end]), offset + end


def read_last_records(
    path: Path, root: Path | None = None, bound: Bound = METRICS_TAIL
) -> list[dict[str, Any]]:
    """The complete records in the last `bound.max_bytes` of the file (a run's latest steps,
    for `rl status` and `rl list`): never the whole of a huge file."""
    try:
        chunk, start = read_tail(path, bound, root)
    except (FileNotFoundError, Damaged):
        return []
    if start > 0:
        chunk = chunk[chunk.find(b"\n") + 1 :] if b"\n" in chunk else b""  # a cut first line
    return parse_records(chunk[: chunk.rfind(b"\n") + 1])


def read_all_records(
    path: Path, root: Path | None = None, bound: Bound = METRICS
) -> list[dict[str, Any]]:
    """Every complete record of the file's last `bound.max_bytes` (`rl plot`, the end-of-run
    reward curve), read chunk by chunk (`read_records`): what is held is the records, never
    the bytes of the file at once."""
    try:
        size = path.stat().st_size
    except (OSError, ValueError):
        return []
    offset = max(0, size - bound.max_bytes)
    records: list[dict[str, Any]] = []
    if offset > 0:  # the first line read is cut: skip to the next line
        offset = skip_line(path, offset, root)
    while offset < size:
        found, after = read_records(path, offset, root)
        if after == offset:
            break
        records += found
        offset = after
    return records


def skip_line(path: Path, offset: int, root: Path | None) -> int:
    """The offset after the line that holds byte `offset` (at most METRICS_TAIL further)."""
    try:
        chunk = read_from(path, offset, METRICS_TAIL, root)
    except (FileNotFoundError, Damaged):
        return offset
    return offset + (chunk.find(b"\n") + 1 or len(chunk))


def parse_records(data: bytes) -> list[dict[str, Any]]:
    records = []
    for line in data.splitlines():
        try:
            record = parse_json(line, "metrics.jsonl")
        except Damaged:
            continue  # a line torn by a killed writer, or not a record
        if is_record(record):
            records.append(record)
    return records


def is_record(record: object) -> bool:
    """A metrics record as the processes write it: an object naming its `component` (text)
    and its `step` (an integer); anything else read back is skipped, never acted on."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("component"), str)
        and is_number(record.get("step"), int)
    )


def is_number(value: object, kinds: type | tuple = (int, float)) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool)


def is_training_step(record: dict[str, Any]) -> bool:
    """An orchestrator record of a written training batch (not an eval)."""
    return record.get("component") == "orchestrator" and is_number(record.get("reward"))


def step_line(
    step: int,
    time_s: float,
    reward: float,
    num_tokens: int,
    num_samples: int,
    num_errors: int = 0,
) -> str:
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

    def number(key: str, default: float = 0) -> float:
        value = record.get(key, default)
        return value if is_number(value) and math.isfinite(value) else default

    return step_line(
        int(record["step"]),
        float(number("time/step_s", 0.0)),
        float(record["reward"]),
        int(number("num_tokens")),
        int(number("num_samples")),
        int(number("num_errors")),
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
