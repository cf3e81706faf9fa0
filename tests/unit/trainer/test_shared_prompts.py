"""Samples of one prompt packed with one shared copy of it (data.share_prompts): the logprobs
and gradients of every family that takes it equal those of each sample alone, packing keeps
every loss token within the budget, and models it cannot serve keep plain rows and say why."""

import logging
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from families import FAMILIES  # noqa: E402
from test_trainer_data import loss_tokens, packed_row  # noqa: E402

from rlcore.contracts.protocol import Batch, BatchTensors, Sample  # noqa: E402
from trainer.attention import shared_prompt_blocker  # noqa: E402
from trainer.config import TrainerModelConfig  # noqa: E402
from trainer.data import Sizes, pack_samples  # noqa: E402
from trainer.model import load_model  # noqa: E402
from trainer.train import forward_logprobs  # noqa: E402

VOCAB = 512


def groups(seed: int = 0, prompts=(6, 4, 9), group=4, alone=2) -> list:
    """`len(prompts)` groups of `group` samples with one prompt each (lists), then `alone`
    samples on their own prompts, completions of random lengths and masks."""
    gen = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(0, VOCAB, (n,), generator=gen).tolist()

    def sample(prompt: list[int]) -> Sample:
        n = int(torch.randint(1, 14, (1,), generator=gen))
        mask = (torch.rand(n, generator=gen) < 0.8).int().tolist()
        advantage = float(torch.randn((), generator=gen))
        return Sample(prompt, ids(n), mask, [0.0] * n, advantage=advantage)

    out = [[sample(p) for _ in range(group)] for p in (ids(n) for n in prompts)]
    return out + [sample(ids(5)) for _ in range(alone)]


def flat(items: list) -> list[Sample]:
    return [s for item in items for s in (item if isinstance(item, list) else [item])]


def logprobs_and_grads(model, world, items) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss-position logprobs of one row of `items`, and the gradients of a fixed weighting."""
    model.zero_grad(set_to_none=True)
    mb = packed_row(items)
    logprobs, _ = forward_logprobs(model, world, mb, 0.8)
    picked = logprobs[mb.loss_mask]
    weights = torch.linspace(-1, 1, picked.numel())
    (picked * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return picked.detach(), grads


def load(model_dir: Path, world, **fields):
    config = TrainerModelConfig(name=str(model_dir), dtype="float32", **fields)
    return load_model(config, str(model_dir), world)


@pytest.mark.parametrize("family", FAMILIES)
def test_shared_prompts_give_each_samples_own_logprobs_and_gradients(
    family_dirs, cpu_world, family
):
    model = load(family_dirs[family], cpu_world, logprob_chunk_tokens=16)
    blocker = shared_prompt_blocker(model, seq_len=64)
    if family == "gemma2":  # attention softcap: eager on CPU, which reads no explicit mask
        assert blocker == "attention is eager; an explicit mask needs sdpa"
        return
    assert blocker is None
    items = groups()
    shared_mb = packed_row(items)
    plain_mb = packed_row(flat(items))
    assert shared_mb.attention_mask is not None and plain_mb.attention_mask is None
    assert plain_mb.num_tokens - shared_mb.num_tokens == 3 * (5 + 3 + 8)  # 3 fewer copies each
    assert torch.equal(shared_mb.loss_mask.sum(), plain_mb.loss_mask.sum())
    shared, shared_grads = logprobs_and_grads(model, cpu_world, items)
    plain, plain_grads = logprobs_and_grads(model, cpu_world, flat(items))
    torch.testing.assert_close(shared, plain, atol=2e-5, rtol=0)
    assert shared_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=2e-5, rtol=1e-4, msg=name)


def test_a_wrong_mask_is_caught(family_dirs, cpu_world):
    """Guards the test above: completions that also see each other give other logprobs."""
    model = load(family_dirs["llama"], cpu_world)
    items = groups()
    mb = packed_row(items)
    mb.attention_mask = torch.ones_like(mb.attention_mask).tril()
    with torch.no_grad():
        leaky, _ = forward_logprobs(model, cpu_world, mb, 0.8)
    right, _ = logprobs_and_grads(model, cpu_world, items)
    assert (leaky[mb.loss_mask] - right).abs().max() > 1e-2


def test_packing_shares_prompts_and_splits_groups_past_the_budget():
    items = groups(1, prompts=(20, 3), group=8, alone=3)
    samples = [
        replace(s, group_id=g)
        for g, item in enumerate(items)
        for s in (item if isinstance(item, list) else [item])
    ]
    batch = BatchTensors.from_batch(Batch(step=0, temperature=1.0, samples=samples))
    sizes = Sizes.of(batch)
    plain = pack_samples(batch, 64)
    shared = pack_samples(batch, 64, share=True)
    assert all(sum(sizes.unit_tokens(u) for u in row) <= 64 for row in shared)
    assert sorted(i for row in shared for u in row for i in u) == list(range(len(samples)))
    tokens = sum(sizes.unit_tokens(u) for row in shared for u in row)
    assert tokens < sum(sizes.unit_tokens(u) for row in plain for u in row)
    units = [u for row in shared for u in row]
    assert sum(len(u) > 1 and sizes.prompt_lens[u[0]] == 20 for u in units) >= 2  # split, shared
    rows = [[[samples[i] for i in u] for u in row] for row in shared]
    masked = sum(int(packed_row(row).loss_mask.sum()) for row in rows)
    assert masked == batch.total_loss_tokens == loss_tokens(Batch(0, 1.0, samples))


def test_sharing_is_off_with_a_reason_where_the_mask_would_be_ignored(family_dirs, cpu_world):
    model = load(family_dirs["llama"], cpu_world, attn_implementation="eager")
    assert shared_prompt_blocker(model, 64) == "attention is eager; an explicit mask needs sdpa"
    model = load(family_dirs["qwen3"], cpu_world)
    model.config.sliding_window, model.config.use_sliding_window = 16, True
    assert "sliding window (16 tokens) is shorter than seq_len" in shared_prompt_blocker(model, 64)
    assert shared_prompt_blocker(model, 16) is None


def test_the_trainer_logs_its_choice(tmp_path, tiny_model_dir, cpu_world, fake_config, caplog):
    from trainer.train import decide_share_prompts

    config = fake_config(tiny_model_dir, tmp_path / "run")
    model = load(tiny_model_dir, cpu_world)
    with caplog.at_level(logging.INFO, logger="trainer"):
        assert decide_share_prompts(config, model)
    assert "shared prompts: on" in caplog.text
    off = config.model_copy(
        update={"data": config.data.model_copy(update={"share_prompts": False})}
    )
    assert not decide_share_prompts(off, model)
