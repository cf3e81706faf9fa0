"""The chunked logprob head: per-token logprobs and entropy of the target tokens, straight from
the final hidden states, `chunk` tokens at a time, only at the positions the loss uses. The
[tokens x vocab] logits never exist in fp32 for the whole row: forward keeps one logsumexp per
token, backward recomputes each chunk's logits (online, like forward) and accumulates the
gradients of the hidden states and of the head's weight.

It runs inside the model's forward (the head's `forward` answers a `LogprobRequest` set just
before the call), so FSDP2 has the head's weight gathered whenever it is used, in forward and
in backward, and the state dict keeps its keys."""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class LogprobRequest:
    targets: torch.Tensor
    """[T] the next token at each position."""
    mask: torch.Tensor
    """[T] bool: positions whose logprob the loss uses."""
    temperature: float


class ChunkedLogprobs(torch.autograd.Function):
    """(hidden [N, H], weight [V, H], targets [N]) -> logprobs [N] fp32, entropy [N] fp32 (no
    gradient), with logits computed in `dtype` and normalised in fp32."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk, dtype):
        w = weight.to(dtype)
        logprobs = torch.empty(len(hidden), dtype=torch.float32, device=hidden.device)
        entropy = torch.empty_like(logprobs)
        lse = torch.empty_like(logprobs)
        for start in range(0, len(hidden), chunk):
            end = start + chunk
            logits = (hidden[start:end].to(dtype) @ w.T).float() / temperature
            lse[start:end] = torch.logsumexp(logits, dim=-1)
            probs = torch.exp(logits - lse[start:end, None])
            logprobs[start:end] = logits.gather(1, targets[start:end, None])[:, 0] - lse[start:end]
            entropy[start:end] = lse[start:end] - (probs * logits).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature, ctx.chunk, ctx.dtype = temperature, chunk, dtype
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, _grad_entropy):
        hidden, weight, targets, lse = ctx.saved_tensors
        dtype, temperature = ctx.dtype, ctx.temperature
        w = weight.to(dtype)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, len(hidden), ctx.chunk):
            end = start + ctx.chunk
            h = hidden[start:end].to(dtype)
            logits = (h @ w.T).float() / temperature
            g = grad_logprobs[start:end].float()
            # d logprob(target) / d logits = onehot(target) - softmax, scaled by 1/temperature.
            dlogits = -torch.exp(logits - lse[start:end, None]) * g[:, None]
            dlogits.scatter_add_(1, targets[start:end, None], g[:, None])
            dlogits = (dlogits / temperature).to(dtype)
            grad_hidden[start:end] = (dlogits @ w).to(hidden.dtype)
            grad_weight += (dlogits.T @ h).float()
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None, None


def install(model: nn.Module, chunk: int, dtype: torch.dtype) -> None:
    """Make the model's output head answer `head.request` (a LogprobRequest) with [1, T, 2]
    (logprob, entropy) instead of logits; with no request it computes logits as before."""
    head = model.get_output_embeddings()
    plain = head.forward
    head.request = None

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        request: LogprobRequest | None = head.request
        if request is None:
            return plain(hidden)
        rows = hidden[0]
        index = request.mask.nonzero()[:, 0]
        with torch.autocast(rows.device.type, enabled=False):
            logprobs, entropy = ChunkedLogprobs.apply(
                rows[index], head.weight, request.targets[index], request.temperature, chunk,
                dtype,
            )  # fmt: skip
        size = (rows.shape[0],)
        full = torch.zeros(size, dtype=torch.float32, device=rows.device)
        full = full.index_put((index,), logprobs)
        entropies = torch.zeros(size, dtype=torch.float32, device=rows.device)
        entropies = entropies.index_put((index,), entropy)
        return torch.stack([full, entropies], dim=-1)[None]

    head.forward = forward


def request_logprobs(model: nn.Module, request: LogprobRequest | None) -> None:
    model.get_output_embeddings().request = request
