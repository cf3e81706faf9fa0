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

pyarrow is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlcore.files import fsync_path

if TYPE_CHECKING:
    import pyarrow as pa

SAMPLES_DIR = "samples"
SAMPLES_FORMAT = "1"
META_FORMAT, META_STEP, META_POLICY_STEP = b"rl.samples_format", b"rl.step", b"rl.policy_step"
SCHEMA_FIELDS = (
    ("step", "int64"), ("policy_step", "int64"), ("env", "string"), ("group", "int32"),
    ("member", "int32"), ("example_id", "int64"), ("prompt", "string"), ("completion", "string"),
    ("reward", "float64"), ("reward_parts", "string"), ("advantage", "float64"), ("kept", "bool"),
    ("num_prompt_tokens", "int32"), ("num_completion_tokens", "int32"), ("is_truncated", "bool"),
    ("error", "string"), ("token_text", "list<string>"), ("token_logprob", "list<float32>"),
    ("token_mask", "list<bool>"),
)  # fmt: skip
"""Every column, in order, with its Arrow type."""
_STEP_FILE = re.compile(r"^step_(\d+)\.parquet$")


class SamplesError(ValueError):
    """A file that is not a readable step of this format; the message names it."""


def schema() -> pa.Schema:
    import pyarrow as pa

    types = {
        "int64": pa.int64(), "int32": pa.int32(), "string": pa.string(), "float64": pa.float64(),
        "bool": pa.bool_(), "list<string>": pa.list_(pa.string()),
        "list<float32>": pa.list_(pa.float32()), "list<bool>": pa.list_(pa.bool_()),
    }  # fmt: skip
    return pa.schema([pa.field(name, types[kind]) for name, kind in SCHEMA_FIELDS])


def step_file(folder: Path, step: int) -> Path:
    """`<folder>/step_<step>.parquet` (folder: the run's `samples/`)."""
    return folder / f"step_{step}.parquet"


def list_steps(folder: Path) -> list[int]:
    """The steps with a complete file in `folder`, ascending (temporaries are never listed)."""
    if not folder.is_dir():
        return []
    found = (_STEP_FILE.match(p.name) for p in folder.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def step_sizes(folder: Path) -> dict[int, int]:
    """Bytes of each step's file (links are not counted: the archive never makes one)."""
    sizes = {}
    for step in list_steps(folder):
        path = step_file(folder, step)
        if path.is_file() and not path.is_symlink():
            sizes[step] = path.stat().st_size
    return sizes


def write_step(folder: Path, step: int, policy_step: int, rows: list[dict[str, Any]]) -> int:
    """Write one step's rows (dicts keyed by `SCHEMA_FIELDS`' names; `step` and `policy_step`
    are filled in) as `step_<step>.parquet`, replacing an earlier file of that step atomically;
    returns the file's bytes. On an error no temporary is left and the earlier file stays."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [name for name, _ in SCHEMA_FIELDS]
    columns = {name: [row.get(name) for row in rows] for name in names}
    columns["step"], columns["policy_step"] = [step] * len(rows), [policy_step] * len(rows)
    meta = {META_FORMAT: SAMPLES_FORMAT.encode(), META_STEP: str(step).encode(),
            META_POLICY_STEP: str(policy_step).encode()}  # fmt: skip
    table = pa.table(columns, schema=schema().with_metadata(meta))
    folder.mkdir(parents=True, exist_ok=True)
    final = step_file(folder, step)
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    try:
        with tmp.open("wb") as handle:
            pq.write_table(table, handle, compression="zstd")
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(folder)
    return final.stat().st_size


def open_step(path: Path):
    """The Parquet file of one step, checked to be this format (SamplesError otherwise)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as err:
        raise SamplesError(f"{path} is not a readable rollout archive step: {err}") from None
    meta = parquet.schema_arrow.metadata or {}
    found = meta.get(META_FORMAT, b"none").decode(errors="replace")
    if found != SAMPLES_FORMAT:
        raise SamplesError(
            f"{path} is rollout archive format {found}, this version reads format "
            f"{SAMPLES_FORMAT}: read it with the version of rl that wrote it"
        )
    return parquet


def read_step(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One step's rows as an Arrow table, only `columns` (None: all) read from disk."""
    import pyarrow as pa

    parquet = open_step(path)
    unknown = sorted(set(columns or ()) - set(parquet.schema_arrow.names))
    if unknown:
        raise SamplesError(f"{path} has no column(s) {', '.join(unknown)}")
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


def remove_step(folder: Path, step: int) -> None:
    """Delete one step's file (a link is unlinked, never followed)."""
    step_file(folder, step).unlink(missing_ok=True)
