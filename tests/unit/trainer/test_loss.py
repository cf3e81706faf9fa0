"""The policy-gradient losses on hand-computed cases."""

import math

import pytest
import torch
from test_trainer_data import packed_row

from rlcore.contracts.protocol import Sample
from trainer.config import (
    DualClipLossConfig,
    GspoLossConfig,
    ProbMaskLossConfig,
    RatioClipLossConfig,
    RatioMaskLossConfig,
    SequenceMaskLossConfig,
    TisLossConfig,
)
from trainer.loss import LOSS_BUILDERS, LossInputs, build_loss, compute_loss, token_logprobs


def test_builders_cover_every_loss_type():
    from typing import get_args

    from trainer.config import LossConfig

    union = get_args(get_args(LossConfig)[0])
    assert {cls.model_fields["type"].default for cls in union} == set(LOSS_BUILDERS)


def terms_and_gradient(config, inference_logprobs, logprobs, advantages, sample_ids=None):
    """The variant's per-token terms and d(sum of per-token losses) / d logp_trainer."""
    logp = torch.tensor(logprobs, dtype=torch.float64, requires_grad=True)
    num = len(logprobs)
    inputs = LossInputs(
        logp,
        torch.tensor(inference_logprobs, dtype=torch.float64),
        torch.tensor(advantages, dtype=torch.float64),
        torch.ones(num, dtype=torch.bool),
        torch.tensor(sample_ids if sample_ids is not None else list(range(num))),
    )
    terms = build_loss(config)(inputs)
    terms.loss.sum().backward()
    return terms, logp.grad.tolist()


LOG5, LOG_01, LOG_05 = math.log(5), math.log(0.1), math.log(0.5)

# One token sampled at p = 0.1 that the trainer now gives p = 0.5 (ratio 5), advantage -1. The
# on-policy gradient of the loss w.r.t. log p is -A = 1: plain PPO pushes 5 times as hard.
OFF_POLICY_NEGATIVE = {
    "ratio_clip": (RatioClipLossConfig(), 5.0, "neither"),
    "dual_clip": (DualClipLossConfig(c=3.0), 0.0, "clipped"),
    "ratio_mask": (RatioMaskLossConfig(low=0.5, high=2.0), 0.0, "masked"),
    "sequence_mask": (SequenceMaskLossConfig(), 0.0, "masked"),
    # probability rose by 0.4 while A < 0: prime-rl's mask (a fall of > 0.2) does not fire
    "prob_mask": (ProbMaskLossConfig(), 5.0 + 2e-3 * LOG5, "neither"),
    "tis": (TisLossConfig(cap=2.0), 2.0, "clipped"),
    "gspo": (GspoLossConfig(), 5.0, "neither"),  # PPO's min keeps r A for A < 0
}


@pytest.mark.parametrize("variant", list(OFF_POLICY_NEGATIVE))
def test_ratio_5_with_negative_advantage(variant):
    config, gradient, flag = OFF_POLICY_NEGATIVE[variant]
    terms, grad = terms_and_gradient(config, [LOG_01], [LOG_05], [-1.0])
    assert grad == [pytest.approx(gradient, rel=1e-9)]
    assert terms.clipped.tolist() == [flag == "clipped"]
    assert terms.masked.tolist() == [flag == "masked"]


def test_the_off_policy_table_covers_every_variant():
    assert set(OFF_POLICY_NEGATIVE) == set(LOSS_BUILDERS)


@pytest.mark.parametrize("variant", list(OFF_POLICY_NEGATIVE))
def test_on_policy_every_variant_is_the_policy_gradient(variant):
    """r = 1: d loss / d log p = -A for every token, whatever the variant."""
    config = OFF_POLICY_NEGATIVE[variant][0]
    logp = [-1.0, -2.0, -0.5, -3.0]
    terms, grad = terms_and_gradient(config, logp, logp, [1.0, -1.0, 2.0, -0.5], [0, 0, 1, 1])
    assert grad == pytest.approx([-1.0, 1.0, -2.0, 0.5], rel=1e-9)
    assert not terms.clipped.any() and not terms.masked.any()


def test_ratio_clip_is_asymmetric():
    """clip-higher: the ratio may rise to 1.28 but fall only to 0.8 before the clip bites."""
    config = RatioClipLossConfig(clip_low=0.2, clip_high=0.28)
    ratios = [1.25, 1.3, 0.85, 0.75]
    advantages = [1.0, 1.0, -1.0, -1.0]
    terms, grad = terms_and_gradient(config, [0.0] * 4, [math.log(r) for r in ratios], advantages)
    assert grad == pytest.approx([-1.25, 0.0, 0.85, 0.0])
    assert terms.loss.tolist() == pytest.approx([-1.25, -1.28, 0.85, 0.8])
    assert terms.clipped.tolist() == [False, True, False, True]


def test_dual_clip_caps_the_loss_at_c_times_abs_advantage():
    config = DualClipLossConfig(c=3.0)
    ratios, advantages = [2.5, 3.5, 5.0], [-2.0, -2.0, 1.0]
    terms, grad = terms_and_gradient(config, [0.0] * 3, [math.log(r) for r in ratios], advantages)
    assert grad == pytest.approx([5.0, 0.0, 0.0])  # below c: PPO's -r A; above: flat
    assert terms.loss.tolist() == pytest.approx([5.0, 6.0, -1.28])
    assert terms.clipped.tolist() == [False, True, True]


def test_dual_clip_must_exceed_the_ppo_clip():
    with pytest.raises(ValueError, match=r"loss.c = 1.2 must exceed 1 \+ loss.clip_high"):
        DualClipLossConfig(c=1.2)


def test_ratio_mask_drops_tokens_outside_the_bounds():
    config = RatioMaskLossConfig(low=0.5, high=2.0)
    ratios, advantages = [1.0, 0.4, 2.5, 1.5], [1.0, 1.0, 1.0, -2.0]
    terms, grad = terms_and_gradient(config, [0.0] * 4, [math.log(r) for r in ratios], advantages)
    assert terms.loss.tolist() == pytest.approx([-1.0, 0.0, 0.0, 3.0])
    assert grad == pytest.approx([-1.0, 0.0, 0.0, 3.0])
    assert terms.masked.tolist() == [False, True, True, False]


def test_sequence_mask_drops_whole_samples_by_their_geometric_mean_ratio():
    config = SequenceMaskLossConfig(low=0.8, high=1.25)
    ratios = [1.1, 0.95, 2.0, 1.5, 0.9]  # samples 0 (mean ratio ~1.02) and 1 (~1.73)
    advantages = [1.0, 1.0, -1.0, -1.0, -1.0]
    log_r = [math.log(r) for r in ratios]
    terms, grad = terms_and_gradient(config, [0.0] * 5, log_r, advantages, [0, 0, 1, 1, 1])
    assert grad == pytest.approx([-1.1, -0.95, 0.0, 0.0, 0.0])
    assert terms.masked.tolist() == [False, False, True, True, True]


def test_prob_mask_drops_moves_in_the_advantages_direction():
    """prime-rl's default: A > 0 and p up by more than 0.2, or A < 0 and p down by more than
    0.2, are dropped; (log r)^2 / 1000 acts on every token."""
    config = ProbMaskLossConfig(mask_low=0.2, mask_high=0.2, kl_tau=1e-3)
    inference = [math.log(0.3), math.log(0.6), math.log(0.6), math.log(0.3)]
    trainer = [math.log(0.6), math.log(0.3), math.log(0.3), math.log(0.45)]
    advantages = [1.0, 1.0, -1.0, -1.0]
    terms, grad = terms_and_gradient(config, inference, trainer, advantages)
    kl = [2e-3 * (t - i) for t, i in zip(trainer, inference, strict=True)]
    assert grad == pytest.approx([kl[0], -0.5 + kl[1], kl[2], 1.5 + kl[3]])
    assert terms.masked.tolist() == [True, False, True, False]


def test_tis_truncates_the_importance_weight():
    config = TisLossConfig(cap=2.0)
    ratios, advantages = [0.5, 3.0, 3.0], [1.0, 1.0, -1.0]
    terms, grad = terms_and_gradient(config, [0.0] * 3, [math.log(r) for r in ratios], advantages)
    assert grad == pytest.approx([-0.5, -2.0, 2.0])
    assert terms.loss.tolist() == pytest.approx([-0.5, -2.0, 2.0])
    assert terms.clipped.tolist() == [False, True, True]


def test_gspo_clips_the_sequence_ratio():
    """Sample 0's token ratios average to 1 (inside the clip): each token gets -A; sample 1's
    sequence ratio e^0.2 is above 1 + 4e-4: clipped for A > 0 (no gradient)."""
    config = GspoLossConfig()
    log_r = [0.1, -0.1, 0.2, 0.2, 0.2, 0.2]
    advantages = [2.0, 2.0, 1.0, 1.0, -1.0, -1.0]
    terms, grad = terms_and_gradient(config, [0.0] * 6, log_r, advantages, [0, 0, 1, 1, 2, 2])
    s = math.exp(0.2)
    assert grad == pytest.approx([-2.0, -2.0, 0.0, 0.0, s, s])
    assert terms.clipped.tolist() == [False, False, True, True, False, False]


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
    return packed_row([sample])


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
    assert sums.masked == 1.0 and sums.clipped == 0.0


def test_temperature_scales_logits():
    logits = torch.tensor([[1.0, 3.0]])
    logp, _ = token_logprobs(logits, torch.tensor([1]), 2.0)
    assert logp.item() == pytest.approx(math.log(math.exp(1.5) / (math.exp(0.5) + math.exp(1.5))))


def test_packed_samples_get_their_own_sample_ids_and_sequence_ratio():
    """GSPO through a packed micro-batch: each sample's sequence ratio is its own."""
    samples = [
        Sample([5], [1, 2], [1, 1], [math.log(0.25)] * 2, advantage=1.0),
        Sample([6, 7], [3], [1], [math.log(0.125)], advantage=1.0),
    ]
    mb = packed_row(samples)
    assert mb.sample_ids.tolist() == [0, 0, 0, 1, 1, 1]
    # uniform logits over a vocab of 8: p = 0.125 everywhere, so sample 1 is on-policy (s = 1)
    # and sample 0's sequence ratio is 0.5, far below the clip: A > 0 keeps its gradient.
    logits = torch.zeros(6, 8, requires_grad=True)
    loss, sums = compute_loss(logits, mb, 1.0, build_loss(GspoLossConfig()), 3)
    assert sums.tokens == 3 and sums.clipped == 0.0
    assert loss.item() == pytest.approx(-(0.5 + 0.5 + 1.0) / 3)
