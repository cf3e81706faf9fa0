"""The rollout archive, defined once: every rollout a run generates, one Parquet file per step,
written once by the orchestrator and never read by training (`rl view` and tools read it).

Format 1 (`SAMPLES_FORMAT`): `<run>/samples/step_<n>.parquet`, n the batch index (as
`rollouts/step_<n>/`), zstd-compressed, written atomically (a temporary sibling, fsync'd, then
renamed: a reader sees a whole step or none). Key-value metadata `rl.samples_format`, `rl.step`,
`rl.policy_step`. One row per rollout generated for the step (kept, errored, and those of
groups dynamic sampling dropped), with the columns of `SCHEMA_FIELDS`:

- `step`, `policy_step`, `env` (the `[[env]]` id), `group` (index within the step), `member`
  (index within the group), `example_id`;
- `prompt`, `completion`: JSON text (a chat message list with its tool calls and tool results,
  or a JSON string);
- `reward`, `reward_parts` (JSON object name -> float), `advantage` (null where not trained
  on), `kept` (in the training batch);
- `num_prompt_tokens`, `num_completion_tokens` (every completion token, the policy's and the
  environment's: the length of the token lists), `is_truncated`, `error` (null when none);
- `token_text` (each completion token's text, across turns, in order; null where the run had
  no tokenizer), `token_logprob` (the inference engine's logprob; 0 where the environment wrote
  the token), `token_mask` (true: the policy produced it).

This module is the format's one owner: the orchestrator writes through `write_step`, `rl view`
and tools read through `open_step` (a path or a file a caller opened), and the tests' run folders
are written by the same `write_step`. The reader refuses a file whose metadata names another
format (or none), and names every column of `SCHEMA_FIELDS` that a file lacks or holds with
another kind of type (`column_problems`): `read_step` refuses such a file, `rl view` shows the
rest and says what is missing. A file read back may be damaged or forged (a 7 kB zstd file can
hold gigabytes): `read_scalars` and `read_rows` read it within bounds (`MAX_ROWS`,
`MAX_SCALAR_BYTES`, one `DecodeBudget` shared by every reader of the process), texts as byte
views (a Parquet string may hold any bytes) one row at a time, for the caller to cut in Arrow.

pyarrow is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rlcore.files import readback
from rlcore.files.atomic import fsync_path
from rlcore.files.readback import MIB

if TYPE_CHECKING:
    import pyarrow as pa

SAMPLES_DIR = "samples"
SAMPLES_FORMAT = "1"
META_FORMAT, META_STEP, META_POLICY_STEP = b"rl.samples_format", b"rl.step", b"rl.policy_step"
SCHEMA_FIELDS = (
    ("step", "int64"),
    ("policy_step", "int64"),
    ("env", "string"),
    ("group", "int32"),
    ("member", "int32"),
    ("example_id", "int64"),
    ("prompt", "string"),
    ("completion", "string"),
    ("reward", "float64"),
    ("reward_parts", "string"),
    ("advantage", "float64"),
    ("kept", "bool"),
    ("num_prompt_tokens", "int32"),
    ("num_completion_tokens", "int32"),
    ("is_truncated", "bool"),
    ("error", "string"),
    ("token_text", "list<string>"),
    ("token_logprob", "list<float32>"),
    ("token_mask", "list<bool>"),
)
"""Every column, in order, with its Arrow type."""
COLUMNS = tuple(name for name, _ in SCHEMA_FIELDS)
FILLED = ("step", "policy_step")
"""The columns `write_step` fills in itself (a row may hold them; they are overwritten)."""
TEXT_COLUMNS = tuple(name for name, kind in SCHEMA_FIELDS if kind == "string")
"""Columns of text, read as bytes (`conform`): any bytes may be stored, one value may be huge."""
TOKEN_COLUMNS = tuple(name for name, kind in SCHEMA_FIELDS if kind.startswith("list<"))
"""Per-token lists, one value per completion token."""
SCALAR_COLUMNS = tuple(name for name in COLUMNS if name not in TEXT_COLUMNS + TOKEN_COLUMNS)
"""One small value a row: what a listing of a step's rows reads."""
STEP_FILE = re.compile(r"^step_(\d+)\.parquet$")


class SamplesError(ValueError):
    """A file that is not a readable step of this format; the message names it."""


def schema() -> pa.Schema:
    """The format's Arrow schema (without its metadata: `metadata`)."""
    import pyarrow as pa

    types = {
        "int64": pa.int64(),
        "int32": pa.int32(),
        "string": pa.string(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "list<string>": pa.list_(pa.string()),
        "list<float32>": pa.list_(pa.float32()),
        "list<bool>": pa.list_(pa.bool_()),
    }
    return pa.schema([pa.field(name, types[kind]) for name, kind in SCHEMA_FIELDS])


def step_file(folder: Path, step: int) -> Path:
    """`<folder>/step_<step>.parquet` (folder: the run's `samples/`)."""
    return folder / f"step_{step}.parquet"


def list_steps(folder: Path) -> list[int]:
    """The steps with a complete file in `folder`, ascending (temporaries are never listed)."""
    if not folder.is_dir():
        return []
    found = (STEP_FILE.match(p.name) for p in folder.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def step_sizes(folder: Path) -> dict[int, int]:
    """Bytes of each step's file (links are not counted: the archive never makes one)."""
    sizes = {}
    for step in list_steps(folder):
        path = step_file(folder, step)
        if path.is_file() and not path.is_symlink():
            sizes[step] = path.stat().st_size
    return sizes


def metadata(step: int, policy_step: int) -> dict[bytes, bytes]:
    """A step file's key-value metadata: the format, its step and the policy that generated it."""
    return {
        META_FORMAT: SAMPLES_FORMAT.encode(),
        META_STEP: str(step).encode(),
        META_POLICY_STEP: str(policy_step).encode(),
    }


def step_table(step: int, policy_step: int, rows: list[dict[str, Any]]) -> pa.Table:
    """One step's rows (dicts keyed by `COLUMNS`; `FILLED` is filled in) as the format's table;
    ValueError for a row with a key the format lacks or without one it has (a renamed column
    fails here, never as a silently empty column)."""
    import pyarrow as pa

    needed = set(COLUMNS) - set(FILLED)
    for row in rows:
        unknown, missing = set(row) - set(COLUMNS), needed - set(row)
        if unknown or missing:
            raise ValueError(
                f"an archive row must have exactly the columns of rollout archive "
                f"format {SAMPLES_FORMAT}: unknown {sorted(unknown)}, missing "
                f"{sorted(missing)}"
            )
    columns = {name: [row.get(name) for row in rows] for name in COLUMNS}
    columns["step"], columns["policy_step"] = [step] * len(rows), [policy_step] * len(rows)
    return pa.table(columns, schema=schema().with_metadata(metadata(step, policy_step)))


def write_step(folder: Path, step: int, policy_step: int, rows: list[dict[str, Any]]) -> int:
    """Write one step's rows (`step_table`) as `step_<step>.parquet`, replacing an earlier file
    of that step atomically; returns the file's bytes. On an error no temporary is left and the
    earlier file stays."""
    import pyarrow.parquet as pq

    table = step_table(step, policy_step, rows)
    folder.mkdir(parents=True, exist_ok=True)
    final = step_file(folder, step)
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    try:
        with tmp.open("wb") as handle:  # a file object: pyarrow takes only UTF-8 paths
            pq.write_table(table, handle, compression="zstd")
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(folder)
    return final.stat().st_size


# -- reading: every file read back is data, maybe damaged or forged -----------------------------
def open_step(source: Path | IO[bytes], name: str | None = None):
    """The Parquet file of one step (a path, or a binary file the caller opened: `rl view`
    opens it through rlcore.files.readback), checked to be this format by its metadata; SamplesError
    naming the file (`name`, else the path) otherwise. Nothing but the footer is read."""
    import pyarrow.parquet as pq

    name = name or str(source)
    try:
        parquet = pq.ParquetFile(source)
        meta = parquet.schema_arrow.metadata or {}
    except Exception as err:  # pyarrow raises many kinds for a torn or foreign file
        raise SamplesError(
            f"{name} is not a readable rollout archive step "
            f"({err.__class__.__name__}: {readback.shown(str(err), 200)})"
        ) from None
    found = meta.get(META_FORMAT)
    if found is None:
        raise SamplesError(
            f"{name} names no rollout archive format in its metadata: it is not "
            "a step file rl wrote (a damaged run folder?)"
        )
    if found != SAMPLES_FORMAT.encode():
        raise SamplesError(
            f"{name} is rollout archive format {readback.shown(found, 40)}, this "
            f"rl reads format {SAMPLES_FORMAT}: read it with the version of rl "
            "that wrote it"
        )
    return parquet


def column_problems(parquet) -> dict[str, str]:
    """Each column of the format that the file lacks or holds with another kind of type, and
    why ("missing", or the type found); empty for a whole file."""
    found = {field.name: field.type for field in parquet.schema_arrow}
    problems = {}
    for name, kind in SCHEMA_FIELDS:
        if name not in found:
            problems[name] = "missing"
        elif not _fits(found[name], kind):
            problems[name] = f"{readback.shown(str(found[name]), 60)}, not {kind}"
    return problems


def problems_text(problems: dict[str, str]) -> str:
    """`token_mask (missing), reward (string, not float64)`."""
    return ", ".join(f"{name} ({why})" for name, why in problems.items())


def _fits(found, kind: str) -> bool:
    """Whether a column of Arrow type `found` reads as the format's `kind` (`conform`): any
    integer for an integer, a float for a float, string or binary for text, a list of such."""
    import pyarrow as pa

    if kind.startswith("list<"):
        lists = pa.types.is_list(found) or pa.types.is_large_list(found)
        return lists and _fits(found.value_type, kind[5:-1])
    checks = {
        "int64": pa.types.is_integer,
        "int32": pa.types.is_integer,
        "float64": pa.types.is_floating,
        "float32": pa.types.is_floating,
        "bool": pa.types.is_boolean,
        "string": _is_text,
    }
    return checks[kind](found)


def _is_text(found) -> bool:
    import pyarrow as pa

    types = pa.types
    return (
        types.is_string(found)
        or types.is_binary(found)
        or types.is_large_string(found)
        or (types.is_large_binary(found))
    )


def read_step(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One step's rows as an Arrow table, only `columns` (None: all) read from disk; a file
    without one of them, or with another kind of type, is refused naming it. For files a
    process trusts (its own run's, a test's); `rl view` reads with `read_scalars`/`read_rows`."""
    import pyarrow as pa

    parquet = open_step(path)
    unknown = sorted(set(columns or ()) - set(COLUMNS))
    if unknown:
        raise SamplesError(
            f"rollout archive format {SAMPLES_FORMAT} has no column(s) {', '.join(unknown)}"
        )
    problems = column_problems(parquet)
    wanted = {k: v for k, v in problems.items() if columns is None or k in columns}
    if wanted:
        raise SamplesError(f"{path} is not a whole rollout archive step: {problems_text(wanted)}")
    try:
        return parquet.read(columns=columns)
    except (OSError, pa.ArrowException) as err:
        raise SamplesError(f"{path} is not a readable rollout archive step: {err}") from None


def read_group(path: Path, group: int, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows of one group of a step, by `member`, as dicts."""
    import pyarrow.compute as pc

    wanted = None if columns is None else list(dict.fromkeys(["group", "member", *columns]))
    table = read_step(path, wanted)
    rows = table.filter(pc.equal(table["group"], group)).to_pylist()
    return sorted(rows, key=lambda row: row["member"])


MAX_ROWS = 100_000
"""Rollouts per step a bounded read accepts (a step of a real run holds hundreds to thousands)."""
MAX_SCALAR_BYTES = 64 * MIB
"""The scalar columns' size, uncompressed, that `read_scalars` reads for a step."""
MAX_DECODE_BYTES = 288 * MIB
"""What a process decodes from archive files at once, across all its threads (`BUDGET`): a row
group's columns over it are not read (pyarrow decodes a data page whole, and one page may hold
a whole row group's values)."""
BATCH_ROWS = 1
"""Rows decoded at once for texts and tokens (one value may be gigabytes)."""


class DecodeBudget:
    """Bytes being decoded from archives at once, across threads: each read waits for its share
    (a row group's columns, uncompressed, as the file's metadata says)."""

    def __init__(self, total: int):
        self.total, self.used = total, 0
        self.changed = threading.Condition()

    @contextmanager
    def share(self, amount: int) -> Iterator[None]:
        amount = min(amount, self.total)
        with self.changed:
            self.changed.wait_for(lambda: self.used + amount <= self.total)
            self.used += amount
        try:
            yield
        finally:
            with self.changed:
                self.used -= amount
                self.changed.notify_all()


BUDGET = DecodeBudget(MAX_DECODE_BYTES)


def uncompressed_bytes(parquet, columns: list[str], groups: list[int] | None = None) -> int:
    """What `columns` hold uncompressed (the file's own metadata), in row groups `groups`."""
    meta, wanted, total = parquet.metadata, set(columns), 0
    for group in range(meta.num_row_groups) if groups is None else groups:
        chunks = meta.row_group(group)
        for index in range(chunks.num_columns):
            chunk = chunks.column(index)
            if chunk.path_in_schema.split(".")[0] in wanted:
                total += max(0, chunk.total_uncompressed_size)
    return total


def readable(parquet, columns: tuple[str, ...] | list[str]) -> list[str]:
    """Those of `columns` the file holds with a type that fits the format (`column_problems`)."""
    problems = column_problems(parquet)
    return [name for name in columns if name in COLUMNS and name not in problems]


def read_scalars(parquet, columns: tuple[str, ...], name: str = "the step") -> dict[str, Any]:
    """`columns` (scalar or short text columns) of every row, each conformed (`conform`), None
    for one the file lacks; SamplesError for more than MAX_ROWS rows or MAX_SCALAR_BYTES."""
    num_rows = parquet.metadata.num_rows
    if num_rows > MAX_ROWS:
        raise SamplesError(f"{name}: {num_rows:,} rollouts, more than the {MAX_ROWS:,} rl reads")
    present = readable(parquet, columns)
    size = uncompressed_bytes(parquet, present)
    if size > MAX_SCALAR_BYTES:
        raise SamplesError(
            f"{name}: its row columns hold {size / MIB:.0f} MiB uncompressed, "
            f"over the {MAX_SCALAR_BYTES // MIB} MiB rl reads"
        )
    if not present:
        return dict.fromkeys(columns)
    with BUDGET.share(size):
        table = parquet.read(columns=present, use_threads=False)
    return {c: conform(table.column(c), c) if c in present else None for c in columns}


def read_rows(
    parquet, rows: set[int], columns: tuple[str, ...], cut: Callable[[str, Any], list]
) -> dict[int, dict]:
    """`columns` of the rows numbered in `rows`, read BATCH_ROWS rows at a time from the row
    groups that hold them, each row group within MAX_DECODE_BYTES and the shared BUDGET;
    `cut(name, column)` turns each conformed column (None where the file lacks it) into small
    Python values, in Arrow, before anything is copied."""
    present = readable(parquet, columns)
    found: dict[int, dict] = {row: dict.fromkeys(columns) for row in rows}
    if not present or not rows:
        return found
    meta, start = parquet.metadata, 0
    for group in range(meta.num_row_groups):
        size = meta.row_group(group).num_rows
        if any(start <= row < start + size for row in rows):
            _read_row_group(parquet, group, start, rows, present, cut, found)
        start += size
        if start > max(rows):
            break
    return found


def _read_row_group(parquet, group: int, start: int, rows, present, cut, found) -> None:
    cost = uncompressed_bytes(parquet, present, [group])
    if cost > MAX_DECODE_BYTES:
        raise SamplesError(
            f"row group {group} holds {cost / MIB:,.0f} MiB of "
            f"{', '.join(present)} uncompressed, over the "
            f"{MAX_DECODE_BYTES // MIB} MiB rl decodes at once"
        )
    with BUDGET.share(cost):
        batches = parquet.iter_batches(
            batch_size=BATCH_ROWS, row_groups=[group], columns=present, use_threads=False
        )
        for batch in batches:
            wanted = [i for i in range(batch.num_rows) if start + i in rows]
            if wanted:
                values = {c: cut(c, conform(batch.column(c), c)) for c in present}
                for i in wanted:
                    found[start + i].update({c: values[c][i] for c in present})
            start += batch.num_rows
            if start > max(rows):
                return


def wide_type(name: str):
    """The Arrow type a column is read as: integers as int64, floats as float64, texts as
    binary (`conform` makes a view), lists as large lists of those."""
    import pyarrow as pa

    kinds = {
        "int64": pa.int64(),
        "int32": pa.int64(),
        "float64": pa.float64(),
        "float32": pa.float64(),
        "bool": pa.bool_(),
        "string": pa.large_binary(),
    }
    kind = dict(SCHEMA_FIELDS)[name]
    if kind.startswith("list<"):
        return pa.large_list(kinds[kind[5:-1]])
    return kinds[kind]


def conform(column, name: str):
    """`column` as its `wide_type`, texts as bytes (a Parquet string may hold any bytes; a view,
    never a copy: one value may be gigabytes); None when it is of another kind or its values do
    not fit (a foreign file: the column reads as missing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):  # a whole table's column (bounded: read_scalars)
        column = column.combine_chunks()
    kind = column.type
    if name in TEXT_COLUMNS:
        if pa.types.is_string(kind) or pa.types.is_binary(kind):
            return column.view(pa.binary())
        if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
            return column.view(pa.large_binary())
        return None
    if not _fits(kind, dict(SCHEMA_FIELDS)[name]):
        return None
    try:
        return pc.cast(column, wide_type(name))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def remove_step(folder: Path, step: int) -> None:
    """Delete one step's file (a link is unlinked, never followed)."""
    step_file(folder, step).unlink(missing_ok=True)
