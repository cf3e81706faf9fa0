"""Policy-gradient losses with an importance ratio against the inference engine.

ratio r = exp(logp_train - logp_inference) per token. Each variant maps a micro-batch's
`LossInputs` to per-token losses and two flags per token: `clipped` (the variant bounded the
token's gradient: a clip or a cap) and `masked` (it dropped the token). `loss_from_logprobs`
sums the per-token losses of loss tokens, times the sample's loss_weight, and divides by the
number of loss tokens in the whole batch (all micro-batches, all ranks). docs/losses.md gives
each variant's gradient and the peers' definitions and defaults.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainer.config import (
    DualClipLossConfig,
    GspoLossConfig,
    ProbMaskLossConfig,
    RatioClipLossConfig,
    RatioMaskLossConfig,
    SequenceMaskLossConfig,
    TisLossConfig,
)
from trainer.data import MicroBatch


@dataclass
class LossInputs:
    """One micro-batch's per-token inputs ([T] each); only `mask` positions count."""

    logprobs: torch.Tensor
    """The trainer's logprobs (differentiable)."""
    inference_logprobs: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    """bool: loss positions."""
    sample_ids: torch.Tensor
    """int64: the packed sample each position belongs to (0, 1, ... within the micro-batch)."""

    @property
    def log_ratio(self) -> torch.Tensor:
        return torch.where(self.mask, self.logprobs - self.inference_logprobs, 0.0)


@dataclass
class TokenTerms:
    loss: torch.Tensor
    """[T] per-token loss."""
    clipped: torch.Tensor
    """[T] bool: a clip or cap bounded this token's gradient."""
    masked: torch.Tensor
    """[T] bool: the token was dropped from the loss."""


TokenLoss = Callable[[LossInputs], TokenTerms]


def ppo_surrogate(ratio, advantages, low: float, high: float):
    """-min(r A, clip(r, low, high) A) and whether the clip won."""
    unclipped = ratio * advantages
    clipped = ratio.clamp(low, high) * advantages
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def ratio_clip_loss(config: RatioClipLossConfig) -> TokenLoss:
    """PPO's clipped surrogate, asymmetric bounds (clip-higher)."""
    low, high = 1 - config.clip_low, 1 + config.clip_high

    def loss(x: LossInputs) -> TokenTerms:
        per_token, clipped = ppo_surrogate(torch.exp(x.log_ratio), x.advantages, low, high)
        return TokenTerms(per_token, clipped, torch.zeros_like(clipped))

    return loss


def dual_clip_loss(config: DualClipLossConfig) -> TokenLoss:
    """`ratio_clip`, and for A < 0 the loss capped at c |A|: no gradient once r > c."""
    low, high = 1 - config.clip_low, 1 + config.clip_high

    def loss(x: LossInputs) -> TokenTerms:
        per_token, clipped = ppo_surrogate(torch.exp(x.log_ratio), x.advantages, low, high)
        cap = -config.c * x.advantages
        dual = (x.advantages < 0) & (per_token > cap)
        return TokenTerms(torch.where(dual, cap, per_token), clipped | dual, torch.zeros_like(dual))

    return loss


def ratio_mask_loss(config: RatioMaskLossConfig) -> TokenLoss:
    """-r A for tokens with low <= r <= high; tokens outside are dropped (no gradient)."""

    def loss(x: LossInputs) -> TokenTerms:
        ratio = torch.exp(x.log_ratio)
        dropped = (ratio < config.low) | (ratio > config.high)
        per_token = torch.where(dropped, 0.0, -ratio * x.advantages)
        return TokenTerms(per_token, torch.zeros_like(dropped), dropped)

    return loss


def sample_mean(values: torch.Tensor, x: LossInputs) -> torch.Tensor:
    """Each position gets the mean of `values` over its sample's loss positions."""
    num_samples = int(x.sample_ids.max()) + 1
    weights = x.mask.to(values.dtype)
    sums = torch.zeros(num_samples, dtype=values.dtype, device=values.device)
    sums = sums.index_add(0, x.sample_ids, values * weights)
    counts = torch.zeros_like(sums).index_add(0, x.sample_ids, weights)
    return (sums / counts.clamp_min(1))[x.sample_ids]


def sequence_mask_loss(config: SequenceMaskLossConfig) -> TokenLoss:
    """-r A per token; every token of a sample whose geometric-mean ratio leaves [low, high]
    is dropped."""

    def loss(x: LossInputs) -> TokenTerms:
        ratio = torch.exp(x.log_ratio)
        sequence_ratio = torch.exp(sample_mean(x.log_ratio.detach(), x))
        dropped = (sequence_ratio < config.low) | (sequence_ratio > config.high)
        per_token = torch.where(dropped, 0.0, -ratio * x.advantages)
        return TokenTerms(per_token, torch.zeros_like(dropped), dropped)

    return loss


def prob_mask_loss(config: ProbMaskLossConfig) -> TokenLoss:
    """prime-rl's default: drop tokens whose probability moved too far in the direction their
    advantage pushes; -r A on the rest, plus kl_tau (log r)^2 on all."""

    def loss(x: LossInputs) -> TokenTerms:
        log_ratio = x.log_ratio
        moved = torch.exp(x.logprobs) - torch.exp(x.inference_logprobs)
        dropped = torch.where(x.advantages > 0, moved > config.mask_high, False)
        dropped |= torch.where(x.advantages < 0, moved < -config.mask_low, False)
        policy = torch.where(dropped, 0.0, -torch.exp(log_ratio) * x.advantages)
        per_token = policy + config.kl_tau * log_ratio**2
        return TokenTerms(per_token, torch.zeros_like(dropped), dropped)

    return loss


def tis_loss(config: TisLossConfig) -> TokenLoss:
    """-sg(min(r, cap)) A log p: the gradient is min(r, cap) A grad log p."""

    def loss(x: LossInputs) -> TokenTerms:
        ratio = torch.exp(x.log_ratio.detach())
        capped = ratio > config.cap
        weight = ratio.clamp(max=config.cap)
        # log_ratio differs from log p by a constant: same gradient, and the loss value reads
        # as the importance-weighted surrogate (-r A) for tokens under the cap.
        per_token = -weight * x.advantages * (x.log_ratio - x.log_ratio.detach() + 1)
        return TokenTerms(per_token, capped, torch.zeros_like(capped))

    return loss


def gspo_loss(config: GspoLossConfig) -> TokenLoss:
    """PPO's clip on each sample's sequence ratio s = exp(mean log r); the token ratio
    sg(s) * r / sg(r) has value s and the gradient of log p (GSPO-token)."""
    low, high = 1 - config.clip_low, 1 + config.clip_high

    def loss(x: LossInputs) -> TokenTerms:
        log_ratio = x.log_ratio
        sequence_log_ratio = sample_mean(log_ratio.detach(), x)
        token_ratio = torch.exp(sequence_log_ratio + log_ratio - log_ratio.detach())
        per_token, clipped = ppo_surrogate(token_ratio, x.advantages, low, high)
        return TokenTerms(per_token, clipped, torch.zeros_like(clipped))

    return loss


LOSS_BUILDERS: dict[str, Callable[..., TokenLoss]] = {
    "ratio_clip": ratio_clip_loss,
    "dual_clip": dual_clip_loss,
    "ratio_mask": ratio_mask_loss,
    "sequence_mask": sequence_mask_loss,
    "prob_mask": prob_mask_loss,
    "tis": tis_loss,
    "gspo": gspo_loss,
}


def build_loss(config) -> TokenLoss:
    return LOSS_BUILDERS[config.type](config)


def token_logprobs(
    logits: torch.Tensor, target_ids: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob of each target token under logits / temperature, and the (detached) entropy."""
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)
    chosen = logprobs.gather(-1, target_ids[:, None]).squeeze(-1)
    with torch.no_grad():
        entropy = -(logprobs.exp() * logprobs).sum(-1)
    return chosen, entropy


@dataclass
class LossSums:
    """Sums over unmasked tokens, for metrics (divide by the token count)."""

    entropy: float = 0.0
    mismatch_kl: float = 0.0
    clipped: float = 0.0
    masked: float = 0.0
    tokens: int = 0

    def add(self, other: "LossSums") -> None:
        self.entropy += other.entropy
        self.mismatch_kl += other.mismatch_kl
        self.clipped += other.clipped
        self.masked += other.masked
        self.tokens += other.tokens


def compute_loss(
    logits: torch.Tensor,
    micro_batch: MicroBatch,
    temperature: float,
    token_loss: TokenLoss,
    num_batch_tokens: int,
) -> tuple[torch.Tensor, LossSums]:
    """This micro-batch's share of the batch loss (`logits` is [T, vocab])."""
    logprobs, entropy = token_logprobs(logits, micro_batch.target_ids, temperature)
    return loss_from_logprobs(logprobs, entropy, micro_batch, token_loss, num_batch_tokens)


def loss_from_logprobs(
    logprobs: torch.Tensor,
    entropy: torch.Tensor,
    micro_batch: MicroBatch,
    token_loss: TokenLoss,
    num_batch_tokens: int,
) -> tuple[torch.Tensor, LossSums]:
    """`compute_loss` from per-token logprobs and entropies ([T] each, e.g. the chunked head's)."""
    mb = micro_batch
    mask = mb.loss_mask
    inputs = LossInputs(logprobs, mb.inference_logprobs, mb.advantages, mask, mb.sample_ids)
    terms = token_loss(inputs)
    weights = mask.float() * mb.loss_weights
    loss = (terms.loss * weights).sum() / max(num_batch_tokens, 1)
    with torch.no_grad():
        log_ratio = inputs.log_ratio.detach()
        kl = torch.exp(log_ratio) - 1 - log_ratio  # k3 estimate of KL(inference || trainer)
        sums = LossSums(
            entropy=float(entropy[mask].sum()),
            mismatch_kl=float(kl[mask].sum()),
            clipped=float(terms.clipped[mask].sum()),
            masked=float(terms.masked[mask].sum()),
            tokens=int(mask.sum()),
        )
    return loss, sums
