"""Batch waiting, packing into micro-batches, and the learning-rate schedule."""

import random
from pathlib import Path

import pytest

from rlcore.protocol import Batch, Sample, write_batch
from trainer.config import OptimConfig
from trainer.data import pack_samples, sample_arrays, split_for_ranks, wait_for_batch
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


def test_sample_arrays_align_targets_with_logits():
    s = Sample([7, 8], [1, 2, 3], [1, 0, 1], [-0.1, -0.2, -0.3], advantage=1.5)
    a = sample_arrays(s)
    assert a["input_ids"] == [7, 8, 1, 2, 3]
    assert a["target_ids"][:4] == [8, 1, 2, 3]
    # logits at position 1 predict completion token 0, at 3 predict completion token 2
    assert a["loss_mask"] == [False, True, False, True, False]
    assert a["inference_logprobs"] == [0.0, -0.1, 0.0, -0.3, 0.0]


def test_zero_loss_weight_removes_sample():
    s = Sample([7], [1, 2], [1, 1], [-0.1, -0.2], advantage=1.0, loss_weight=0.0)
    assert not any(sample_arrays(s)["loss_mask"])


def test_packing_respects_budget_and_keeps_every_sample():
    batch = random_batch(0, num_samples=20)
    rows = pack_samples(batch.samples, 24, step=0)
    assert all(len(unit) == 1 for row in rows for unit in row)  # no prompts shared
    assert all(sum(len(s.prompt_ids) + len(s.completion_ids) for (s,) in r) <= 24 for r in rows)
    assert sorted(id(s) for r in rows for (s,) in r) == sorted(id(s) for s in batch.samples)


def test_sample_longer_than_budget_is_a_clear_error():
    batch = Batch(step=3, temperature=1.0, samples=[Sample([1] * 10, [2] * 10, [1] * 10,
                                                           [0.0] * 10, advantage=1.0)])  # fmt: skip
    with pytest.raises(ValueError, match="batch 3, sample 0 has 20 tokens"):
        pack_samples(batch.samples, 16, step=3)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ranks_get_equal_micro_batch_counts_and_all_tokens(world_size):
    batch = random_batch(0, num_samples=7)
    per_rank = [split_for_ranks(batch, 24, r, world_size) for r in range(world_size)]
    assert len({len(mbs) for mbs in per_rank}) == 1
    masked = sum(int(mb.loss_mask.sum()) for mbs in per_rank for mb in mbs)
    assert masked == sum(sum(sample_arrays(s)["loss_mask"]) for s in batch.samples)


def test_wait_for_batch_reads_and_times_out(tmp_path: Path):
    folder = tmp_path / "rollouts" / "step_0"
    with pytest.raises(TimeoutError, match=str(folder)):
        wait_for_batch(folder, timeout_s=0.3, poll_s=0.05)
    write_batch(random_batch(0), folder)
    assert len(wait_for_batch(folder, timeout_s=1).samples) == 6


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
