"""The batch format (rlcore.contracts.protocol: written by the orchestrator, loaded into tensors by
the trainer), batch waiting, packing into micro-batches, and the learning-rate schedule."""

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from orchestrator.rollouts import assign_groups
from rlcore.contracts.protocol import (
    BATCH_META,
    BATCH_TENSORS_FILE,
    Batch,
    BatchError,
    BatchTensors,
    Sample,
    load_batch,
    read_batch,
    write_batch,
)
from trainer.config import OptimConfig
from trainer.data import (
    MicroBatch,
    Sizes,
    make_micro_batch,
    pack_samples,
    piece_index,
    split_for_ranks,
    token_columns,
    wait_for_batch,
)
from trainer.optim import lr_factor


def random_batch(step: int, num_samples: int = 6, vocab_size: int = 100, seed: int = 0) -> Batch:
    rng = random.Random(seed * 1000 + step)
    samples = []
    for _ in range(num_samples):
        num_prompt, num_completion = rng.randint(1, 8), rng.randint(1, 12)
        samples.append(
            Sample(
                prompt_ids=[rng.randrange(vocab_size) for _ in range(num_prompt)],
                completion_ids=[rng.randrange(vocab_size) for _ in range(num_completion)],
                completion_mask=[int(rng.random() < 0.8) for _ in range(num_completion)],
                completion_logprobs=[-rng.random() * 3 for _ in range(num_completion)],
                advantage=rng.uniform(-1, 1),
            )
        )
    return Batch(step=step, temperature=0.9, samples=samples)


def grouped_batch(seed: int = 0, prompts=(6, 3, 9), group: int = 4) -> Batch:
    """`group` samples per prompt, grouped as the orchestrator groups them; a few with loss
    weight 0."""
    rng = random.Random(seed)
    samples = []
    for num_prompt in prompts:
        prompt = [rng.randrange(100) for _ in range(num_prompt)]
        members = []
        for _ in range(group):
            n = rng.randint(1, 10)
            members.append(
                Sample(
                    list(prompt),
                    [rng.randrange(100) for _ in range(n)],
                    [int(rng.random() < 0.8) for _ in range(n)],
                    [-rng.random()] * n,
                    advantage=rng.uniform(-1, 1),
                    loss_weight=rng.choice([1.0, 1.0, 0.0]),
                )
            )
        assign_groups(members, first_id=len({s.group_id for s in samples}))
        samples += members
    return Batch(step=1, temperature=0.7, samples=samples)


def packed_row(items: list) -> MicroBatch:
    """One packed row of `items`, each a Sample or a list of samples with one prompt (packed
    with one copy of it), built through the batch format."""
    units, samples = [], []
    for g, item in enumerate(items):
        members = item if isinstance(item, list) else [item]
        units.append(list(range(len(samples), len(samples) + len(members))))
        samples += [replace(s, group_id=g) for s in members]
    batch = BatchTensors.from_batch(Batch(step=0, temperature=1.0, samples=samples))
    return make_micro_batch(token_columns(batch), Sizes.of(batch), units)


def loss_tokens(batch: Batch) -> int:
    """Loss tokens counted the plain way: policy tokens with a logit before them."""
    return sum(
        sum(m for k, m in enumerate(s.completion_mask) if len(s.prompt_ids) + k > 0)
        for s in batch.samples
        if s.loss_weight != 0
    )


# -- the format ------------------------------------------------------------------------------


def test_a_batch_round_trips_through_its_file(tmp_path: Path):
    batch = grouped_batch()
    batch.samples.append(Sample([1, 2], [3], [1], [-0.5], advantage=0.25, reward=1.0))
    batch.policy_step = 0
    write_batch(batch, tmp_path / "step_1", extra_files={"samples.jsonl": "{}\n"})
    meta = json.loads((tmp_path / "step_1" / BATCH_META).read_text())
    assert meta["format"] == 2 and meta["num_samples"] == 13 and meta["step"] == 1
    assert meta["policy_step"] == 0 and load_batch(tmp_path / "step_1").policy_step == 0
    assert meta["num_tokens"] == batch.num_tokens
    loaded = load_batch(tmp_path / "step_1")
    expected = BatchTensors.from_batch(batch)
    for name, tensor in expected.tensors().items():
        assert torch.equal(getattr(loaded, name), tensor), name
        assert getattr(loaded, name).dtype == tensor.dtype, name
    back = read_batch(tmp_path / "step_1")
    assert (back.step, back.temperature, back.policy_step) == (1, 0.7, 0)
    for a, b in zip(back.samples, batch.samples, strict=True):
        assert (a.prompt_ids, a.completion_ids, a.completion_mask) == (
            b.prompt_ids,
            b.completion_ids,
            b.completion_mask,
        )
        assert a.completion_logprobs == pytest.approx(b.completion_logprobs)
        assert (a.advantage, a.loss_weight) == pytest.approx((b.advantage, b.loss_weight))
    assert [s.group_id for s in back.samples] == [0] * 4 + [1] * 4 + [2] * 4 + [3]


def test_offsets_cut_the_token_arrays_into_samples():
    batch = Batch(
        0,
        1.0,
        [
            Sample([7, 8], [1, 2, 3], [1, 0, 1], [-0.1, -0.2, -0.3], 1.5),
            Sample([9], [4], [1], [-0.4], -1.0),
        ],
    )
    t = BatchTensors.from_batch(batch)
    assert t.sample_offsets.tolist() == [0, 5, 7]
    assert t.input_ids.tolist() == [7, 8, 1, 2, 3, 9, 4]
    assert t.policy_mask.tolist() == [False, False, True, False, True, False, True]
    assert t.prompt_lens.tolist() == [2, 1] and t.lengths.tolist() == [5, 2]


def test_group_ids_number_prompts_by_first_appearance():
    a, b = [1, 2, 3], [4, 5]
    members = [Sample(p, [9], [1], [0.0], 0.0) for p in (a, b, a, b, a)]
    assert assign_groups(members, first_id=3) == 5
    assert [s.group_id for s in members] == [3, 4, 3, 4, 3]
    alone = Sample(a, [9], [1], [0.0], 0.0)  # no id: a group of its own, even with prompt a
    t = BatchTensors.from_batch(Batch(0, 1.0, [alone, *members]))
    assert t.group_ids.tolist() == [0, 1, 2, 1, 2, 1]


def test_loss_token_counts_are_written_per_sample():
    batch = Batch(
        0,
        1.0,
        [
            Sample([5], [1, 2, 3], [1, 0, 1], [0.0] * 3, 1.0),
            Sample([5], [1, 2], [1, 1], [0.0] * 2, 1.0, loss_weight=0.0),  # out of the loss
            Sample([], [1, 2], [1, 1], [0.0] * 2, 1.0),  # no logit predicts its first token
        ],
    )
    t = BatchTensors.from_batch(batch)
    assert t.num_loss_tokens.tolist() == [2, 0, 1] and t.total_loss_tokens == 3
    grouped = grouped_batch(3)
    assert BatchTensors.from_batch(grouped).total_loss_tokens == loss_tokens(grouped)


def test_token_columns_align_targets_with_logits():
    s = Sample([7, 8], [1, 2, 3], [1, 0, 1], [-0.1, -0.2, -0.3], advantage=1.5)
    columns = token_columns(BatchTensors.from_batch(Batch(0, 1.0, [s, s])))
    assert columns["input_ids"].tolist() == [7, 8, 1, 2, 3] * 2
    assert columns["position_ids"].tolist() == [0, 1, 2, 3, 4] * 2
    assert columns["target_ids"].tolist() == [8, 1, 2, 3, 0] * 2  # nothing across samples
    # logits at position 1 predict completion token 0, at 3 predict completion token 2
    assert columns["loss_mask"].tolist() == [False, True, False, True, False] * 2
    assert columns["inference_logprobs"].tolist() == pytest.approx([0, -0.1, 0, -0.3, 0] * 2)


def test_zero_loss_weight_removes_sample():
    s = Sample([7], [1, 2], [1, 1], [-0.1, -0.2], advantage=1.0, loss_weight=0.0)
    assert not packed_row([s]).loss_mask.any()


def test_piece_index_lays_token_ranges_end_to_end():
    index = piece_index(torch.tensor([10, 3, 7]), torch.tensor([2, 0, 3]))
    assert index.tolist() == [10, 11, 7, 8, 9]


def test_a_shared_prompt_row_carries_the_prompt_once():
    a = Sample([1, 2, 3], [4, 5], [1, 1], [-0.1, -0.2], 1.0)
    b = Sample([1, 2, 3], [6], [1], [-0.3], -1.0)
    row = packed_row([[a, b]])
    assert row.input_ids.tolist() == [[1, 2, 3, 4, 5, 3, 6]]
    assert row.position_ids.tolist() == [[0, 1, 2, 3, 4, 2, 3]]
    assert row.target_ids.tolist() == [2, 3, 4, 5, 0, 6, 0]
    assert row.loss_mask.tolist() == [False, False, True, True, False, True, False]
    assert row.sample_ids.tolist() == [0, 0, 0, 0, 0, 1, 1]
    visible = row.attention_mask[0, 0]
    assert visible[5].tolist() == [True, True, False, False, False, True, False]  # b: prompt
    assert visible[4].tolist() == [True] * 5 + [False] * 2


def test_packing_follows_the_written_groups():
    batch = BatchTensors.from_batch(grouped_batch(2))
    rows = pack_samples(batch, 64, share=True)
    units = sorted(sorted(u) for row in rows for u in row)
    group_ids = batch.group_ids.tolist()
    assert all(len({group_ids[i] for i in unit}) == 1 for unit in units)
    assert sorted(i for u in units for i in u) == list(range(batch.num_samples))
    assert max(len(u) for u in units) > 1


# -- bad and old files -----------------------------------------------------------------------


def rewrite(folder: Path, meta_changes: dict | None = None, **tensors) -> None:
    """Change a written batch's metadata and tensors in place (to break them)."""
    meta = json.loads((folder / BATCH_META).read_text()) | (meta_changes or {})
    (folder / BATCH_META).write_text(json.dumps(meta))
    t = load_batch(folder).tensors() | tensors
    save_file({k: v for k, v in t.items() if v is not None}, str(folder / BATCH_TENSORS_FILE))


def test_an_old_format_batch_is_a_clear_error_naming_the_file(tmp_path: Path):
    folder = tmp_path / "step_0"
    folder.mkdir()
    (folder / BATCH_META).write_text(json.dumps({"step": 0, "temperature": 1.0, "num_samples": 1}))
    with pytest.raises(BatchError, match=rf"{folder / BATCH_META} is batch format 1, .* format 2"):
        load_batch(folder)


@pytest.mark.parametrize(
    "breakage, message",
    [
        (
            lambda f: (f / BATCH_TENSORS_FILE).write_bytes(b"\x08garbage"),
            "cannot read batch tensors",
        ),
        (lambda f: (f / BATCH_META).write_text("{"), "cannot read batch metadata"),
        (lambda f: rewrite(f, group_ids=None), "lacks tensor.s. group_ids"),
        (lambda f: rewrite(f, rewards=torch.zeros(3)), r"tensor rewards is torch.float32 \[3\]"),
        (lambda f: rewrite(f, num_loss_tokens=torch.tensor([9, 0, 0, 0, 0, 0])), "num_loss_tokens"),
        (lambda f: rewrite(f, group_ids=torch.zeros(6, dtype=torch.long)), "prompt differs"),
        (
            lambda f: rewrite(f, policy_mask=torch.ones_like(load_batch(f).policy_mask)),
            "policy_mask marks prompt tokens",
        ),
    ],
)
def test_a_broken_batch_is_a_clear_error_naming_the_file(tmp_path: Path, breakage, message):
    folder = tmp_path / "step_0"
    write_batch(random_batch(0), folder)
    breakage(folder)
    with pytest.raises(BatchError, match=message) as info:
        wait_for_batch(folder, timeout_s=1)
    assert str(folder) in str(info.value)


# -- packing ---------------------------------------------------------------------------------


def test_packing_respects_budget_and_keeps_every_sample():
    batch = BatchTensors.from_batch(random_batch(0, num_samples=20))
    rows = pack_samples(batch, 24)
    assert all(len(unit) == 1 for row in rows for unit in row)  # no prompts shared
    lengths = batch.lengths.tolist()
    assert all(sum(lengths[i] for (i,) in row) <= 24 for row in rows)
    assert sorted(i for row in rows for (i,) in row) == list(range(20))


def test_sample_longer_than_budget_is_a_clear_error():
    batch = Batch(
        step=3,
        temperature=1.0,
        samples=[Sample([1] * 10, [2] * 10, [1] * 10, [0.0] * 10, advantage=1.0)],
    )
    with pytest.raises(BatchError, match="batch 3, sample 0 has 20 tokens"):
        pack_samples(BatchTensors.from_batch(batch), 16)


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("share", [False, True])
def test_ranks_get_equal_micro_batch_counts_and_all_tokens(world_size, share):
    batch = grouped_batch(world_size) if share else random_batch(0, num_samples=7)
    tensors = BatchTensors.from_batch(batch)
    per_rank = [split_for_ranks(tensors, 40, r, world_size, share) for r in range(world_size)]
    assert len({len(mbs) for mbs in per_rank}) == 1
    masked = sum(int(mb.loss_mask.sum()) for mbs in per_rank for mb in mbs)
    assert masked == tensors.total_loss_tokens == loss_tokens(batch)


def test_wait_for_batch_reads_and_times_out(tmp_path: Path):
    folder = tmp_path / "rollouts" / "step_0"
    with pytest.raises(TimeoutError, match=str(folder)):
        wait_for_batch(folder, timeout_s=0.3, poll_s=0.05)
    write_batch(random_batch(0), folder)
    assert wait_for_batch(folder, timeout_s=1).num_samples == 6


def test_lr_schedules():
    warm = OptimConfig(lr=1.0, warmup_steps=4, scheduler="linear", min_lr=0.2)
    assert [lr_factor(warm, 8, s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(warm, 8, 4) == 1.0 and lr_factor(warm, 8, 8) == pytest.approx(0.2)
    cos = OptimConfig(lr=1.0, scheduler="cosine")
    assert lr_factor(cos, 10, 5) == pytest.approx(0.5)
    assert lr_factor(OptimConfig(), 10, 7) == 1.0


def test_several_gpus_reexec_under_torchrun(monkeypatch):
    from trainer import dist

    calls = []
    monkeypatch.setattr(dist.os, "execv", lambda exe, cmd: calls.append(cmd))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6")
    dist.maybe_reexec_under_torchrun(["@", "t.toml"])
    assert calls == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    dist.maybe_reexec_under_torchrun(["@", "t.toml"])
    assert calls[0][-5:] == ["--nproc-per-node=2", "-m", "trainer.main", "@", "t.toml"]
    monkeypatch.setenv("LOCAL_RANK", "0")  # already under torchrun
    dist.maybe_reexec_under_torchrun(["@", "t.toml"])
    assert len(calls) == 1


def test_tokens_per_pass_defaults_by_device():
    from trainer.config import TrainerConfig

    short, long = TrainerConfig(seq_len=256), TrainerConfig(seq_len=2048)
    assert short.tokens_per_pass(on_cpu=True) == 512  # measured fastest on the quick start
    assert short.tokens_per_pass(on_cpu=False) == 256
    assert long.tokens_per_pass(on_cpu=True) == 2048  # never below seq_len
    explicit = TrainerConfig(seq_len=256, data={"micro_batch_tokens": 300})
    assert explicit.tokens_per_pass(on_cpu=True) == 300
