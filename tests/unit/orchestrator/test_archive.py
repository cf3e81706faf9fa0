"""The orchestrator's rollout archive (orchestrator/archive.py): rows from real rollouts with
the tiny model's tokenizer, the bound (oldest steps dropped, only the archive's own files), an
attempt's regenerated steps, and its config."""

import asyncio
import json
import logging
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.archive import (
    Archive,
    TokenTexts,
    completion_tokens,
    load_token_texts,
    oldest_to_drop,
    rollout_row,
)
from orchestrator.config import OrchestratorConfig, SamplesConfig
from orchestrator.dynamic import sample_batch
from orchestrator.envs import Rollout, Turn
from orchestrator.loop import build_batch
from rlcore.contracts import samples_store


@pytest.fixture(scope="module")
def token_texts(tiny_model_dir) -> TokenTexts:
    texts = load_token_texts(str(tiny_model_dir))  # the model folder's tokenizer.json
    assert texts is not None
    return texts


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.dictionaries(st.integers(0, 50), st.integers(0, 1000), max_size=12),
    bound=st.integers(0, 5000),
)
def test_the_oldest_steps_go_and_no_more_than_needed(sizes, bound):
    drop = oldest_to_drop(sizes, bound)
    assert drop == sorted(sizes)[: len(drop)]  # the oldest, in order
    kept = sum(size for step, size in sizes.items() if step not in drop)
    assert kept <= bound
    if drop:  # one step fewer dropped would not fit
        assert kept + sizes[drop[-1]] > bound


@settings(max_examples=40, deadline=None)
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30))
def test_token_texts_join_to_the_decoded_text(token_texts, text):
    """Emoji and CJK characters span several byte-level tokens: the texts still add up (a
    mutant without the merge of U+FFFD pieces fails on them)."""
    ids = token_texts.tokenizer.encode(text, add_special_tokens=False).ids
    texts = token_texts.texts(ids)
    assert len(texts) == len(ids)
    assert "".join(texts) == token_texts.decode(ids)


def test_a_multi_turn_rollout_with_tool_calls_becomes_one_row(token_texts):
    tokenizer = token_texts.tokenizer
    first, call, result, answer = (
        tokenizer.encode(text).ids
        for text in ("user: 3+4?", "<tool>add(3, 4)</tool>", "tool: 7", "7<|im_end|>")
    )
    turns = [
        Turn(first, call, [-0.5] * len(call)),
        Turn(first + call + result, answer, [-0.25] * len(answer), is_truncated=True),
    ]
    completion = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "[3, 4]"}}
            ],
        },
        {"role": "tool", "content": "7", "tool_call_id": "c1"},
        {"role": "assistant", "content": "7"},
    ]
    rollout = Rollout(
        5,
        [{"role": "user", "content": "3+4?"}],
        completion,
        1.0,
        {"correct": 1.0},
        turns,
        advantage=0.75,
    )
    row = rollout_row(rollout, "rl-tasks", 2, 3, token_texts)
    ids, logprobs, mask = completion_tokens(rollout)
    assert ids == call + result + answer  # the tool's result between the two model turns
    assert mask == [True] * len(call) + [False] * len(result) + [True] * len(answer)
    assert logprobs == [-0.5] * len(call) + [0.0] * len(result) + [-0.25] * len(answer)
    assert set(row) == set(samples_store.COLUMNS) - set(samples_store.FILLED)  # the format's
    assert row["token_mask"] == mask and row["token_logprob"] == logprobs
    assert "".join(row["token_text"]) == "<tool>add(3, 4)</tool>tool: 77<|im_end|>"
    assert json.loads(row["completion"]) == completion
    assert row["num_prompt_tokens"] == len(first) and row["num_completion_tokens"] == len(ids)
    assert row["is_truncated"] and row["kept"] and row["advantage"] == 0.75
    assert json.loads(row["reward_parts"]) == {"correct": 1.0}
    failed = rollout_row(Rollout(1, None, None, 0.0, error="boom"), "e", 0, 0, token_texts)
    assert failed["error"] == "boom" and not failed["kept"] and failed["token_text"] == []


def step_groups(step: int) -> list[list[Rollout]]:
    turn = Turn([1, 2, 3], list(range(100 + step)), [-0.1] * (100 + step))
    return [[Rollout(step, "p", "c" * 200, 1.0, turns=[turn]) for _ in range(4)]]


def test_over_its_bound_the_archive_drops_the_oldest_steps_and_only_its_own(tmp_path, caplog):
    probe = Archive(SamplesConfig(), tmp_path / "probe", "no-such-model")
    probe.tokenizer_tried = True
    probe.submit(4, 4, ["env"], step_groups(4))  # the largest step's file: a few kB
    probe.close()
    bound_gib = 2.5 * probe.sizes[4] / 2**30  # room for two steps' files, not three
    folder = tmp_path / "samples"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")  # not the archive's: never touched
    (folder / "step_x.parquet").write_text("mine too")
    with caplog.at_level(logging.INFO, "orchestrator"):
        archive = Archive(SamplesConfig(max_gib=bound_gib), folder, "no-such-model")
        archive.tokenizer_tried = True  # no tokenizer: token_text null
        for step in range(5):
            archive.submit(step, step, ["env"], step_groups(step))
        archive.close()
    assert samples_store.list_steps(folder) == [3, 4]  # the newest kept, the oldest gone
    assert sum(samples_store.step_sizes(folder).values()) <= bound_gib * 2**30
    assert (folder / "notes.txt").read_text() == "mine"
    assert (folder / "step_x.parquet").read_text() == "mine too"
    warnings = [r.message for r in caplog.records if "over its bound" in r.message]
    assert len(warnings) == 1 and "first: step 0" in warnings[0]  # said once
    assert "(samples.max_gib)" in caplog.text


def test_an_attempt_drops_the_steps_it_regenerates_and_counts_the_rest(tmp_path):
    folder = tmp_path / "samples"
    archive = Archive(SamplesConfig(), folder, "no-such-model")
    archive.tokenizer_tried = True
    for step in range(4):
        archive.submit(step, 0, ["env"], step_groups(step))
    archive.close()
    resumed = Archive(SamplesConfig(), folder, "no-such-model")
    resumed.drop_from(2)
    assert samples_store.list_steps(folder) == [0, 1]
    assert set(resumed.sizes) == {0, 1}
    rows = samples_store.read_step(samples_store.step_file(folder, 1)).to_pylist()
    assert len(rows) == 4 and rows[0]["token_text"] is None and len(rows[0]["token_mask"]) == 101


def test_an_archive_that_is_off_writes_nothing(tmp_path):
    archive = Archive(SamplesConfig(keep=False), tmp_path / "samples", "m")
    archive.submit(0, 0, ["env"], step_groups(0))
    archive.close()
    assert not (tmp_path / "samples").exists()


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ({"keep": False, "max_gib": 1}, "samples.max_gib = 1.0 with samples.keep = false"),
        ({"max_gib": 0}, "greater than 0"),
        ({"max_gib": -1}, "greater than 0"),
    ],
)
def test_a_bad_bound_is_refused_naming_the_key(samples, message):
    with pytest.raises(ValueError, match=message) as err:
        OrchestratorConfig(samples=samples)
    assert "samples" in str(err.value)


def test_every_rollout_is_archived_kept_errored_and_dropped_alike(tmp_path):
    """A step with dynamic sampling: a uniform group left out, a group with a failed rollout,
    then an informative group from the second round; the archive holds all twelve rollouts."""
    turn = Turn([1, 2], [3, 4], [-0.1, -0.2])

    def group(*rewards, error=None):
        return [
            Rollout(0, "p", "c", r, turns=[turn], error=error if i == 0 else None)
            for i, r in enumerate(rewards)
        ]

    rounds = [[group(1, 1, 1, 1), group(0, 1, 1, 0, error="tool server died")], [group(0, 1, 0, 0)]]

    async def sample(num_groups):
        groups = rounds.pop(0)[:num_groups]
        return [(0, i) for i in range(len(groups))], groups

    config = OrchestratorConfig(
        batch_size=8, rollouts_per_example=4, dynamic_sampling={"enabled": True}
    )
    sampled = asyncio.run(sample_batch(2, sample, config.dynamic_sampling))
    build_batch(config, 0, sampled.kept)
    archive = Archive(SamplesConfig(), tmp_path, "no-such-model")
    archive.tokenizer_tried = True
    archive.submit(0, 0, ["rl-add-digits"] * len(sampled.groups), sampled.groups)
    archive.close()
    rows = samples_store.read_step(samples_store.step_file(tmp_path, 0)).to_pylist()
    assert [(r["group"], r["member"]) for r in rows] == [(g, m) for g in range(3) for m in range(4)]
    assert [r["kept"] for r in rows] == [False] * 5 + [True] * 7  # uniform, then the error
    assert rows[4]["error"] == "tool server died" and rows[4]["advantage"] is None
    assert [r["advantage"] for r in rows[:4]] == [None] * 4
    assert all(r["advantage"] is not None for r in rows[5:])


def test_a_step_that_cannot_be_written_costs_its_file_only_but_a_full_disk_stops(
    tmp_path, caplog, monkeypatch
):
    archive = Archive(SamplesConfig(), tmp_path, "no-such-model")
    archive.tokenizer_tried = True
    odd = step_groups(1)
    odd[0][0].metrics = {"x": object()}  # not JSON: this step's rows cannot be built
    with caplog.at_level(logging.WARNING, "orchestrator"):
        for step, groups in enumerate([step_groups(0), odd, step_groups(2)]):
            archive.submit(step, 0, ["env"], groups)
        archive.flush()
    assert samples_store.list_steps(tmp_path) == [0, 2]
    assert "rollout archive: step 1 not written" in caplog.text

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(samples_store, "write_step", full)
    archive.submit(3, 0, ["env"], step_groups(3))
    with pytest.raises(OSError, match="No space left"):
        archive.close()


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
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
token_ids = st.lists(st.integers(0, 49151), max_size=6)


@st.composite
def rollouts(draw) -> Rollout:
    """A rollout of 0-3 turns, each extending the last or not (a re-tokenized context), with
    empty, long or unicode completions, tool calls, maybe an error."""
    turns, context = [], draw(token_ids)
    for _ in range(draw(st.integers(0, 3))):
        prompt = context + draw(token_ids) if draw(st.booleans()) else draw(token_ids)
        length = draw(st.sampled_from([0, 1, 5, 2048]))
        ids = (draw(token_ids) or [7]) * length
        turns.append(Turn(prompt, ids[:length], [-0.5] * length, draw(st.booleans())))
        context = prompt + ids[:length]
    completion = draw(st.one_of(text, st.lists(message, max_size=3)))
    return Rollout(
        draw(st.integers(0, 10**6)),
        draw(st.lists(message, max_size=2)),
        completion,
        draw(st.floats(-1, 1)),
        draw(st.dictionaries(text, st.floats(0, 1), max_size=2)),
        turns,
        error=draw(st.one_of(st.none(), text)),
    )


@settings(max_examples=30, deadline=None)
@given(group=st.lists(rollouts(), min_size=1, max_size=3))
def test_generated_rollouts_read_back_from_the_archive(token_texts, group):
    with tempfile.TemporaryDirectory() as tmp:
        archive = Archive(SamplesConfig(), Path(tmp), "unused")
        archive.tokenizer_tried, archive.texts = True, token_texts
        archive.submit(0, 0, ["env"], [group])
        archive.close()
        rows = samples_store.read_step(samples_store.step_file(Path(tmp), 0)).to_pylist()
    assert len(rows) == len(group)
    for rollout, row in zip(group, rows, strict=True):
        assert {k: v for k, v in row.items() if k not in ("step", "policy_step")} == rollout_row(
            rollout, "env", 0, row["member"], token_texts
        )
        assert json.loads(row["completion"]) == rollout.completion
        assert len(row["token_text"]) == len(row["token_mask"]) == row["num_completion_tokens"]
        assert sum(row["token_mask"]) == sum(len(t.completion_ids) for t in rollout.turns)
