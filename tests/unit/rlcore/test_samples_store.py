"""The rollout archive's file format (rlcore.contracts.samples_store): what is written reads back
the same, a reader never sees a torn or foreign file as a step, and projection reads only what it
is asked for."""

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlcore.contracts import samples_store
from rlcore.contracts.samples_store import SCHEMA_FIELDS, SamplesError
from tests.view_runs import renamed

PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
text = st.text(st.characters(codec="utf-8"), max_size=40)  # any unicode, empty included
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["assistant", "tool", "user"]), "content": text},
    optional={
        "tool_calls": st.lists(
            st.fixed_dictionaries(
                {
                    "id": text,
                    "type": st.just("function"),
                    "function": st.fixed_dictionaries({"name": text, "arguments": text}),
                }
            ),
            max_size=2,
        )
    },
)


@st.composite
def rollout_rows(draw, group: int = 0, member: int = 0) -> dict:
    """One archive row as the orchestrator builds it: a chat or text completion (tool calls
    and tool results included), empty or long token lists, errors, no advantage."""
    num_tokens = draw(st.sampled_from([0, 1, 3, 4096]))  # none, a few, a long answer
    completion = draw(st.one_of(text, st.lists(message, max_size=4)))
    error = draw(st.one_of(st.none(), text))
    return {
        "env": draw(text),
        "group": group,
        "member": member,
        "example_id": draw(st.integers(-(2**63), 2**63 - 1)),
        "prompt": json.dumps(draw(st.one_of(text, st.lists(message, max_size=2)))),
        "completion": json.dumps(completion),
        "reward": draw(st.floats(allow_nan=False)),
        "reward_parts": json.dumps(draw(st.dictionaries(text, st.floats(-1, 1), max_size=3))),
        "advantage": None if error else draw(st.one_of(st.none(), st.floats(-5, 5))),
        "kept": error is None,
        "num_prompt_tokens": draw(st.integers(0, 2**31 - 1)),
        "num_completion_tokens": num_tokens,
        "is_truncated": draw(st.booleans()),
        "error": error,
        "token_text": draw(
            st.one_of(
                st.none(),
                st.lists(text, min_size=1, max_size=4).map(
                    lambda texts: (texts * num_tokens)[:num_tokens]
                ),
            )
        ),
        "token_logprob": [draw(st.floats(-50, 0, width=32))] * num_tokens,
        "token_mask": [draw(st.booleans())] * num_tokens,
    }


def sample_row() -> dict:
    """One plain row: a kept rollout of three tokens."""
    return {
        "env": "rl-add-digits",
        "group": 0,
        "member": 0,
        "example_id": 7,
        "prompt": json.dumps([{"role": "user", "content": "What is 3 + 4?"}]),
        "completion": json.dumps([{"role": "assistant", "content": "7"}]),
        "reward": 1.0,
        "reward_parts": "{}",
        "advantage": 0.5,
        "kept": True,
        "num_prompt_tokens": 12,
        "num_completion_tokens": 3,
        "is_truncated": False,
        "error": None,
        "token_text": ["7", "<|im_end|>", ""],
        "token_logprob": [-0.5, -0.25, 0.0],
        "token_mask": [True, True, False],
    }


@st.composite
def step_rows(draw) -> list[dict]:
    num_groups, size = draw(st.integers(0, 3)), draw(st.integers(1, 4))
    return [draw(rollout_rows(g, m)) for g in range(num_groups) for m in range(size)]


@PROPERTY
@given(rows=step_rows(), step=st.integers(0, 10**7), policy_step=st.integers(0, 10**7))
def test_a_step_reads_back_as_written(rows, step, policy_step):
    with tempfile.TemporaryDirectory() as tmp:
        check_round_trip(Path(tmp) / "samples", rows, step, policy_step)


def check_round_trip(folder: Path, rows: list[dict], step: int, policy_step: int) -> None:
    samples_store.write_step(folder, step, policy_step, rows)
    path = samples_store.step_file(folder, step)
    table = samples_store.read_step(path)
    assert table.schema.names == [name for name, _ in SCHEMA_FIELDS]
    assert table.to_pylist() == [{**row, "step": step, "policy_step": policy_step} for row in rows]
    meta = table.schema.metadata
    assert meta[b"rl.samples_format"] == b"1" and meta[b"rl.step"] == str(step).encode()
    assert meta[b"rl.policy_step"] == str(policy_step).encode()
    for group in {row["group"] for row in rows}:
        members = samples_store.read_group(path, group, ["reward"])
        assert [m["member"] for m in members] == sorted(
            r["member"] for r in rows if r["group"] == group
        )
        assert set(members[0]) == {"group", "member", "reward"}  # only what was asked for
    assert samples_store.list_steps(folder) == [step]


def test_projection_reads_only_the_named_columns(tmp_path):
    row = sample_row()
    samples_store.write_step(tmp_path, 3, 2, [row])
    table = samples_store.read_step(samples_store.step_file(tmp_path, 3), ["reward", "kept"])
    assert table.schema.names == ["reward", "kept"]
    with pytest.raises(SamplesError, match="no column.*rewards"):
        samples_store.read_step(samples_store.step_file(tmp_path, 3), ["rewards"])


def test_a_torn_temporary_is_never_a_step_and_a_failed_write_keeps_the_old_file(
    tmp_path, monkeypatch
):
    import pyarrow.parquet as pq

    row = sample_row()
    samples_store.write_step(tmp_path, 1, 0, [row])
    before = samples_store.step_file(tmp_path, 1).read_bytes()
    (tmp_path / ".step_2.parquet.tmp999").write_bytes(before[:100])  # a killed writer's
    assert samples_store.list_steps(tmp_path) == [1]

    def torn(table, handle, **kwargs):  # writes half of the file, then the disk fills up
        handle.write(before[: len(before) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", torn)
    with pytest.raises(OSError):
        samples_store.write_step(tmp_path, 1, 5, [row, row])
    assert samples_store.step_file(tmp_path, 1).read_bytes() == before  # the old step, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".step_2.parquet.tmp999",
        "step_1.parquet",
    ]


def test_a_torn_or_foreign_file_is_named_never_a_traceback(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    samples_store.write_step(tmp_path, 0, 0, [sample_row()])
    whole = samples_store.step_file(tmp_path, 0).read_bytes()
    torn = samples_store.step_file(tmp_path, 1)
    torn.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(SamplesError, match=r"step_1.parquet is not a readable"):
        samples_store.read_step(torn)
    foreign = samples_store.step_file(tmp_path, 2)
    pq.write_table(pa.table({"x": [1]}), foreign)
    with pytest.raises(SamplesError, match=r"step_2.parquet names no rollout archive format"):
        samples_store.read_step(foreign)


def rewrite(path: Path, edit) -> None:
    """The file at `path` (written by the writer) rewritten as `edit(table)` makes it."""
    import pyarrow.parquet as pq

    table = edit(pq.read_table(path))
    with path.open("wb") as f:
        pq.write_table(table, f)


def test_a_file_of_another_format_is_refused_saying_which(tmp_path):
    samples_store.write_step(tmp_path, 0, 0, [sample_row()])
    path = samples_store.step_file(tmp_path, 0)
    rewrite(path, lambda t: t.replace_schema_metadata({b"rl.samples_format": b"2"}))
    with pytest.raises(SamplesError, match="archive format 2, this rl reads format 1"):
        samples_store.read_step(path)


def test_the_writer_refuses_a_row_with_a_renamed_or_missing_column(tmp_path):
    row = sample_row()
    row["token_policy"] = row.pop("token_mask")
    with pytest.raises(ValueError, match=r"unknown \['token_policy'\], missing \['token_mask'\]"):
        samples_store.write_step(tmp_path, 0, 0, [row])
    assert samples_store.list_steps(tmp_path) == []


@pytest.mark.parametrize("column", samples_store.COLUMNS)
def test_a_renamed_column_is_named_by_the_reader(tmp_path, column):
    """A file whose writer renamed one column: read whole it is refused naming the column;
    the bounded reader reads the rest and reads that one as missing."""
    samples_store.write_step(tmp_path, 0, 0, [sample_row()])
    path = samples_store.step_file(tmp_path, 0)
    rewrite(path, renamed(column))
    with pytest.raises(SamplesError, match=rf"archive step: {column} \(missing\)$"):
        samples_store.read_step(path)
    parquet = samples_store.open_step(path)
    assert samples_store.column_problems(parquet) == {column: "missing"}
    others = tuple(c for c in samples_store.SCALAR_COLUMNS if c != column)
    scalars = samples_store.read_scalars(parquet, (column, *others))
    assert scalars[column] is None and all(scalars[c] is not None for c in others)


def test_a_column_of_a_foreign_type_is_named_and_read_as_missing(tmp_path):
    import pyarrow as pa

    samples_store.write_step(tmp_path, 0, 0, [sample_row()])
    path = samples_store.step_file(tmp_path, 0)
    index = samples_store.COLUMNS.index("token_mask")
    forged = pa.array([["yes", "no", "no"]])
    rewrite(path, lambda t: t.set_column(index, "token_mask", forged))
    with pytest.raises(SamplesError, match=r"token_mask \(list<\w+: string>, not list<bool>\)"):
        samples_store.read_step(path)
    parquet = samples_store.open_step(path)
    found = samples_store.read_rows(
        parquet, {0}, ("token_mask", "token_logprob"), lambda name, column: column.to_pylist()
    )
    assert found == {0: {"token_mask": None, "token_logprob": [-0.5, -0.25, 0.0]}}


def test_the_bounded_reader_refuses_too_many_rows_and_reads_texts_as_bytes(tmp_path, monkeypatch):
    samples_store.write_step(tmp_path, 0, 0, [sample_row(), {**sample_row(), "member": 1}])
    parquet = samples_store.open_step(samples_store.step_file(tmp_path, 0))
    texts = samples_store.read_rows(parquet, {1}, ("completion",), lambda n, c: c.to_pylist())
    assert texts == {1: {"completion": b'[{"role": "assistant", "content": "7"}]'}}
    monkeypatch.setattr(samples_store, "MAX_ROWS", 1)
    with pytest.raises(SamplesError, match="2 rollouts, more than the 1"):
        samples_store.read_scalars(parquet, ("reward",))
