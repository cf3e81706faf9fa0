"""The policy-gradient losses on hand-computed cases."""

import math

import pytest
import torch

from rlcore.protocol import Sample
from trainer.config import RatioClipLossConfig, RatioMaskLossConfig
from trainer.data import make_micro_batch
from trainer.loss import LOSS_BUILDERS, build_loss, compute_loss, token_logprobs


def test_builders_cover_every_loss_type():
    from typing import get_args

    from trainer.config import LossConfig

    union = get_args(get_args(LossConfig)[0])
    assert {cls.model_fields["type"].default for cls in union} == set(LOSS_BUILDERS)


def test_ratio_clip_token_values():
    loss = build_loss(RatioClipLossConfig(clip_low=0.2, clip_high=0.28))
    ratio = torch.tensor([1.0, 1.5, 1.5, 0.5, 0.5])
    adv = torch.tensor([2.0, 1.0, -1.0, 1.0, -1.0])
    per_token, clipped = loss(ratio, adv)
    # -min(rA, clip(r)A): clip range [0.8, 1.28]
    expected = [-2.0, -1.28, 1.5, -0.5, 0.8]
    assert per_token.tolist() == pytest.approx(expected)
    assert clipped.tolist() == [False, True, False, False, True]


def test_ratio_mask_token_values():
    loss = build_loss(RatioMaskLossConfig(low=0.5, high=2.0))
    ratio = torch.tensor([1.0, 0.4, 2.5, 1.5])
    adv = torch.tensor([1.0, 1.0, 1.0, -2.0])
    per_token, dropped = loss(ratio, adv)
    assert per_token.tolist() == pytest.approx([-1.0, 0.0, 0.0, 3.0])
    assert dropped.tolist() == [False, True, True, False]


def two_token_case():
    """One sample: prompt [5], completion [1, 2] (second token masked out by the env)."""
    sample = Sample(
        prompt_ids=[5],
        completion_ids=[1, 2],
        completion_mask=[1, 0],
        completion_logprobs=[math.log(0.5), 0.0],
        advantage=2.0,
        loss_weight=0.5,
    )
    return make_micro_batch([sample])


def test_compute_loss_matches_hand_value():
    mb = two_token_case()
    # vocab of 3; logits at position 0 score completion token 1
    logits = torch.tensor([[0.0, 2.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    temperature = 2.0
    p = math.exp(1.0) / (math.exp(1.0) + 2)  # softmax([0, 1, 0])[1]
    ratio = p / 0.5
    # ratio_clip with A = 2: clip range [0.8, 1.28]
    surrogate = min(ratio * 2, min(max(ratio, 0.8), 1.28) * 2)
    expected = -surrogate * 0.5 / 1  # loss_weight 0.5, one unmasked token in the batch
    loss, sums = compute_loss(logits, mb, temperature, build_loss(RatioClipLossConfig()), 1)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert sums.tokens == 1
    assert sums.mismatch_kl == pytest.approx(ratio - 1 - math.log(ratio), rel=1e-5)
    probs = torch.softmax(logits[0] / temperature, -1)
    assert sums.entropy == pytest.approx(float(-(probs * probs.log()).sum()), rel=1e-5)


def test_loss_is_normalised_by_batch_tokens():
    mb = two_token_case()
    logits = torch.randn(3, 3)
    token_loss = build_loss(RatioClipLossConfig())
    one, _ = compute_loss(logits, mb, 1.0, token_loss, 1)
    four, _ = compute_loss(logits, mb, 1.0, token_loss, 4)
    assert four.item() == pytest.approx(one.item() / 4)


def test_gradient_only_through_unmasked_tokens():
    mb = two_token_case()
    logits = torch.randn(3, 3, requires_grad=True)
    loss, _ = compute_loss(logits, mb, 1.0, build_loss(RatioClipLossConfig(clip_high=10)), 1)
    loss.backward()
    grad_norms = logits.grad.norm(dim=-1)
    assert grad_norms[0] > 0  # the one trained token
    assert grad_norms[1:].tolist() == [0.0, 0.0]  # env-written token, sample's last position


def test_dropped_tokens_get_no_gradient():
    mb = two_token_case()
    mb.inference_logprobs[0] = -20.0  # ratio far above `high`
    logits = torch.randn(3, 3, requires_grad=True)
    loss, sums = compute_loss(logits, mb, 1.0, build_loss(RatioMaskLossConfig()), 1)
    loss.backward()
    assert logits.grad.abs().sum().item() == 0.0
    assert sums.clipped == 1.0


def test_temperature_scales_logits():
    logits = torch.tensor([[1.0, 3.0]])
    logp, _ = token_logprobs(logits, torch.tensor([1]), 2.0)
    assert logp.item() == pytest.approx(math.log(math.exp(1.5) / (math.exp(0.5) + math.exp(1.5))))
