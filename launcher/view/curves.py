"""A run's `metrics.jsonl` as curves: read once per change of the file (its inode, size and
modification time), only the new bytes when it grew, kept in memory as one series per
(component, metric), and sent downsampled. Torn lines are skipped (rlcore.reporting.metrics). A step
that comes again (a restart or a resume) marks the curves there; the record read last wins.
A file of more than SAMPLE_ABOVE lines is read in evenly spaced runs of lines (`sampled`) and
its last lines whole: a curve gets at most MAX_POINTS points, so a 10,000-step run's first
view costs what a 2,000-step run's does. Every read is bounded (rlcore.files.readback): more than
WHOLE_BYTES of new lines are read as NUM_WINDOWS windows of WINDOW_BYTES spread over them and
their last readback.METRICS_TAIL whole, so a file of any size, or one long line without an
end, costs a few tens of MiB at most, once per change."""

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from rlcore.files import readback
from rlcore.files.readback import KIB, MIB, Bound, Damaged
from rlcore.reporting.metrics import is_training_step

# (panel title, unit, [(component, metric key, trace name)]): the names the processes write
# (orchestrator/loop.py, trainer/train.py, rlcore.runs.rundir.append_metrics' rss_mib).
PANELS = (
    ("reward", "", [("orchestrator", "reward", "training")]),
    ("loss", "", [("trainer", "loss", "loss")]),
    ("entropy", "nats", [("trainer", "entropy", "entropy")]),
    ("mismatch_kl", "", [("trainer", "mismatch_kl", "mismatch_kl")]),
    ("grad norm", "", [("trainer", "grad_norm", "grad_norm")]),
    (
        "step time",
        "s",
        [
            ("orchestrator", "time/generate_s", "generate"),
            ("orchestrator", "time/wait_weights_s", "orchestrator wait (weights)"),
            ("trainer", "data_wait_s", "trainer wait (batch)"),
            ("trainer", "step_time_s", "train"),
            ("trainer", "publish_s", "publish"),
        ],
    ),
    (
        "tokens/s",
        "",
        [
            ("trainer", "tokens_per_s", "trainer"),
            ("orchestrator", "throughput_tokens_per_s", "rollouts"),
        ],
    ),
    (
        "memory",
        "GiB",
        [
            ("trainer", "rss_mib", "trainer resident"),
            ("orchestrator", "rss_mib", "orchestrator resident"),
            ("trainer", "peak_memory_gib", "trainer peak (device)"),
        ],
    ),
)
MIB_KEYS = ("rss_mib",)
BLOCK_BYTES = 4 * 2**20
"""metrics.jsonl is read in blocks of about this size: a bad line costs its block the slow path."""
EVALS_MARK = b'"evals"'
SAMPLE_ABOVE = 4800
SAMPLED_LINES = 2400
WINDOW = 8
TAIL_LINES = 400
WHOLE_BYTES = 32 * MIB
"""New lines up to this size are read whole (a 10,000-step run's file is about 24 MB)."""
NUM_WINDOWS = SAMPLED_LINES // WINDOW
WINDOW_BYTES = 64 * KIB
FIRST_LINE = Bound("metrics.jsonl's first line", 64 * KIB)
ENDS_TAIL = Bound("metrics.jsonl's last lines", 256 * KIB)

MAX_POINTS = 600
"""Points per trace sent to a page; longer series are averaged into this many buckets."""


@dataclass
class Curves:
    """Everything read from one metrics.jsonl so far."""

    series: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    last_step: dict[str, int] = field(default_factory=dict)
    markers: list[dict] = field(default_factory=list)
    first_time: float | None = None
    last_time: float | None = None
    offset: int = 0
    key: tuple = ()
    sampled: float = 1.0
    """1, or how many records each one read stands for (a long file read in runs of lines)."""

    def add(self, record: dict) -> None:
        component, step = record.get("component"), record.get("step")
        if not isinstance(component, str) or not isinstance(step, int) or isinstance(step, bool):
            return
        when = record.get("time")
        if is_number(when):
            self.first_time = when if self.first_time is None else min(self.first_time, when)
            self.last_time = when if self.last_time is None else max(self.last_time, when)
        before = self.last_step.get(component)
        if before is not None and step <= before and component in ("trainer", "orchestrator"):
            self.mark(step, component)
        self.last_step[component] = step
        for name, value in record.items():
            if name in ("component", "step", "time") or not is_number(value):
                continue
            if component == "orchestrator" and name == "reward" and not is_training_step(record):
                continue
            self.series.setdefault((component, name), {})[step] = float(value)

    def mark(self, step: int, component: str) -> None:
        if not any(m["step"] == step for m in self.markers):
            self.markers.append({"step": step, "text": f"resumed at step {step} ({component})"})


def is_number(value: object) -> TypeGuard[int | float]:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def file_key(path: Path) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def refresh(curves: Curves, path: Path, root: Path | None = None) -> Curves:
    """`curves` brought up to date with `path`: unchanged, extended by the lines appended since,
    or read again from the start when the file was replaced or shrank. Damaged when it is not
    a regular file inside `root`."""
    key = file_key(path)
    if key == curves.key:
        return curves
    grown = curves.key and key and key[0] == curves.key[0] and key[1] >= curves.offset
    if not grown:
        curves = Curves()
    size = key[1] if key else 0
    if size - curves.offset <= WHOLE_BYTES:
        chunk = readback.read_from(path, curves.offset, Bound("metrics.jsonl", WHOLE_BYTES), root)
        chunk = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next
        for block in blocks(sampled(curves, chunk)):
            add_block(curves, block)
        curves.offset += len(chunk)
    else:
        read_windows(curves, path, size, root)
    curves.key = key
    return curves


def read_windows(curves: Curves, path: Path, size: int, root: Path | None) -> None:
    """New lines too many to read whole: NUM_WINDOWS windows spread evenly over them (the
    whole lines of each, at most WINDOW of them: a run of every component's records), then
    their last readback.METRICS_TAIL whole."""
    tail, tail_start = readback.read_tail(path, readback.METRICS_TAIL, root)
    span = max(0, tail_start - curves.offset)
    window = Bound("a window of metrics.jsonl", WINDOW_BYTES)
    kept = []
    for index in range(NUM_WINDOWS):
        start = curves.offset + span * index // NUM_WINDOWS
        data = readback.read_from(path, start, window, root)
        lines = data.split(b"\n")[1 if start else 0 : -1]  # whole lines only
        kept += lines[:WINDOW]
    whole = tail[tail.find(b"\n") + 1 :] if tail_start > curves.offset else tail
    whole = whole[: whole.rfind(b"\n") + 1]
    chunk = b"\n".join(kept) + b"\n" + whole if kept else whole
    for block in blocks(chunk):
        add_block(curves, block)
    read = max(1, len(kept) * WINDOW_BYTES // WINDOW)
    curves.sampled = max(curves.sampled, span / read)
    end = tail_start + tail.rfind(b"\n") + 1
    curves.offset = max(curves.offset, end) if b"\n" in tail else curves.offset


def sampled(curves: Curves, chunk: bytes) -> bytes:
    """The lines of `chunk` to read: all of them up to SAMPLE_ABOVE; beyond, evenly spaced
    runs of WINDOW consecutive lines (a run holds every component's record of its steps, as
    they write one each per step) to about SAMPLED_LINES, and the last TAIL_LINES whole (the
    last steps, the last-5 reward). A curve has at most MAX_POINTS points anyway."""
    if chunk.count(b"\n") <= SAMPLE_ABOVE:
        return chunk
    lines = chunk.split(b"\n")[:-1]
    head, tail = lines[:-TAIL_LINES], lines[-TAIL_LINES:]
    every = max(1, len(head) * WINDOW // SAMPLED_LINES)
    kept = [line for start in range(0, len(head), every) for line in head[start : start + WINDOW]]
    kept += [line for line in head if EVALS_MARK in line]  # few, and each a point of its own
    curves.sampled = max(curves.sampled, every / WINDOW)
    return b"\n".join(kept + tail) + b"\n"


def ends(path: Path, root: Path | None = None, tail_bytes: int = ENDS_TAIL.max_bytes) -> Curves:
    """What a list of runs needs from a metrics.jsonl of any length (its first time, the last
    steps, the last rewards), from its first line (FIRST_LINE at most) and its last
    `tail_bytes` only. Damaged when it is not a regular file inside `root`."""
    found = Curves()
    head = readback.read_from(path, 0, FIRST_LINE, root)
    first = head[: head.find(b"\n") + 1]
    tail, start = readback.read_tail(path, Bound(ENDS_TAIL.kind, tail_bytes), root)
    if start > len(first):
        tail = tail[tail.find(b"\n") + 1 :]  # the first line of the tail may be cut
    elif start < len(first):
        tail = tail[len(first) - start :]
    tail = tail[: tail.rfind(b"\n") + 1]
    for line in [first, *tail.splitlines()]:
        record = parse_line(line)
        if isinstance(record, dict):
            found.add(record)
    found.key = file_key(path)
    return found


def parse_line(line: bytes):
    """One line as a record; None for a torn, nested or otherwise damaged one."""
    if not line.strip():
        return None
    try:
        return readback.parse_json(line, "metrics.jsonl")
    except Damaged:
        return None


def blocks(chunk: bytes, size: int | None = None):
    """`chunk` in pieces of about `size` bytes (BLOCK_BYTES), each ending at a line's end."""
    size = size or BLOCK_BYTES
    start = 0
    while start < len(chunk):
        end = chunk.find(b"\n", start + size)
        end = len(chunk) if end < 0 else end + 1
        yield chunk[start:end]
        start = end


def add_block(curves: Curves, block: bytes) -> None:
    """Whole lines: the metrics the panels draw read as columns, then the few `evals` records
    (`<env>/reward`, names known only when read) one by one; a block with a line the column
    reader refuses (torn, `NaN`, a field of another type) is read record by record."""
    if add_columns(curves, block):
        lines = [line for line in block.splitlines() if EVALS_MARK in line]
    else:
        lines = block.splitlines()
    for line in lines:
        record = parse_line(line)  # None: a line torn by a killed writer
        if isinstance(record, dict):
            curves.add(record)


def add_columns(curves: Curves, chunk: bytes) -> bool:
    """Add the metrics PANELS draw from whole lines of metrics.jsonl, read as columns of a
    fixed schema (pyarrow's JSON reader: a 10,000-step run's 12 MB in a few tenths of a second
    where json.loads per line takes a second or more); False when a line does not fit (the
    caller reads that block record by record)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.json as pa_json

    if not chunk.strip():
        return True
    options = pa_json.ParseOptions(
        explicit_schema=column_schema(), unexpected_field_behavior="ignore"
    )
    try:
        table = pa_json.read_json(pa.BufferReader(chunk), parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    steps, valid = numbers(table["step"], pa.int64(), np.int64)
    components = np.array(table["component"].to_pylist(), dtype=object)
    if not valid.all() or any(not isinstance(c, str) for c in components.tolist()):
        return False
    times, known = numbers(table["time"], pa.float64(), np.float64)
    add_times(curves, times[known])
    for component in dict.fromkeys(components.tolist()):
        rows = components == component
        if component == "evals":
            continue  # its records are read whole (add_block)
        add_steps(curves, component, steps[rows])
        for name in table.column_names[3:]:
            values, known = numbers(table[name], pa.float64(), np.float64)
            add_series(curves, (component, name), steps, values, rows & known)
    return True


def column_schema():
    import pyarrow as pa

    keys = sorted({key for _, _, specs in PANELS for _, key, _ in specs})
    fields = [("component", pa.string()), ("step", pa.int64()), ("time", pa.float64())]
    return pa.schema(fields + [(key, pa.float64()) for key in keys])


def is_numeric(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


def numbers(column, kind, dtype):
    """A numeric column as (numpy values, numpy validity), straight from its buffers (pyarrow's
    own to_numpy imports pandas: a second on the first call)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    array = pc.cast(column, kind).combine_chunks()
    valid = pc.cast(pc.is_valid(array), pa.int8())
    return buffer_view(array, dtype), buffer_view(valid, np.int8).astype(bool)


def buffer_view(array, dtype):
    import numpy as np

    data = np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array) + array.offset)
    return data[array.offset :]


def add_times(curves: Curves, times) -> None:
    import numpy as np

    times = times[np.isfinite(times)]
    if len(times):
        first, last = float(times.min()), float(times.max())
        curves.first_time = first if curves.first_time is None else min(curves.first_time, first)
        curves.last_time = last if curves.last_time is None else max(curves.last_time, last)


def add_steps(curves: Curves, component: str, steps) -> None:
    """Mark where a component's step comes again (a restart or resume) and keep its last."""
    listed = steps.tolist()
    if component in ("trainer", "orchestrator"):
        before = curves.last_step.get(component)
        for step in listed:
            if before is not None and step <= before:
                curves.mark(step, component)
            before = step
    if listed:
        curves.last_step[component] = listed[-1]


def add_series(curves: Curves, key: tuple[str, str], steps, values, keep) -> None:
    """One metric's values where `keep` (finite ones), the last record per step winning. The
    orchestrator's `reward` counts only from training records
    (rlcore.reporting.metrics.is_training_step: every orchestrator record that has one)."""
    import numpy as np

    keep = keep & np.isfinite(values)
    if keep.any():
        series = curves.series.setdefault(key, {})
        series.update(zip(steps[keep].tolist(), values[keep].tolist(), strict=True))


def downsample(steps: list[int], values: list[float], limit: int = MAX_POINTS):
    """At most `limit` points: the means of equal runs of steps (the last point kept as is)."""
    if len(steps) <= limit:
        return steps, values
    size = math.ceil(len(steps) / limit)
    xs, ys = [], []
    for i in range(0, len(steps), size):
        chunk = values[i : i + size]
        xs.append(steps[i + len(chunk) // 2])
        ys.append(sum(chunk) / len(chunk))
    xs[-1], ys[-1] = steps[-1], values[-1]
    return xs, ys


def trace(curves: Curves, component: str, key: str, limit: int = MAX_POINTS) -> tuple[list, list]:
    by_step = curves.series.get((component, key), {})
    steps = sorted(by_step)
    values = [by_step[s] / 1024 if key in MIB_KEYS else by_step[s] for s in steps]
    return downsample(steps, values, limit)


def panels(curves: Curves, limit: int = MAX_POINTS) -> list[dict]:
    """The run's panels as a page draws them; the evaluation rewards `evals --watch` wrote join
    the reward panel."""
    found = []
    for title, unit, specs in PANELS:
        traces = []
        for component, key, name in specs:
            xs, ys = trace(curves, component, key, limit)
            if xs:
                traces.append({"name": name, "x": xs, "y": ys})
        if title == "reward":
            for component, key in sorted(curves.series):
                if component == "evals" and key.endswith("/reward"):
                    xs, ys = trace(curves, component, key, limit)
                    traces.append({"name": f"eval {key[: -len('/reward')]}", "x": xs, "y": ys})
        found.append({"title": title, "unit": unit, "traces": traces})
    return found


def last_mean(curves: Curves, component: str, key: str, window: int = 5) -> float | None:
    by_step = curves.series.get((component, key), {})
    last = [by_step[s] for s in sorted(by_step)[-window:]]
    return sum(last) / len(last) if last else None
