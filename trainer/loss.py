"""Token-level policy-gradient losses with an importance ratio against the inference engine.

ratio = exp(logp_train - logp_inference) per token. Each variant maps (ratio, advantage) to a
per-token loss and a flag for tokens it clipped or dropped; `compute_loss` sums the per-token
losses of unmasked tokens, times the sample's loss_weight, and divides by the number of
unmasked tokens in the whole batch (all micro-batches, all ranks).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainer.config import RatioClipLossConfig, RatioMaskLossConfig
from trainer.data import MicroBatch

# (ratio, advantages) -> (per-token loss, per-token clipped flag)
TokenLoss = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def ratio_clip_loss(config: RatioClipLossConfig) -> TokenLoss:
    """PPO's clipped surrogate: -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)."""
    low, high = 1 - config.clip_low, 1 + config.clip_high

    def loss(ratio: torch.Tensor, advantages: torch.Tensor):
        unclipped = ratio * advantages
        clipped = ratio.clamp(low, high) * advantages
        return -torch.minimum(unclipped, clipped), clipped < unclipped

    return loss


def ratio_mask_loss(config: RatioMaskLossConfig) -> TokenLoss:
    """-r A for tokens with low <= r <= high; tokens outside are dropped (no gradient)."""

    def loss(ratio: torch.Tensor, advantages: torch.Tensor):
        dropped = (ratio < config.low) | (ratio > config.high)
        return torch.where(dropped, 0.0, -ratio * advantages), dropped

    return loss


LOSS_BUILDERS: dict[str, Callable[..., TokenLoss]] = {
    "ratio_clip": ratio_clip_loss,
    "ratio_mask": ratio_mask_loss,
}


def build_loss(config: RatioClipLossConfig | RatioMaskLossConfig) -> TokenLoss:
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
    tokens: int = 0

    def add(self, other: "LossSums") -> None:
        self.entropy += other.entropy
        self.mismatch_kl += other.mismatch_kl
        self.clipped += other.clipped
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
    log_ratio = torch.where(mask, logprobs - mb.inference_logprobs, 0.0)
    ratio = torch.exp(log_ratio)
    per_token, clipped = token_loss(ratio, mb.advantages)
    weights = mask.float() * mb.loss_weights
    loss = (per_token * weights).sum() / max(num_batch_tokens, 1)
    with torch.no_grad():
        r = ratio.detach()
        kl = r - 1 - log_ratio.detach()  # k3 estimate of KL(inference || trainer)
        sums = LossSums(
            entropy=float(entropy[mask].sum()),
            mismatch_kl=float(kl[mask].sum()),
            clipped=float(clipped[mask].sum()),
            tokens=int(mask.sum()),
        )
    return loss, sums
